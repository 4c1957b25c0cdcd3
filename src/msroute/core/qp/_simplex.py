"""The floored simplex ``{q : sum q = 1, q >= gamma}`` and the accuracy guard of a cut's solution.

What every projection of ``msroute.core.qp.projection`` and ``msroute.core.qp.projection_cuts``
starts from (the projection onto the floored simplex by sort and threshold, relative to the
largest entry) and what each of their binding-cut solutions is checked with (``_accurate``: on
the simplex and on the cut, to the tolerances below).
"""

from __future__ import annotations

import functools

import numpy as np

from msroute._validation import BoolArray, FloatArray

__all__: list[str] = []

#: Relative tolerance (of ``max |a|``, the scale of ``a . q``) for an empty or degenerate cut.
FEASIBILITY_RTOL = 1e-10

_EPS = float(np.finfo(np.float64).eps)

#: The largest float (the cap of a multiplier; the limit mu -> inf of a face).
_FLOAT_MAX_F = float(np.finfo(np.float64).max)
#: Relative to the largest entry, every entry below -1 is at the floor of the floored simplex
#: (the top entry's value is at most 1, so the threshold is at least top - 1): clipping there
#: changes no projection and keeps every sum of order one, whatever the scale of the input.
_FAR = -2.0


@functools.lru_cache(maxsize=16)
def _ranks(k: int) -> FloatArray:
    """``1, 2, ..., K`` as floats (cached: the hot path calls this every step)."""
    out = np.arange(1.0, k + 1.0)
    out.setflags(write=False)
    return out


def _floored_simplex(z: FloatArray, gamma: float) -> tuple[FloatArray, BoolArray, FloatArray]:
    """Project each row of ``z`` (n, K) onto ``{q : sum q = 1, q >= gamma}`` by sort and threshold.

    Returns ``q`` (n, K), the boolean mask of coordinates above the floor, and the threshold
    ``tau`` (n,) with ``q = max(gamma, z - tau)``.
    """
    n, k = z.shape
    mass = 1.0 - k * gamma
    if mass <= 0.0:  # K gamma = 1: the set is the single point 1/K
        tau = z.max(axis=-1) - 1.0 / k
        return np.full((n, k), 1.0 / k), np.zeros((n, k), dtype=bool), tau
    top = z.max(axis=-1)
    with np.errstate(over="ignore"):  # -inf for a spread beyond the float range: floored anyway
        rel = z - top[:, None]
    # Shift-invariant: work relative to the top, and clip at _FAR (see there), so the sums
    # stay of order one whatever the scale of z (a shift by the top after the threshold would
    # round away the whole simplex once |z| >> 1/eps).
    np.maximum(rel, _FAR, out=rel)
    u = np.sort(rel, axis=-1)[:, ::-1]
    css = np.cumsum(u, axis=-1)
    css -= mass
    # The top rho coordinates are free: rho = #{j : u_j > (sum_{i<=j} u_i - mass) / j} >= 1.
    rho = np.count_nonzero(u * _ranks(k) > css, axis=-1)
    tau_rel = css[np.arange(n), rho - 1] / rho - gamma
    shifted = rel - tau_rel[:, None]
    return np.maximum(shifted, gamma), shifted > gamma, tau_rel + top


def _sum_tol(k: int) -> float:
    """How far ``sum(q)`` may be from one: 1e-12, or the rounding of K entries if larger."""
    return max(1e-12, 2.0 * k * _EPS)


def _accurate(q: FloatArray, mu: FloatArray, a: FloatArray, b: FloatArray) -> BoolArray:
    """Rows of a binding cut (``mu > 0``) whose floating-point solution can be trusted.

    The point must be finite, sum to one within ``_sum_tol`` and lie on the cut,
    ``|a . q - b| <= FEASIBILITY_RTOL * max|a|`` (a binding cut holds with equality). Inputs of
    an extreme scale (``|y|`` near ``1/eps`` and beyond) can fail this through cancellation in
    ``y - mu a``; such rows are solved again in exact arithmetic
    (``msroute.core.qp._exact_cut.exact_cut``).
    """
    k = q.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        ok_sum = np.abs(q.sum(axis=-1) - 1.0) <= _sum_tol(k)
        ok_cut = np.abs(np.vecdot(a, q) - b) <= FEASIBILITY_RTOL * np.abs(a).max(axis=-1)
    ok: BoolArray = ok_sum & ok_cut & np.isfinite(mu)
    return ok
