"""msroute: Multinomial Subset Routing with OMD-Approachability.

Learn online whom to route each query to when only the team's sum-max reward is observed and
long-term packing/covering constraints must hold. Everything users need is importable from
here; see the documentation site for a tour.

Examples
--------
>>> import msroute
>>> problem = msroute.Problem([[1.0], [0.0], [0.5]], m_draws=2,
...                           constraints=msroute.Constraints(upper=[1.0]))
>>> policy = msroute.OMDApproachability(problem, horizon=100, n_runs=2, seed=0)
>>> policy.select().draws.shape
(2, 2)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from msroute._version import __version__
from msroute.core.oracle import (
    OracleResult,
    best_fixed_policy,
    best_fixed_policy_for,
    contextual_opt,
)
from msroute.core.problem import Constraints, Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.core.qp.projection import project_step
from msroute.core.reward import (
    batch_sum_max_reward,
    expected_reward,
    expected_reward_grad,
    monte_carlo_reward,
    sum_max_reward,
)
from msroute.datasets import CrowdData, Instance, build_instance, load_crowd, sample_instance
from msroute.envs import RegimeSwitchingEnv, SequenceEnv, SkillEnv, StochasticEnv
from msroute.errors import (
    CacheWarning,
    ConfigError,
    ConvergenceWarning,
    DataFormatError,
    DataWarning,
    DecisionConflictError,
    EmptyFeasibleSetError,
    InfeasibleConstraintsError,
    InvalidFeedbackError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    JournalError,
    MSRouteError,
    MSRouteWarning,
    PolicyCheckError,
    PolicyFileError,
    ResourceError,
    RouterConfigError,
    UnknownDecisionError,
    UnsupportedEstimateError,
)
from msroute.metrics import (
    bound_report,
    constraint_regret,
    feasible,
    objective_regret_proxy,
    rolling_mean,
    time_averaged,
    true_regret,
)
from msroute.policies import (
    CUCB,
    POLICIES,
    BasePolicy,
    CBwK,
    ContextualOMD,
    FixedPolicy,
    GreedyPolicy,
    MoEGating,
    OMDApproachability,
    Policy,
    RandomPolicy,
    ThompsonSampling,
    ThompsonSamplingBwK,
    UniformPolicy,
    available_policies,
    load_policy,
    make_policy,
    save_policy,
)
from msroute.simulate import Trajectory, simulate

if TYPE_CHECKING:
    from msroute.router import RoutedDecision, Router, RouterConfig, evaluate

#: Names loaded on first use, so that ``import msroute`` does not load the router's journal
#: machinery (sqlite3) for users who only simulate.
_LAZY = {
    "RoutedDecision": "msroute.router",
    "Router": "msroute.router",
    "RouterConfig": "msroute.router",
    "evaluate": "msroute.router",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'msroute' has no attribute {name!r}")


def __dir__() -> list[str]:
    """Every public name, the lazily loaded ones too (without loading them)."""
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "CUCB",
    "POLICIES",
    "BasePolicy",
    "CBwK",
    "CacheWarning",
    "ConfigError",
    "Constraints",
    "ContextualOMD",
    "ConvergenceWarning",
    "CrowdData",
    "DataFormatError",
    "DataWarning",
    "DecisionConflictError",
    "EmptyFeasibleSetError",
    "FixedPolicy",
    "GreedyPolicy",
    "InfeasibleConstraintsError",
    "Instance",
    "InvalidFeedbackError",
    "InvalidStateError",
    "InvalidTypeError",
    "InvalidValueError",
    "JournalError",
    "MSRouteError",
    "MSRouteWarning",
    "MoEGating",
    "OMDApproachability",
    "OracleResult",
    "Policy",
    "PolicyCheckError",
    "PolicyFileError",
    "Problem",
    "ProblemBatch",
    "RandomPolicy",
    "RegimeSwitchingEnv",
    "ResourceError",
    "RoutedDecision",
    "Router",
    "RouterConfig",
    "RouterConfigError",
    "SequenceEnv",
    "SkillEnv",
    "StochasticEnv",
    "ThompsonSampling",
    "ThompsonSamplingBwK",
    "Trajectory",
    "UniformPolicy",
    "UnknownDecisionError",
    "UnsupportedEstimateError",
    "__version__",
    "available_policies",
    "batch_sum_max_reward",
    "best_fixed_policy",
    "best_fixed_policy_for",
    "bound_report",
    "build_instance",
    "constraint_regret",
    "contextual_opt",
    "evaluate",
    "expected_reward",
    "expected_reward_grad",
    "feasible",
    "load_crowd",
    "load_policy",
    "make_policy",
    "monte_carlo_reward",
    "objective_regret_proxy",
    "project_step",
    "rolling_mean",
    "sample_instance",
    "save_policy",
    "simulate",
    "sum_max_reward",
    "time_averaged",
    "true_regret",
]
