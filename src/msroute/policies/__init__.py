"""Routing policies: OMD-Approachability and the paper's baselines, behind one batched API."""

from __future__ import annotations

from msroute.policies.base import BasePolicy, Policy
from msroute.policies.omd import ApproachabilityDual, ContextualOMD, OMDApproachability
from msroute.policies.registry import (
    POLICIES,
    available_policies,
    get_policy_class,
    make_policy,
)

__all__ = [
    "POLICIES",
    "ApproachabilityDual",
    "BasePolicy",
    "ContextualOMD",
    "OMDApproachability",
    "Policy",
    "available_policies",
    "get_policy_class",
    "make_policy",
]
