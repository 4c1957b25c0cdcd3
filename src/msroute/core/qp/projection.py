"""The exact proximal step (6) of Algorithm 1: a projection onto a cut, floored simplex.

Step (c) of Algorithm 1 solves the quadratic program (6):

    max_{q in Delta_K, q >= gamma}  q . g - eta/2 ||q - q_prev||^2   s.t.  w . (C^T q) <= h_S(w)

Completing the square, it is the Euclidean projection of ``y = q_prev + g / eta`` onto:

    P = {q : sum(q) = 1, q >= gamma, a . q <= b},   a = C w,  b = h_S(w).

Its KKT conditions read ``q = max(gamma, y - mu a - tau)`` (componentwise) with a threshold
``tau`` fixing ``sum(q) = 1`` and a multiplier ``mu >= 0`` of the half-space. For a fixed ``mu``
the map ``mu -> q(mu)`` is the projection of ``y - mu a`` onto the floored simplex, computed by
sort and threshold; ``a . q(mu)`` is piecewise linear and nonincreasing in ``mu``. If
``a . q(0) <= b`` the cut is inactive and ``mu = 0``; otherwise ``a . q(mu) = b`` is solved
exactly on the right linear piece:

1. an active-set (semismooth) Newton iteration: for a guess of the set ``F`` of coordinates above
   the floor, ``sum(q) = 1`` and ``a . q = b`` are two linear equations in ``(tau, mu)``; solve
   them, recompute ``F`` and stop as soon as the point satisfies every KKT condition (so it is
   the exact solution, up to rounding). It starts from the free set of ``q(0)`` and settles in
   two to four steps on typical instances;
2. rows where that does not settle within a few steps (cycling, or ``a`` constant on ``F``) go to
   a safeguarded search on ``mu``: Newton steps on the current linear piece of ``a . q(mu)``
   inside a bisection bracket, stopping when the piece a step was computed on is still the
   piece at the new point, which again makes the root exact.

No general QP solver is involved; every step is vectorized over the leading (run) axes.

Extreme scales. The floored-simplex projection works relative to the largest entry and clips
entries far below it (they are floored anyway), so it is on the floored simplex to rounding for
every finite input, however large. With a binding cut, ``y - mu a`` can cancel catastrophically
when ``|y|`` approaches ``1/eps``; every cut solution is therefore checked (``sum q = 1`` to
1e-12, ``a . q = b`` to ``FEASIBILITY_RTOL * max|a|``) and a row that fails is solved again in
exact rational arithmetic, which is slow but exact for any finite input, and takes a few steps
whatever the scale (its search halves ``log(1 + mu)`` and drops whole linear pieces).
"""

from __future__ import annotations

import functools
import math
from typing import cast

import numpy as np
from numpy.typing import ArrayLike

from msroute._validation import BoolArray, FloatArray, as_float_array, check_gamma
from msroute.core.qp._exact_cut import exact_cut
from msroute.core.qp._projection_rows import (
    _MAX_ACTIVE_SET_STEPS,
    _empty_message,
    _face_point,
    _search_mu,
    _solve_rows,
)
from msroute.core.qp._simplex import (
    _EPS,
    _FAR,
    _FLOAT_MAX_F,
    FEASIBILITY_RTOL,
    _accurate,
    _floored_simplex,
    _ranks,
)
from msroute.errors import EmptyFeasibleSetError, InvalidTypeError, InvalidValueError

__all__ = ["project_step"]


# ---------------------------------------------------------------------- public entry point
def project_step(
    y: ArrayLike,
    gamma: float,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
) -> FloatArray:
    """Solve the proximal QP (6): project ``y`` onto the floored simplex cut by ``a . q <= b``.

    Returns the unique minimiser of ``||q - y||^2`` subject to ``sum(q) = 1``, ``q >= gamma``
    and ``a . q <= b``, which is the maximiser of eq. (6) of the paper for
    ``y = q_prev + g / eta``, ``a = C w`` and ``b = h_S(w)``. The solution is exact: it meets the
    KKT conditions up to floating-point rounding (see the module docstring for the method).

    Parameters
    ----------
    y : array_like, shape (..., K)
        Points to project, one per leading index (e.g. one per run, shape (R, K)).
    gamma : float
        The exploration floor, ``0 <= gamma <= 1/K``.
    a : array_like, shape (..., K), optional
        Normal of the half-space; its leading axes broadcast against those of ``y``. ``None``
        or a row of zeros (the dual ``w = 0``) imposes no cut; ``b`` is then not used.
    b : float or array_like, shape (...), optional
        Offset of the half-space; broadcasts against the leading axes. Required with ``a``.

    Returns
    -------
    q : ndarray, shape (broadcast of y's and a's shapes)
        The projections; every row sums to one and is ``>= gamma``.

    Raises
    ------
    EmptyFeasibleSetError
        If some row's set is empty: ``b`` is below the smallest reachable value
        ``gamma * sum(a) + (1 - K gamma) * min(a)`` by more than ``FEASIBILITY_RTOL * max|a|``.
        When ``b`` equals that value up to this tolerance, the minimising face is returned.
    ValueError
        On NaN or infinite entries, mismatched shapes, ``gamma`` outside ``[0, 1/K]``, or
        ``a`` and ``b`` not given together; also if the exact fallback for extreme scales does
        not settle (the input's scale cannot be handled).

    Notes
    -----
    For every finite input the result sums to one within ``max(1e-12, 2 K eps)`` and is
    ``>= gamma``, whatever the magnitudes (see "Extreme scales" in the module docstring).

    See Also
    --------
    msroute.Problem.support : ``h_S(w)``, the offset ``b`` of the cut.

    Examples
    --------
    Without a cut it is the projection onto the floored simplex:

    >>> project_step([0.9, 0.3, -0.2], gamma=0.05).round(6).tolist()
    [0.775, 0.175, 0.05]

    The cut ``q_0 <= 0.5`` moves mass to the other coordinates:

    >>> project_step([0.9, 0.3, -0.2], gamma=0.05, a=[1.0, 0.0, 0.0], b=0.5).round(6).tolist()
    [0.5, 0.45, 0.05]

    Rows are independent problems (here two runs):

    >>> y = [[0.9, 0.3, -0.4], [0.2, 0.2, 0.6]]
    >>> project_step(y, 0.0, a=[[1, 0, 0], [0, 0, 1]], b=[0.5, 0.4]).round(6)
    array([[0.5, 0.5, 0. ],
           [0.3, 0.3, 0.4]])
    """
    if (
        type(y) is np.ndarray
        and y.ndim == 1
        and y.dtype == np.float64
        and y.shape[0] > 0
        and isinstance(gamma, float)
        and gamma >= 0.0
        and gamma * y.shape[0] <= 1.0 + 1e-12
    ):  # one problem with float arguments (the common case): a cheaper validation
        # NaN or infinite entries make the helpers return None: the checks below name them.
        if a is None and b is None:
            floored = _floored_single(y, float(gamma))
            if floored is not None:
                return floored[0]
        elif (
            type(a) is np.ndarray
            and a.dtype == np.float64
            and a.shape == y.shape
            and isinstance(b_obj := cast(object, b), float)
            and math.isfinite(b_obj)
        ):
            cut = _solve_single(y, float(gamma), a, float(b_obj))
            if cut is not None:
                return cut[0]
    ya = as_float_array(y, "y", ndim_min=1)
    k = ya.shape[-1]
    if k < 1:
        raise InvalidValueError(
            f"y must have at least one expert on its last axis, got shape {ya.shape}"
        )
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.integer | np.floating):
        raise InvalidTypeError(f"gamma must be a real number, got {type(gamma).__name__}")
    g = check_gamma(float(gamma), k)
    if a is None:
        if b is not None:
            raise InvalidValueError("b was given without a; pass both a and b to cut the simplex")
        return _project_step_unchecked(ya, g)
    if b is None:
        raise InvalidValueError("a was given without b; pass both a and b to cut the simplex")
    aa = as_float_array(a, "a", ndim_min=1)
    if aa.shape[-1] != k:
        raise InvalidValueError(
            f"a has {aa.shape[-1]} entries on its last axis but y has {k} (one per expert)"
        )
    ba = as_float_array(b, "b")
    if ya.ndim == 1 and aa.ndim == 1:
        lead: tuple[int, ...] = ()
        fits = ba.ndim == 0
    else:
        try:
            lead = np.broadcast_shapes(ya.shape[:-1], aa.shape[:-1])
        except ValueError as exc:
            raise InvalidValueError(
                f"leading axes of a {aa.shape[:-1]} do not broadcast with those of y "
                f"{ya.shape[:-1]}"
            ) from exc
        try:
            fits = np.broadcast_shapes(ba.shape, lead) == lead
        except ValueError:
            fits = False
    if not fits:
        raise InvalidValueError(
            f"b has shape {ba.shape}, which does not broadcast to the leading axes {lead} "
            "(one offset per row of y)"
        )
    return _project_step_unchecked(ya, g, aa, ba)


def _project_step_unchecked(
    y: FloatArray,
    gamma: float,
    a: FloatArray | None = None,
    b: FloatArray | float | None = None,
) -> FloatArray:
    """``project_step`` without argument checks (the policies' hot path).

    The inputs must be finite float arrays with consistent shapes and ``0 <= gamma <= 1/K``;
    only an empty feasible set is still detected (it raises ``EmptyFeasibleSetError``).
    """
    if a is not None and y.ndim == 1 and a.ndim == 1 and isinstance(b, float):
        return _solve_one(y, gamma, a, b)[0]
    return _solve(y, gamma, a, b)[0]


def _solve(
    y: FloatArray,
    gamma: float,
    a: FloatArray | None,
    b: FloatArray | float | None,
) -> tuple[FloatArray, FloatArray]:
    """The projection and the half-space multiplier ``mu >= 0`` (a KKT certificate).

    Returns
    -------
    q : ndarray, shape (..., K)
    mu : ndarray, shape (...)
    """
    y = np.asarray(y, dtype=np.float64)
    if a is None and y.ndim == 1:
        floored = _floored_single(y, gamma)
        q = _floored_simplex(y[None], gamma)[0][0] if floored is None else floored[0]
        return q, np.zeros(())
    if a is None:
        q, _, _ = _floored_simplex(y.reshape(-1, y.shape[-1]), gamma)
        return q.reshape(y.shape), np.zeros(y.shape[:-1])
    if b is None:
        raise InvalidValueError("a was given without b; pass both a and b to cut the simplex")
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if y.ndim == 1 and a.ndim == 1 and b.ndim == 0:  # one problem: skip the broadcasting
        q1, mu1 = _solve_one(y, gamma, a, float(b))
        return q1, np.asarray(mu1)
    shape = np.broadcast_shapes(y.shape, a.shape)
    k = shape[-1]
    y2 = np.broadcast_to(y, shape).reshape(-1, k)
    a2 = np.broadcast_to(a, shape).reshape(-1, k)
    b1 = np.broadcast_to(b, shape[:-1]).reshape(-1)
    if y2.shape[0] == 1:
        q1, mu1 = _solve_one(y2[0], gamma, a2[0], float(b1[0]))
        return q1.reshape(shape), np.full(shape[:-1], mu1)
    q, mu = _solve_rows(y2, gamma, a2, b1)
    return q.reshape(shape), mu.reshape(shape[:-1])


# ---------------------------------------------------------------------- one row
@functools.lru_cache(maxsize=16)
def _ones(k: int) -> FloatArray:
    """``K`` ones (cached): ``x @ ones`` is numpy's cheapest sum of a short vector."""
    out = np.ones(k)
    out.setflags(write=False)
    return out


def _floored_single(y: FloatArray, gamma: float) -> tuple[FloatArray, FloatArray, float] | None:
    """``_floored_simplex`` for one row ``y`` (K,) in few numpy calls.

    Returns ``q(0)``, ``z = y - tau`` (its free set is ``z > gamma``) and ``max |y|``, or None
    if ``y`` has a NaN or infinite entry (the sort finds them for free).
    """
    k = y.shape[0]
    mass = 1.0 - k * gamma
    u = y.copy()
    u.sort()  # NaN last
    top, bottom = float(u[-1]), float(u[0])
    if not (math.isfinite(top) and math.isfinite(bottom)):
        return None
    yabs = max(top, -bottom)
    if mass <= 0.0:  # K gamma = 1: the set is the single point 1/K
        return np.full(k, 1.0 / k), np.full(k, gamma), yabs
    u = u[::-1]
    if top - bottom > -_FAR:  # clip (see _FAR); overflow of the spread gives -inf, clipped too
        with np.errstate(over="ignore"):
            u -= top
        np.maximum(u, _FAR, out=u)
    else:
        u -= top  # shift-invariant; keeps the cumulative sums on the scale of the spread
    css = u.cumsum()
    # The top rho coordinates are free: rho = #{j : sum_{i<=j} (u_i - u_j) < mass}, whose
    # left side is nondecreasing in j (and 0 at j = 1).
    rho = int((css - u * _ranks(k)).searchsorted(mass))
    with np.errstate(over="ignore"):
        rel = y - top
    np.maximum(rel, _FAR, out=rel)
    z = rel - ((float(css[rho - 1]) - mass) / rho - gamma)
    return np.maximum(z, gamma), z, yabs


@functools.lru_cache(maxsize=16)
def _ones_rows(k: int) -> FloatArray:
    """A (5, K) array whose first row is ones (cached; ``_solve_single_cut`` copies it)."""
    out = np.zeros((5, k))
    out[0] = 1.0
    out.setflags(write=False)
    return out


def _solve_single(
    y: FloatArray, gamma: float, a: FloatArray, b: float
) -> tuple[FloatArray, float] | None:
    """One problem, y and a of shape (K,): the method of ``_solve_rows`` for a single row.

    At K ~ 50 numpy's per-call overhead, not arithmetic, dominates, so this path makes few
    calls: one sort of ``y`` for ``q(0)``, then active-set steps whose five sums over the free
    set ``F`` (``|F|``, and the sums of ``a``, ``y``, ``a^2``, ``a y`` on ``F``) come from one
    matrix-vector product, with the 2x2 system solved in closed form on Python floats. ``a`` is
    first centred on its mean (the same cut on the simplex, see ``_cut_active``), which
    keeps ``sum_F a^2 - |F| abar^2`` well conditioned; rows where it is not (``a`` nearly
    constant on ``F``), or that do not settle, go to ``_search_mu``.

    Returns None, before any other outcome, if ``y`` or ``a`` has a NaN or infinite entry (or
    ``sum(a)`` overflows), which the public function uses as its finiteness check.
    """
    floored = _floored_single(y, gamma)
    k = y.shape[0]
    asum = float(a @ _ones(k))
    if floored is None or not math.isfinite(asum):
        return None
    q0, z, yabs = floored
    if float(a @ q0) <= b:
        return q0, 0.0
    return _solve_single_cut(y, gamma, a, b, q0, z > gamma, asum, yabs)


def _solve_one(y: FloatArray, gamma: float, a: FloatArray, b: float) -> tuple[FloatArray, float]:
    """``_solve_single`` for finite inputs (the batched path if a sum of them overflows)."""
    out = _solve_single(y, gamma, a, b)
    if out is None:
        q, mu = _solve_rows(y[None], gamma, a[None], np.array([b]))
        return q[0], float(mu[0])
    return out


def _solve_single_cut(
    y: FloatArray,
    gamma: float,
    a: FloatArray,
    b: float,
    q0: FloatArray,
    free: BoolArray,
    asum: float,
    yabs: float,
) -> tuple[FloatArray, float]:
    """``_solve_single`` once the cut is known to be violated at ``q0 = q(0)``."""
    k = y.shape[0]
    mass = max(1.0 - k * gamma, 0.0)
    srt = a.copy()
    srt.sort()
    amin, amax = float(srt[0]), float(srt[-1])
    scale = max(amax, -amin)
    if scale == 0.0:  # a = 0: no cut
        return q0, 0.0
    # Emptiness is decided on (a, b) / scale, the same cut, when scale is extreme (as
    # _solve_rows does): gamma * sum(a) rounds by as much as |a| itself among subnormals.
    unit = 1.0 if 1e-100 < scale < 1e100 else scale
    reach = gamma * (asum / unit) + mass * (amin / unit)
    tol = FEASIBILITY_RTOL * (scale / unit)
    if b / unit < reach - tol:
        raise EmptyFeasibleSetError(_empty_message(reach, b / unit, gamma, k, None, unit))
    if b / unit <= reach + tol:
        qf, muf = _face_point(y[None], gamma, a[None], np.array([amin]))
        return qf[0], float(muf[0])
    if not (1e-100 < scale < 1e100 and yabs < 1e100):  # squares below would under/overflow
        qs, ms = _search_mu(y[None], gamma, a[None] / scale, np.array([b / scale]))
        return _verified(y, gamma, a, b, qs[0], float(ms[0]) / scale)
    # With c the mean of a, (a - c) . q <= b - c is the same cut on the simplex, with the same
    # multiplier. Rows 1, a - c, y, (a - c)^2, (a - c) y: their sums over F are one product.
    c = asum / k
    rows = _ones_rows(k).copy()
    ac = rows[1]
    np.subtract(a, c, out=ac)
    rows[2] = y
    np.multiply(ac, rows[1:3], out=rows[3:5])
    bc = b - c
    # sum(a - c) is 0 up to rounding (of the order of the other rounding errors of the step).
    ulps = 64.0 * _EPS * (yabs + 1.0)  # ties of y - mu a with the threshold
    # z = y - mu (a - c) - t is one product: coef @ rows[:3] with coef = (-t, -mu, 1).
    coef = np.empty(3)
    coef[2] = 1.0
    rows3 = rows[:3]
    fm = free.astype(np.float64)
    key, prev_key = free.tobytes(), b""
    for _ in range(_MAX_ACTIVE_SET_STEPS):
        nf, sa, sy, saa, say = np.dot(rows, fm).tolist()
        if nf == 0.0:
            break
        abar = sa / nf
        beta = saa - sa * abar  # sum_F (a_i - abar)^2
        if not beta > 1e-6 * saa:  # a (nearly) constant on F
            break
        mass_free = 1.0 - gamma * (k - nf)
        # sum q = 1 and (a - c) . q = b - c with q_F = y_F - mu (a_F - c) - t, q = gamma off F.
        mu = (say - abar * sy + abar * mass_free - gamma * sa - bc) / beta
        shift = (sy - mass_free) / nf
        coef[0] = minus_t = mu * abar - shift
        coef[1] = -mu
        z = np.dot(coef, rows3)
        new_free = z > gamma
        new_key = new_free.tobytes()
        # Settled when F is reproduced; a set that alternates with the previous one can only
        # differ from it by ties with the floor (rounding): accept it when they are.
        if mu >= 0.0 and (
            new_key == key
            or (
                new_key == prev_key
                and all(
                    abs(v - gamma) <= ulps + 64.0 * _EPS * (2.0 * mu * scale + abs(minus_t))
                    for v in z[new_free ^ free].tolist()
                )
            )
        ):
            if mu * abs(abar) > yabs + 1.0:
                # -t = mu abar - shift cancels: the centred form, as in _active_set_solve.
                z = y - mu * (ac - abar)
                z -= shift
            return _verified(y, gamma, a, b, np.maximum(z, gamma), mu)
        free, key, prev_key = new_free, new_key, key
        fm = free.astype(np.float64)
    # a constant on F (the Newton step is undefined) or no settling: the safeguarded search.
    qs, ms = _search_mu(y[None], gamma, a[None], np.array([b]))
    return _verified(y, gamma, a, b, qs[0], float(ms[0]))


def _verified(
    y: FloatArray, gamma: float, a: FloatArray, b: float, q: FloatArray, mu: float
) -> tuple[FloatArray, float]:
    """``(q, mu)`` if ``_accurate``, else the exact solution of ``_exact_cut.exact_cut``."""
    if _accurate(q[None], np.array([mu]), a[None], np.array([b]))[0]:
        return q, mu
    scale = float(np.abs(a).max())
    qe, me = exact_cut(y, gamma, a / scale, b / scale, mu * scale)
    return qe, min(me / scale, _FLOAT_MAX_F)
