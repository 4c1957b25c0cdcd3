"""Crowd-labelling data sets and the MSR instances built from them (the paper's Section 6.1).

The TREC 2010 Crowdsourcing Track files ship with the package (``load_crowd()`` with no
argument), and so does a five-grade web relevance set (``load_crowd(dataset="web")``); any pair
of files in the same format works too.
"""

from __future__ import annotations

from msroute.datasets.crowd import DATASETS, TREC2010_SHA256, WEB_SHA256, CrowdData, load_crowd
from msroute.datasets.instance import (
    Instance,
    build_instance,
    fit_beta_prior,
    fit_beta_strength,
    sample_instance,
)

__all__ = [
    "DATASETS",
    "TREC2010_SHA256",
    "WEB_SHA256",
    "CrowdData",
    "Instance",
    "build_instance",
    "fit_beta_prior",
    "fit_beta_strength",
    "load_crowd",
    "sample_instance",
]
