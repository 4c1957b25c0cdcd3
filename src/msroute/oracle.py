"""The public path of ``msroute.core.oracle``: its public names, re-exported (the module and
its documentation live there)."""

from msroute.core.oracle import (
    ContextualOracleResult,
    OracleResult,
    best_fixed_policy,
    best_fixed_policy_for,
    contextual_opt,
)

__all__ = [
    "ContextualOracleResult",
    "OracleResult",
    "best_fixed_policy",
    "best_fixed_policy_for",
    "contextual_opt",
]
