"""The range checks of a batch's feedback, compiled (numba): one pass instead of a numpy
comparison per array, on the path of every update."""

from __future__ import annotations

from msroute._jit import compiled
from msroute._validation import FloatArray, IntArray

__all__ = ["feedback_in_range"]


@compiled
def feedback_in_range(
    reward: FloatArray,
    low: float,
    high: float,
    cost: FloatArray,
    cap: FloatArray,
    draws: IntArray,
    n_experts: int,
) -> bool:
    """Whether a batch's feedback passes ``msroute.policies.base.BasePolicy.update``'s
    range checks, in one loop: ``low <= reward <= high`` (R,), ``0 <= cost <= cap`` (R, d) and
    ``0 <= draws < n_experts`` (R, M); NaN fails. The update names what fails by numpy."""
    for r in range(reward.shape[0]):
        x = reward[r]
        if not (x >= low and x <= high):
            return False
        for j in range(cost.shape[1]):
            y = cost[r, j]
            if not (y >= 0.0 and y <= cap[r, j]):
                return False
        for j in range(draws.shape[1]):
            if draws[r, j] < 0 or draws[r, j] >= n_experts:
                return False
    return True
