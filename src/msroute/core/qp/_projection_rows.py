"""The projection of many rows under one cut each (``msroute.core.qp.projection._solve``'s batch).

Step 1 of ``msroute.core.qp.projection``'s method (the active-set Newton iteration on ``(tau, mu)``)
for all rows at once, and step 2 (the safeguarded search on ``mu``) for the rows it leaves;
the face of a degenerate cut, the diagnosis of an empty one, and the exact rational solve of
a row whose floats fail the check (``msroute.core.qp._exact_cut``).
"""

from __future__ import annotations

import numpy as np

from msroute._validation import BoolArray, FloatArray
from msroute.core.qp._exact_cut import exact_cut
from msroute.core.qp._simplex import (
    _EPS,
    _FAR,
    _FLOAT_MAX_F,
    FEASIBILITY_RTOL,
    _accurate,
    _floored_simplex,
)
from msroute.errors import EmptyFeasibleSetError

__all__: list[str] = []

_MAX_ACTIVE_SET_STEPS = 8
_MAX_SEARCH_STEPS = 400
#: Largest mu (for max|a| = 1) the search tries, far below overflow of y - mu a.
_MU_CAP = 1e250


def _empty_message(
    reach: float, b: float, gamma: float, k: int, row: int | None, unit: float = 1.0
) -> str:
    """The diagnosis of an empty cut. ``reach`` and ``b`` are those of the cut divided by
    ``unit`` (max|a| where that is extreme, else 1): the message gives them in the cut's own
    units, and also in ``unit``'s where those differ (the decision was taken there)."""
    where = "" if row is None else f" in row {row} (flattened leading axes)"
    scaled = "" if unit == 1.0 else f" ({reach:.10g} in units of max|a| = {unit:.6g})"
    scaled_b = "" if unit == 1.0 else f" ({b:.10g} in those units)"
    return (
        f"the half-space a . q <= b misses the floored simplex{where}: the smallest "
        f"reachable a . q is gamma * sum(a) + (1 - K gamma) * min(a) = {reach * unit:.10g}"
        f"{scaled}, but b == {b * unit:.10g}{scaled_b} (gamma = {gamma:.6g}, K = {k}). No "
        "q >= gamma meets the cut; check that the constraints are feasible "
        "(Problem.check_feasible) with this floor."
    )


def _solve_rows(
    y: FloatArray, gamma: float, a: FloatArray, b: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Rows of (n, K) problems; see ``_solve``."""
    n, k = y.shape
    q, free, _ = _floored_simplex(y, gamma)
    mu = np.zeros(n)
    cut = np.flatnonzero(np.vecdot(a, q) > b)
    if cut.size == 0:
        return q, mu
    amax = np.abs(a[cut]).max(axis=-1)
    cut = cut[amax > 0.0]  # a = 0: no cut
    if cut.size == 0:
        return q, mu
    ac, bc, yc = a[cut], b[cut], y[cut]
    # (a, b) / max|a| is the same cut, whose multiplier is max|a| times that of (a, b).
    scale = np.ones_like(amax)
    if not np.all((amax > 1e-100) & (amax < 1e100)):
        ac, bc, scale = ac / amax[:, None], bc / amax, amax
    mass = max(1.0 - k * gamma, 0.0)
    amin = ac.min(axis=-1)
    reach = gamma * ac.sum(axis=-1) + mass * amin
    tol = FEASIBILITY_RTOL * np.abs(ac).max(axis=-1)
    empty = bc < reach - tol
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise EmptyFeasibleSetError(
            _empty_message(float(reach[i]), float(bc[i]), gamma, k, int(cut[i]), float(scale[i]))
        )
    face = bc <= reach + tol
    if face.any():
        rows = np.flatnonzero(face)
        q[cut[rows]], mf = _face_point(yc[rows], gamma, ac[rows], amin[rows])
        mu[cut[rows]] = _unscaled(mf, scale[rows])
    rows = np.flatnonzero(~face)
    if rows.size:
        idx = cut[rows]
        qa, ma = _cut_active(yc[rows], gamma, ac[rows], bc[rows], free[idx])
        for j in np.flatnonzero(~_accurate(qa, ma, ac[rows], bc[rows])).tolist():
            r = int(rows[j])
            qa[j], ma[j] = exact_cut(yc[r], gamma, ac[r], float(bc[r]), float(ma[j]))
        q[idx], mu[idx] = qa, _unscaled(ma, scale[rows])
    return q, mu


def _face_point(
    y: FloatArray, gamma: float, a: FloatArray, amin: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Projection onto the face ``{q_i = gamma where a_i > min a}`` (the limit ``mu -> inf``).

    Also returns the smallest ``mu >= 0`` that certifies it (the KKT multiplier).
    """
    k = y.shape[-1]
    at_min = a == amin[:, None]
    top = np.where(at_min, y, -np.inf).max(axis=-1)
    # Relative to the largest entry on the face (exact near it, whatever the scale of y);
    # coordinates off the face sit at _FAR below it: the threshold floors them.
    with np.errstate(over="ignore"):
        rel = y - top[:, None]
    z = np.where(at_min, rel, _FAR)
    q, _, tau = _floored_simplex(z, gamma)
    if 1.0 - k * gamma <= 0.0:
        return q, np.zeros(y.shape[0])
    with np.errstate(over="ignore", invalid="ignore"):  # inf gaps (a spread over ~1e308)
        gap = np.where(at_min, 1.0, a - amin[:, None])  # and subnormal ones give inf/0 needs
        need = np.where(at_min, 0.0, (rel - tau[:, None] - gamma) / gap)
    return q, np.maximum(np.nan_to_num(need, nan=0.0).max(axis=-1), 0.0)


def _cut_active(
    y: FloatArray, gamma: float, a: FloatArray, b: FloatArray, free: BoolArray
) -> tuple[FloatArray, FloatArray]:
    """Rows whose cut binds (``a . q(0) > b``) and is not degenerate: find ``mu > 0``.

    Active-set Newton steps from ``free`` (the free set at ``mu = 0``) on all rows at once; a
    row leaves the working set as soon as its point satisfies every KKT condition. Rows that
    do not settle go to ``_search_mu``.
    """
    n = y.shape[0]
    # (a, b) and (a, b) / max|a| cut the same set; mu scales back on return.
    scale = np.abs(a).max(axis=-1)
    a = a / scale[:, None]
    b = b / scale
    asum = a.sum(axis=-1)
    slack_base = 64.0 * _EPS * (np.abs(y).max(axis=-1) + 1.0)
    q = np.empty_like(y)
    mu = np.zeros(n)
    todo = np.arange(n)
    for _ in range(_MAX_ACTIVE_SET_STEPS):
        z, m, ok = _active_set_solve(y, gamma, a, b, free, asum)
        new_free = z > gamma
        slack = (slack_base + 64.0 * _EPS * np.abs(z).max(axis=-1))[:, None]
        bad = np.where(free, z < gamma - slack, z > gamma + slack).any(axis=-1)
        good = ok & (m >= 0.0) & ~bad
        if good.all():
            q[todo], mu[todo] = np.maximum(z, gamma), m
            return q, _unscaled(mu, scale)
        free = new_free
        if good.any():  # settled rows leave the working set
            q[todo[good]], mu[todo[good]] = np.maximum(z[good], gamma), m[good]
            keep = ~good
            todo = todo[keep]
            y, a, b, asum, slack_base, free = (
                y[keep],
                a[keep],
                b[keep],
                asum[keep],
                slack_base[keep],
                free[keep],
            )
    q[todo], mu[todo] = _search_mu(y, gamma, a, b)
    return q, _unscaled(mu, scale)


def _unscaled(mu: FloatArray, scale: FloatArray) -> FloatArray:
    """The multiplier of the cut ``(a, b)`` from that of ``(a, b) / scale``, capped at the
    largest float (a certificate only: tiny ``a`` can need a multiplier beyond it, see
    ``msroute.core.qp._exact_cut.exact_cut``)."""
    with np.errstate(over="ignore"):
        out: FloatArray = np.minimum(mu / scale, _FLOAT_MAX_F)
    return out


def _active_set_solve(
    y: FloatArray,
    gamma: float,
    a: FloatArray,
    b: FloatArray,
    free: BoolArray,
    asum: FloatArray,
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """Solve ``sum q = 1``, ``a . q = b`` with ``q_F = y_F - mu a_F - tau`` and ``q = gamma`` off F.

    A constant added to ``a`` only shifts ``tau``, so the point is returned in the centred form
    ``z = y - mu (a - abar) - shift`` with ``abar`` the mean of ``a`` on ``F``; the shift
    ``(sum_F y - mass_F) / |F|`` does not involve ``mu``, which avoids the cancellation of
    ``y - mu a`` when ``mu`` is large. Returns ``z`` (n, K), ``mu`` (n,) and a mask of rows where
    the 2x2 system is solvable (``a`` not constant on ``F``).
    """
    k = y.shape[-1]
    fm = free.astype(np.float64)
    nf = fm.sum(axis=-1)
    nf_safe = np.maximum(nf, 1.0)
    a_f = a * fm
    a_free = a_f.sum(axis=-1)
    abar = a_free / nf_safe
    a_cen = a - abar[:, None]
    ac = a_cen * fm
    beta = np.vecdot(ac, ac)
    mass_free = 1.0 - gamma * (k - nf)
    rhs = np.vecdot(ac, y) + abar * mass_free - b + gamma * (asum - a_free)
    ok = (nf > 0) & (beta > (1e3 * _EPS) * np.vecdot(a_f, a_f))
    # Near 1/eps and beyond these can overflow: such rows fail _accurate and are solved exactly.
    with np.errstate(over="ignore", invalid="ignore"):
        mu = rhs / np.where(ok, beta, 1.0)
        shift = (np.vecdot(y, fm) - mass_free) / nf_safe
        z = y - mu[:, None] * a_cen - shift[:, None]
    return z, mu, ok


def _search_mu(
    y: FloatArray, gamma: float, a: FloatArray, b: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Safeguarded root search of ``a . q(mu) = b`` (rows with ``a . q(0) > b > min reach``).

    Newton steps on the current linear piece of ``mu -> a . q(mu)`` inside a bisection bracket.
    A row is done when a Newton step lands on a point whose free set is the one the step was
    computed from (the root of that piece, hence exact), when ``a . q = b`` to rounding, or when
    the bracket has shrunk to a few ulps.
    """
    n, k = y.shape
    # (a, b) and (a, b) / max|a| cut the same set; the multiplier scales back at the end.
    a_scale = np.abs(a).max(axis=-1)
    a = a / a_scale[:, None]
    b = b / a_scale
    amin = a.min(axis=-1)
    gap = np.where(a > amin[:, None], a - amin[:, None], np.inf).min(axis=-1)
    # For mu >= (ptp(y) + 1) / gap every coordinate with a_i > min(a) is at the floor, so
    # a . q(mu) is the smallest reachable value, which is below b: a valid upper bracket.
    with np.errstate(over="ignore"):
        hi = np.minimum((np.ptp(y, axis=-1) + 1.0) / gap * (1.0 + 1e-9), _MU_CAP)
    lo = np.zeros(n)
    mu = np.zeros(n)
    # q(mu) is the projection of y - mu (a - c) for any per-row constant c (it only shifts the
    # threshold); c = mean of a on the current free set keeps mu (a - c) small.
    centre = np.zeros(n)
    q, free, _ = _floored_simplex(y, gamma)
    f = np.vecdot(a, q)
    ftol = (8.0 * _EPS) * k * (np.abs(a).max(axis=-1) + np.abs(b))
    done = np.zeros(n, dtype=bool)
    exact = np.zeros(n, dtype=bool)
    newton = np.zeros(n, dtype=bool)
    prev_free = free
    for _ in range(_MAX_SEARCH_STEPS):
        above = f > b
        lo = np.where(above, np.maximum(lo, mu), lo)
        hi = np.where(above, hi, np.minimum(hi, mu))
        hit = ~done & ((np.abs(f - b) <= ftol) | (newton & np.all(free == prev_free, axis=-1)))
        exact |= hit
        done |= hit | (hi - lo <= 4.0 * _EPS * hi)
        if done.all():
            break
        fm = free.astype(np.float64)
        nf = np.maximum(fm.sum(axis=-1), 1.0)
        abar = np.vecdot(a, fm) / nf
        ac = (a - abar[:, None]) * fm
        slope = np.einsum("ij,ij->i", ac, ac)
        # A slope of 0 (or one so small that the step overflows) gives no finite candidate
        # inside the bracket, and the row bisects instead.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            cand = mu + (f - b) / slope
        step_ok = (slope > 0.0) & (cand > lo) & (cand < hi)
        # Bisect in log1p(mu): the bracket can span hundreds of orders of magnitude when a has
        # near-ties (the bound above divides by the smallest gap of a).
        mid = np.expm1(0.5 * (np.log1p(lo) + np.log1p(hi)))
        nxt = np.where(step_ok, cand, np.clip(mid, lo, hi))
        newton = step_ok & ~done
        mu = np.where(done, mu, nxt)
        centre = np.where(done, centre, abar)
        prev_free = free
        q, free, _ = _floored_simplex(y - mu[:, None] * (a - centre[:, None]), gamma)
        f = np.vecdot(a, q)
    # Rows that stopped on the bracket width sit within ulps of the root: take the feasible end.
    late = ~exact & (f > b)
    if np.any(late):
        mu[late] = hi[late]
        z = y[late] - mu[late, None] * (a[late] - centre[late, None])
        q[late] = _floored_simplex(z, gamma)[0]
    with np.errstate(over="ignore"):
        return q, mu / a_scale
