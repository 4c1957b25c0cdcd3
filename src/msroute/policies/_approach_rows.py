"""The approachability dual's step and realized-cost moments, row by row
(``msroute.policies.duals.ApproachabilityDual``).

One function each, run two ways: in Python floats on nested lists for one run (a live router,
which imports no numba), and compiled for the (R, d) arrays of a batch
(``msroute.policies._compiled.dual``). Both give the floats of numpy's elementwise form.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["observe_rows", "step_rows"]


def step_rows(
    w: Any,
    u: Any,
    scale: Any,
    lo: Any,
    hi: Any,
    pad_sd: float,
    pad_den: float,
    m2: Any,
    n_obs: int,
    pad_cap: Any,
    lower: Any,
    upper: Any,
    tol: float,
    step: float,
    out: Any,
) -> None:
    """The invariant dual's step, row by row: ``out`` (R, d) gets the new ``w``.

    For each run: the box ``[lo, hi]`` (open sides infinite) shrunk by the budget margin
    ``min(pad_sd sd / pad_den, pad_cap)`` when ``pad_sd > 0`` (``sd`` the spread of the
    ``n_obs`` realized costs in ``m2``), everything divided by ``scale``; the subgradient
    ``u - x*`` with ``x*`` the box's support point (``u`` clipped where ``w = 0``, and a
    gradient within ``tol`` there set to 0); the ascent step; the cone of Lemma 4's
    maximisers (no weight against a missing bound); the projection on the unit ball.

    Written once for nested lists (one run, in Python floats) and for arrays (a batch: the
    same function compiled, ``msroute.policies._compiled.dual``). Each value takes the
    operations of numpy's elementwise form, and the sum of squares numpy's pairwise order
    (blocks of 8, for up to 128 coordinates), so both give numpy's floats bit for bit.
    """
    for r in range(len(w)):
        w_r, out_r = w[r], out[r]
        d = len(w_r)
        for j in range(d):
            lo_j, hi_j = lo[r][j], hi[r][j]
            if pad_sd > 0.0:
                pad = pad_sd * math.sqrt(m2[r][j] / (n_obs - 1)) / pad_den
                cap = pad_cap[r][j]
                if not pad <= cap:
                    pad = cap
                lo_j, hi_j = lo_j + pad, hi_j - pad
            s = scale[r][j]
            u_j, lo_j, hi_j = u[r][j] / s, lo_j / s, hi_j / s
            w_j = w_r[j]
            if w_j > 0.0:
                point = hi_j
            elif w_j < 0.0:
                point = lo_j
            else:  # numpy's clip: the max with lo, then the min with hi
                point = u_j if u_j > lo_j else lo_j
                point = point if point < hi_j else hi_j
            grad = u_j - point
            if w_j == 0.0 and abs(grad) <= tol:
                grad = 0.0
            v = w_j + step * grad
            if not lower[r][j] and not v >= 0.0:  # np.maximum(v, 0.0)
                v = 0.0
            if not upper[r][j] and not v <= 0.0:  # np.minimum(v, 0.0)
                v = 0.0
            out_r[j] = v
        if d < 8:
            total = 0.0
            for j in range(d):
                total += out_r[j] * out_r[j]
        else:
            a0, a1 = out_r[0] * out_r[0], out_r[1] * out_r[1]
            a2, a3 = out_r[2] * out_r[2], out_r[3] * out_r[3]
            a4, a5 = out_r[4] * out_r[4], out_r[5] * out_r[5]
            a6, a7 = out_r[6] * out_r[6], out_r[7] * out_r[7]
            j = 8
            while j < d - d % 8:
                a0 += out_r[j] * out_r[j]
                a1 += out_r[j + 1] * out_r[j + 1]
                a2 += out_r[j + 2] * out_r[j + 2]
                a3 += out_r[j + 3] * out_r[j + 3]
                a4 += out_r[j + 4] * out_r[j + 4]
                a5 += out_r[j + 5] * out_r[j + 5]
                a6 += out_r[j + 6] * out_r[j + 6]
                a7 += out_r[j + 7] * out_r[j + 7]
                j += 8
            total = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
            while j < d:
                total += out_r[j] * out_r[j]
                j += 1
        norm = math.sqrt(total)
        if not norm >= 1.0:  # np.maximum(norm, 1.0): w / 1.0 inside the ball, w exactly
            norm = 1.0
        for j in range(d):
            out_r[j] = out_r[j] / norm


def observe_rows(cost: Any, mean: Any, m2: Any, n_obs: int, mean_out: Any, m2_out: Any) -> None:
    """Welford's update of the realized cost's running moments with the ``n_obs``-th cost,
    row by row, in numpy's elementwise operations; for lists (one run) and, compiled, for
    arrays, like ``step_rows``."""
    for r in range(len(cost)):
        for j in range(len(cost[r])):
            delta = cost[r][j] - mean[r][j]
            new_mean = mean[r][j] + delta / n_obs
            mean_out[r][j] = new_mean
            m2_out[r][j] = m2[r][j] + delta * (cost[r][j] - new_mean)
