"""Routing policies: OMD-Approachability and the paper's baselines, behind one batched API."""

from __future__ import annotations

from msroute.policies.bandit import (
    CUCB,
    CBwK,
    GreedyPolicy,
    RandomPolicy,
    ThompsonSampling,
    ThompsonSamplingBwK,
)
from msroute.policies.base import BasePolicy, Policy, set_debug_checks
from msroute.policies.fixed import FixedPolicy, UniformPolicy
from msroute.policies.lagrangian import LagrangianDual
from msroute.policies.moe import MoEGating
from msroute.policies.omd import ApproachabilityDual, OMDApproachability
from msroute.policies.omd_contextual import ContextualOMD
from msroute.policies.persist import PolicyFileError, load_policy, save_policy
from msroute.policies.registry import (
    POLICIES,
    available_policies,
    get_policy_class,
    make_policy,
)
from msroute.policies.state_walk import check_state

__all__ = [
    "CUCB",
    "POLICIES",
    "ApproachabilityDual",
    "BasePolicy",
    "CBwK",
    "ContextualOMD",
    "FixedPolicy",
    "GreedyPolicy",
    "LagrangianDual",
    "MoEGating",
    "OMDApproachability",
    "Policy",
    "PolicyFileError",
    "RandomPolicy",
    "ThompsonSampling",
    "ThompsonSamplingBwK",
    "UniformPolicy",
    "available_policies",
    "check_state",
    "get_policy_class",
    "load_policy",
    "make_policy",
    "save_policy",
    "set_debug_checks",
]
