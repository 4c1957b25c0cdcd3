"""The proximal step (6) with one cut per active bound: projection onto a floored simplex cut
by a few half-spaces.

The scale-invariant approachability dual (``msroute.policies.duals``) enforces each active
bound by its own half-space ``a_j . q <= b_j`` instead of the paper's single aggregated cut
``(C w) . q <= h_S(w)``. The step is then the Euclidean projection of ``y`` onto:

    P = {q : sum(q) = 1, q >= gamma, a_j . q <= b_j for j = 1..m},

with ``m`` at most the number of cost coordinates (small). Its KKT conditions read
``q = max(gamma, y - A^T mu - tau)`` with multipliers ``mu >= 0`` (zero on the cuts that do not
bind) and a threshold ``tau`` fixing ``sum(q) = 1``. It is solved exactly:

1. ``q(0)``, the projection onto the floored simplex, answers every row whose cuts all hold;
2. the other rows run a primal-dual active-set (semismooth Newton) iteration on the pair
   ``(F, J)`` of the coordinates above the floor and the binding cuts: for a guess, the KKT
   conditions are ``|J| + 1`` linear equations in ``(mu_J, tau)``; solve them, update
   ``F = {z > gamma}`` and ``J = {mu_j + (a_j . q - b_j) > 0}`` (a singular guess, with too
   few free coordinates for its equations, grows ``F`` by the coordinates of ``y`` above the
   floor) and stop as soon as the point meets every KKT condition (so it is the exact
   solution, up to rounding);
3. rows that do not settle (cycling on degenerate data, or a singular system; a row whose
   next guess is one it has just had leaves step 2 at once) run a projected Newton ascent on
   the concave, piecewise quadratic dual ``D(mu)`` with backtracking, and stop as soon as the
   equations of step 2 at the point reached certify the KKT conditions; with a single cut, a
   safeguarded Newton search on its multiplier runs first (``_one_cut``).

With ``m = 1`` it gives the projection of ``msroute.project_step``. Steps 1 and 2 run row by
row (``msroute.core.qp._cut_rows``: in Python floats for one row, the same code compiled for a
batch, with the same floats either way); step 3 runs in numpy.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import cast

import numpy as np
from numpy.typing import ArrayLike

from msroute._validation import FloatArray, as_float_array, check_gamma
from msroute.core.qp._cut_rows import OUT_OF_REACH, STEP_3, ZERO_CUT, cut_rows
from msroute.core.qp._simplex import _floored_simplex
from msroute.errors import EmptyFeasibleSetError, InvalidValueError

__all__ = ["project_cuts"]

_EPS = float(np.finfo(np.float64).eps)
_MAX_SWEEPS = 400


def project_cuts(y: ArrayLike, gamma: float, a: ArrayLike, b: ArrayLike) -> FloatArray:
    """Project ``y`` onto the floored simplex cut by the half-spaces ``a_j . q <= b_j``.

    Parameters
    ----------
    y : array_like, shape (..., K)
        Points to project, one per leading index.
    gamma : float
        The exploration floor, ``0 <= gamma <= 1/K``.
    a : array_like, shape (..., m, K)
        The normals, ``m`` cuts per row; a row of zeros (with ``b >= 0``) is no cut.
    b : array_like, shape (..., m)
        The offsets.

    Returns
    -------
    ndarray, shape (..., K)
        The unique minimiser of ``||q - y||`` over the set; rows sum to one and are ``>= gamma``.

    Raises
    ------
    EmptyFeasibleSetError
        If some row's cuts miss the floored simplex (alone or together).
    ValueError
        On NaN or infinite entries or mismatched shapes.

    Examples
    --------
    >>> a = [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0]]  # q_0 <= 0.5 and q_1 >= 0.3
    >>> project_cuts([0.9, 0.1, 0.0], 0.0, a, [0.5, -0.3]).round(6).tolist()
    [0.5, 0.3, 0.2]
    """
    ya = as_float_array(y, "y", ndim_min=1)
    k = ya.shape[-1]
    g = check_gamma(float(gamma), k)
    aa = as_float_array(a, "a", ndim_min=2)
    ba = as_float_array(b, "b", ndim_min=1)
    if aa.shape[-1] != k or aa.shape[:-1] != ba.shape:
        raise InvalidValueError(
            f"a must have shape (..., m, K) with K = {k} and b shape (..., m); got a "
            f"{aa.shape} and b {ba.shape}"
        )
    lead = np.broadcast_shapes(ya.shape[:-1], aa.shape[:-2])
    m = aa.shape[-2]
    y2 = np.broadcast_to(ya, (*lead, k)).reshape(-1, k)
    a2 = np.broadcast_to(aa, (*lead, m, k)).reshape(-1, m, k)
    b2 = np.broadcast_to(ba, (*lead, m)).reshape(-1, m)
    q, _ = solve_cuts(y2, g, a2, b2)
    return q.reshape(*lead, k)


def solve_cuts(
    y: FloatArray, gamma: float, a: FloatArray, b: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The projection of rows ``y`` (n, K) under cuts ``a`` (n, m, K), ``b`` (n, m), unchecked.

    Returns ``q`` (n, K) and the multipliers ``mu`` (n, m), a KKT certificate. Steps 1 and 2
    run row by row (``msroute.core.qp._cut_rows``): compiled for more than one row, in Python
    floats for one (the same floats) until ``load_compiled_rows`` has run; the rows they do not
    settle run step 3 here.
    """
    n, k = y.shape
    m = a.shape[1]
    if n == 1 and not _rows_loaded:  # one row (a live router's step): Python floats, no numba
        q_l, mu_l, status = [[0.0] * k], [[0.0] * m], [0]
        cut_rows(y.tolist(), gamma, a.tolist(), b.tolist(), q_l, mu_l, status)
        q, mu = np.array(q_l), np.array(mu_l).reshape(1, m)
    else:
        q, mu, st = np.empty((n, k)), np.zeros((n, m)), np.zeros(n, dtype=np.int64)
        _compiled_rows()(
            np.ascontiguousarray(y, dtype=np.float64),
            gamma,
            np.ascontiguousarray(a, dtype=np.float64),
            np.ascontiguousarray(b, dtype=np.float64),
            q,
            mu,
            st,
        )
        status = st.tolist()
    if ZERO_CUT in status:
        raise EmptyFeasibleSetError(f"row {status.index(ZERO_CUT)} has a cut 0 . q <= b with b < 0")
    # A cut that misses the floored simplex on its own: no point of step 2 or 3 can meet it
    # (step 3 ends with this test on the point it reaches, always beyond ``reach``), so the
    # row raises before searching (the dual's caller then moves the cut to its reach).
    if OUT_OF_REACH in status:
        raise EmptyFeasibleSetError(
            f"the cuts of row {status.index(OUT_OF_REACH)} do not meet on the floored simplex "
            f"(gamma = {gamma:.6g}): no q >= gamma satisfies all of them together; check the "
            "constraints (Problem.check_feasible)"
        )
    if STEP_3 in status:
        rest = np.array([i for i, s in enumerate(status) if s == STEP_3])
        # Each cut scaled to max |a_j| = 1 (the same half-space); multipliers scale back.
        scale = _abs_max(a[rest])
        safe = np.where(scale > 0.0, scale, 1.0)
        an = a[rest] / safe[:, :, None]
        bn = np.where(scale > 0.0, b[rest] / safe, 0.0)
        qr, mr = _dual_newton(y[rest], gamma, an, bn, _tolerance(y[rest], an, bn))
        q[rest], mu[rest] = qr, mr / safe
    return q, mu


#: Whether ``load_compiled_rows`` has compiled the rows' loop: one row then takes it too.
_rows_loaded = False


def load_compiled_rows() -> None:
    """Compile (or load from numba's cache) the loop of ``solve_cuts``' rows for its arrays
    and let one row take it too (the same floats as Python's, tested): a live router calls
    this from the thread that loads its compiled step (``msroute.policies.live_step``), so
    that no step of its own waits for the compile."""
    global _rows_loaded
    rows = _compiled_rows()
    q, mu, status = np.empty((1, 2)), np.zeros((1, 1)), np.zeros(1, dtype=np.int64)
    rows(np.array([[0.7, 0.3]]), 0.1, np.array([[[1.0, 0.0]]]), np.array([[0.5]]), q, mu, status)
    _rows_loaded = True


@functools.cache
def _compiled_rows() -> Callable[..., None]:
    """``msroute.core.qp._cut_rows.cut_rows`` and its steps compiled (numba, loaded on first use),
    each a copy of the Python function whose globals are the compiled steps."""
    from msroute._jit import compiled
    from msroute.core.qp import _cut_rows

    env = dict(vars(_cut_rows))
    for name in _cut_rows.STEPS:
        fn = getattr(_cut_rows, name)
        env[name] = compiled(types.FunctionType(fn.__code__, env, name))
    return cast(
        Callable[..., None], compiled(types.FunctionType(cut_rows.__code__, env, "cut_rows"))
    )


def surely_empty(gamma: float, a: FloatArray, b: FloatArray, margin: float = 1e-6) -> bool:
    """Whether some row's cuts ``a`` (n, m, K), ``b`` (n, m) miss the floored simplex together
    by more than ``margin`` (in the units of cuts scaled to ``max |a_j| = 1``).

    One LP per row with two or more cuts: the least ``s`` with ``a_j . q - b_j <= s`` for
    every cut, ``q`` on the floored simplex. When it is above ``margin``, ``solve_cuts`` can
    only raise ``EmptyFeasibleSetError`` (its last test allows ``1e3`` times its rounding
    tolerance, far below ``margin``), after searching for a point that does not exist; a
    caller that would then fall back can do so at once. False when no row is surely empty.
    """
    from scipy.optimize import linprog  # scipy loads only when an LP is solved

    n, m, k = a.shape
    if m < 2:
        return False
    scale = _abs_max(a)
    safe = np.where(scale > 0.0, scale, 1.0)
    an, bn = a / safe[:, :, None], b / safe
    bounds = [(gamma, None)] * k + [(None, None)]
    objective = np.zeros(k + 1)
    objective[k] = 1.0
    a_eq = np.ones((1, k + 1))
    a_eq[0, k] = 0.0
    for r in range(n):
        a_ub = np.hstack([an[r], -np.ones((m, 1))])
        res = linprog(
            objective, A_ub=a_ub, b_ub=bn[r], A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs"
        )
        if res.status == 0 and float(res.x[k]) > margin:
            return True
    return False


def _abs_max(a: FloatArray) -> FloatArray:
    """``max |a|`` over the last axis. A maximum is exact in any order, so it is taken on a
    C-ordered copy when the last axis is not contiguous (the dual's cuts come as a transposed
    view): a reduction along a strided axis runs inner loops of a few elements."""
    return np.asarray(np.abs(np.ascontiguousarray(a)).max(axis=-1), dtype=np.float64)


def _tolerance(y: FloatArray, a: FloatArray, b: FloatArray) -> FloatArray:
    """Rounding allowance of ``a_j . q - b_j`` for normalized cuts, per row and cut (n, m)."""
    k = y.shape[-1]
    out = (64.0 * _EPS) * k * (1.0 + np.abs(b) + np.abs(y).max(axis=-1, keepdims=True))
    return np.asarray(out, dtype=np.float64)


def _kkt_point(
    y: FloatArray,
    gamma: float,
    a: FloatArray,
    b: FloatArray,
    free: FloatArray,
    act: FloatArray,
    asum: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray, np.ndarray]:
    """Solve the KKT equations of one guess ``(F, J)`` for every row.

    With ``q_F = y_F - A_F^T mu - tau``, ``q = gamma`` off ``F`` and ``mu_j = 0`` off ``J``, the
    equations ``a_j . q = b_j`` (j in J) and ``sum q = 1`` are linear in ``(mu, tau)``. Returns
    ``z = y - A^T mu - tau`` (n, K), ``mu`` (n, m), ``tau`` (n,) and the rows whose system is
    regular. ``asum`` is ``a.sum(axis=-1)`` when the caller has it (the same floats).
    """
    n, k = y.shape
    m = a.shape[1]
    fm = free  # (n, K) 0/1
    nf = fm.sum(axis=-1)
    af = a * fm[:, None, :]
    af_sum = af.sum(axis=-1)
    if asum is None:
        asum = a.sum(axis=-1)
    mat = np.zeros((n, m + 1, m + 1))
    rhs = np.zeros((n, m + 1))
    mat[:, :m, :m] = np.einsum("njk,nik->nji", af, a)
    mat[:, :m, m] = af_sum
    mat[:, m, :m] = af_sum
    mat[:, m, m] = nf
    rhs[:, :m] = np.einsum("njk,nk->nj", af, y) + gamma * (asum - af_sum) - b
    rhs[:, m] = np.einsum("nk,nk->n", fm, y) + gamma * (k - nf) - 1.0
    # Cuts off J: the equation mu_j = 0.
    off = act < 0.5
    if off.any():
        mat[:, :m, :][off] = 0.0
        mat[:, :, :m] *= np.where(off, 0.0, 1.0)[:, None, :]
        idx = np.arange(m)
        diag = mat[:, idx, idx]
        mat[:, idx, idx] = np.where(off, 1.0, diag)
        rhs[:, :m] = np.where(off, 0.0, rhs[:, :m])
    ok = nf > 0
    every = bool(ok.all())
    regular = np.zeros(n, dtype=bool)
    if every or ok.any():  # the 2-norm condition number as np.linalg.cond computes it
        sv = np.linalg.svd(mat if every else mat[ok], compute_uv=False)
        with np.errstate(all="ignore"):  # NaN (0 / 0) or inf: singular
            regular[ok] = sv[:, 0] / sv[:, -1] < 1e12
    if regular.all():
        sol = np.linalg.solve(mat, rhs[:, :, None])[:, :, 0]
    else:
        sol = np.zeros((n, m + 1))
        if regular.any():
            sol[regular] = np.linalg.solve(mat[regular], rhs[regular][:, :, None])[:, :, 0]
    mu = sol[:, :m]
    tau = sol[:, m]
    z = y - np.einsum("nj,njk->nk", mu, a) - tau[:, None]
    return z, mu, tau, regular


def _box_qp(h: FloatArray, g: FloatArray, mu: FloatArray) -> FloatArray:
    """The step ``d`` maximising ``g . d - d^T h d / 2`` subject to ``mu + d >= 0`` (m small).

    Every support of the free multipliers is tried (at most ``2^m``, ``m <= d``); the best
    step that meets the KKT conditions of the small box QP is returned.
    """
    m = g.size
    best, best_val = np.zeros(m), 0.0
    reg = h + 1e-12 * (np.trace(h) + 1.0) * np.eye(m)
    for bits in range(1, 2**m):
        sup = np.array([(bits >> j) & 1 == 1 for j in range(m)])
        d = -mu.copy()  # off the support the multiplier goes to 0
        fixed = ~sup
        rhs = g[sup] - reg[np.ix_(sup, fixed)] @ d[fixed]
        d[sup] = np.linalg.solve(reg[np.ix_(sup, sup)], rhs)
        if np.any(mu[sup] + d[sup] < 0.0):
            continue
        val = float(g @ d - 0.5 * d @ reg @ d)
        if val > best_val:
            best, best_val = d, val
    if best_val == 0.0:  # the support {} : every multiplier to 0
        d = -mu.copy()
        if float(g @ d - 0.5 * d @ reg @ d) > 0.0:
            best = d
    return best


def _dual_value(
    y: FloatArray, gamma: float, a: FloatArray, b: FloatArray, mu: FloatArray
) -> tuple[float, FloatArray, np.ndarray]:
    """``D(mu) = min_q |q - y|^2 / 2 + mu . (A q - b)``, its minimiser and free set (one row)."""
    q, free, _ = _floored_simplex((y - mu @ a)[None], gamma)
    q0 = q[0]
    return float(0.5 * np.sum((q0 - y) ** 2) + mu @ (a @ q0 - b)), q0, free[0]


def _certified(
    y: FloatArray,
    gamma: float,
    a: FloatArray,
    b: FloatArray,
    tol: FloatArray,
    free: np.ndarray,
    act: np.ndarray,
) -> tuple[FloatArray, FloatArray, bool]:
    """The KKT point ``(q, mu)`` of the guess ``(F, J) = (free, act)`` of one row, and whether
    it meets every KKT condition (the test of step 2)."""
    zz, mm, _, regular = _kkt_point(
        y[None], gamma, a[None], b[None], free[None].astype(float), act[None] * 1.0
    )
    qq = np.maximum(zz[0], gamma)
    slack = 64.0 * _EPS * (np.abs(y).max() + np.abs(zz).max() + 1.0)
    ok = bool(
        regular[0]
        and np.all(np.where(free, zz[0] >= gamma - slack, zz[0] <= gamma + slack))
        and np.all(a @ qq - b <= tol)
        and np.all(mm[0] >= 0.0)
    )
    return qq, mm[0], ok


def _one_cut(
    y: FloatArray, gamma: float, a: FloatArray, b: FloatArray, tol: FloatArray
) -> tuple[FloatArray, FloatArray] | None:
    """One violated cut (m = 1): a safeguarded Newton search on its multiplier, certified as
    in step 2.

    ``q(mu)``, the floored-simplex projection of ``y - mu a``, has a cut value ``a . q(mu)``
    that does not increase with ``mu``, linear between breakpoints; the solution is
    ``q(mu*)`` at its root. The search keeps a bracket of the root; at each ``mu`` it solves
    step 2's equations for the free set of ``q(mu)`` with the cut binding, stops if they
    certify the KKT conditions, and else moves to the multiplier they give (the root of that
    linear piece) when it lies in the bracket, to the bracket's middle otherwise. Step 2's
    semismooth step can cycle on such a row (it overshoots the free set to a single
    coordinate, whose system is singular). None if the search finds no certified point (step
    3's Newton ascent then runs as before).
    """
    act = np.ones(1, dtype=bool)

    def cut_at(mu: float) -> tuple[float, np.ndarray]:
        qm, free, _ = _floored_simplex((y - mu * a[0])[None], gamma)
        return float(a[0] @ qm[0] - b[0]), free[0]

    lo, hi = 0.0, 1.0
    for _ in range(64):  # bracket the root: a . q(hi) <= b
        if cut_at(hi)[0] <= 0.0:
            break
        lo, hi = hi, 4.0 * hi
    else:
        return None
    mu = 0.5 * (lo + hi)
    for _ in range(200):
        value, free = cut_at(mu)
        if value > 0.0:
            lo = mu
        else:
            hi = mu
        qq, mm, ok = _certified(y, gamma, a, b, tol, free, act)
        if ok:
            return qq, mm
        guess = float(mm[0])
        mu = guess if lo < guess < hi else 0.5 * (lo + hi)
        if not lo < mu < hi:
            break
    return None


def _dual_newton(
    y: FloatArray, gamma: float, a: FloatArray, b: FloatArray, tol: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Rows the active set did not settle: projected Newton ascent on the dual (step 3).

    The dual ``D(mu)`` is concave and piecewise quadratic; on the piece of a free set ``F`` its
    Hessian is ``-A_F (I - 11^T/|F|) A_F^T``. Each step maximises that quadratic model over
    ``mu >= 0`` and backtracks (Armijo) until the dual rises; once the iterate is on the piece
    of the solution the full step lands on it. A row is done when the active-set equations of
    its current ``(F, J)`` certify the KKT conditions.
    """
    n = y.shape[0]
    m = a.shape[1]
    mu = np.zeros((n, m))
    q = np.empty_like(y)
    for r in range(n):
        yr, ar, br, mr = y[r], a[r], b[r], np.zeros(m)
        if m == 1:
            found = _one_cut(yr, gamma, ar, br, tol[r])
            if found is not None:
                q[r], mu[r] = found
                continue
        val, qr, free = _dual_value(yr, gamma, ar, br, mr)
        # Weak duality: D(mu) <= |q - y|^2 / 2 for every feasible q, and |q - y| <= 1 + |y| on
        # the simplex. A dual value above that bound certifies that the cuts miss the floored
        # simplex together (the dual then ascends without end): no need to search on.
        ceiling = 0.5 * (1.0 + float(np.sqrt(yr @ yr))) ** 2 * (1.0 + 1e-9) + 1e-12
        for _ in range(_MAX_SWEEPS):
            if val > ceiling:
                raise EmptyFeasibleSetError(
                    f"the cuts of row {r} do not meet on the floored simplex (gamma = "
                    f"{gamma:.6g}): the dual exceeds every feasible projection's distance"
                )
            gap = ar @ qr - br
            act = (mr > 0.0) | (gap > 0.0)
            zz, mm, _, regular = _kkt_point(
                yr[None], gamma, ar[None], br[None], free[None].astype(float), act[None] * 1.0
            )
            qq = np.maximum(zz[0], gamma)
            slack = 64.0 * _EPS * (np.abs(yr).max() + np.abs(zz).max() + 1.0)
            if (
                regular[0]
                and np.all(np.where(free, zz[0] >= gamma - slack, zz[0] <= gamma + slack))
                and np.all(ar @ qq - br <= tol[r])
                and np.all(mm[0] >= 0.0)
            ):
                qr, mr = qq, mm[0]
                break
            fm = free.astype(np.float64)
            nf = max(fm.sum(), 1.0)
            af = ar * fm
            h = af @ ar.T - np.outer(af.sum(axis=1), af.sum(axis=1)) / nf
            d = _box_qp(h, gap, mr)
            slope = float(gap @ d)
            if slope <= 0.0:  # no ascent direction left: mr is optimal to rounding
                break
            t = 1.0
            while t > 1e-20:
                new = np.maximum(mr + t * d, 0.0)
                nval, nq, nfree = _dual_value(yr, gamma, ar, br, new)
                if nval >= val + 1e-4 * t * slope:
                    break
                t *= 0.5
            else:
                break
            mr, val, qr, free = new, nval, nq, nfree
        q[r], mu[r] = qr, mr
        if np.any(ar @ qr - br > 1e3 * tol[r]):
            raise EmptyFeasibleSetError(
                f"the cuts of row {r} do not meet on the floored simplex (gamma = {gamma:.6g}): "
                "no q >= gamma satisfies all of them together; check the constraints "
                "(Problem.check_feasible)"
            )
    return q, mu
