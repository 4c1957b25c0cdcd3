"""The public path of ``msroute.core.reward``: its public names, re-exported (the module and
its documentation live there)."""

from msroute.core.reward import (
    batch_sum_max_reward,
    context_scaled,
    draw_counts,
    draws_to_mask,
    expected_reward,
    expected_reward_grad,
    monte_carlo_reward,
    sum_max_reward,
)

__all__ = [
    "batch_sum_max_reward",
    "context_scaled",
    "draw_counts",
    "draws_to_mask",
    "expected_reward",
    "expected_reward_grad",
    "monte_carlo_reward",
    "sum_max_reward",
]
