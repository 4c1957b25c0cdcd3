"""Inverse-CDF draws of every run's routing distribution, compiled (numba): the draws of the
batched numpy form, in one loop."""

from __future__ import annotations

import numpy as np

from msroute._jit import compiled
from msroute._validation import FloatArray, IntArray

__all__ = ["inverse_cdf_draws"]


@compiled
def inverse_cdf_draws(u: FloatArray, q: FloatArray, out: IntArray) -> None:
    """``msroute.policies.sampling.sample_multinomial`` of every row, without a mask, in one loop.

    Row ``r``'s CDF is summed one entry after another (as ``cumsum``), each uniform
    ``u[r, m]`` is scaled by its last entry, and the draw is the number of CDF entries at most
    the scaled uniform, capped at ``K - 1``: the comparisons of the batched numpy form, counted
    the same way, so the same draws. ``u`` (R, M), ``q`` (R, K), ``out`` (R, M).
    """
    n_runs, k = q.shape
    cdf = np.empty(k)
    for r in range(n_runs):
        total = 0.0
        for j in range(k):
            total += q[r, j]
            cdf[j] = total
        for m in range(u.shape[1]):
            x = u[r, m] * total
            count = 0
            for j in range(k):
                if x >= cdf[j]:
                    count += 1
            out[r, m] = min(count, k - 1)
