"""msroute: Multinomial Subset Routing with OMD-Approachability.

Learn online whom to route each query to when only the team's sum-max reward is observed and
long-term packing/covering constraints must hold. See the README for a tour.
"""

from __future__ import annotations

from msroute.errors import (
    DataFormatError,
    EmptyFeasibleSetError,
    InfeasibleConstraintsError,
    MSRouteError,
)
from msroute.problem import Constraints, Problem
from msroute.reward import (
    batch_sum_max_reward,
    expected_reward,
    expected_reward_grad,
    monte_carlo_reward,
    sum_max_reward,
)

__version__ = "0.1.0"

__all__ = [
    "Constraints",
    "DataFormatError",
    "EmptyFeasibleSetError",
    "InfeasibleConstraintsError",
    "MSRouteError",
    "Problem",
    "__version__",
    "batch_sum_max_reward",
    "expected_reward",
    "expected_reward_grad",
    "monte_carlo_reward",
    "sum_max_reward",
]
