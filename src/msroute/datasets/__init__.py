"""Crowd-labelling data sets and the MSR instances built from them (the paper's Section 6.1).

The TREC 2010 Crowdsourcing Track files ship with the package (``load_crowd()`` with no
argument); any pair of files in the same format works too.
"""

from __future__ import annotations

from msroute.datasets.crowd import (
    TREC2010_SHA256,
    CrowdData,
    Instance,
    build_instance,
    load_crowd,
    sample_instance,
)

__all__ = [
    "TREC2010_SHA256",
    "CrowdData",
    "Instance",
    "build_instance",
    "load_crowd",
    "sample_instance",
]
