"""Steps 1 and 2 of ``msroute.core.qp.projection_cuts.solve_cuts``, row by row.

The projection onto the floored simplex cut by a few half-spaces, for each row: the
floored-simplex projection ``q(0)`` (step 1), and for a row with a violated cut the
primal-dual active-set iteration on ``(F, J)`` (step 2), whose ``|J| + 1`` KKT equations are
solved by Gaussian elimination with partial pivoting after their condition number (the
eigenvalues of the symmetric system, by Jacobi rotations) is checked. A row that step 2 does
not settle is marked for step 3, which stays in numpy (``solve_cuts``).

One function, run two ways: in Python floats on nested lists for one row (a live router,
which imports no numba), and compiled for the arrays of a batch (``solve_cuts``). Both give
the same floats: the same operations in the same order, IEEE doubles either way. Step 1 takes
numpy's operations (``msroute.core.qp._simplex._floored_simplex``: a sort, a sequential cumulative
sum, elementwise steps), so that a row whose cuts hold at ``q(0)`` gets numpy's floats.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from msroute.core.qp._simplex import _FAR

__all__ = ["OUT_OF_REACH", "SOLVED", "STEPS", "STEP_3", "ZERO_CUT", "cut_rows"]

#: Row status: solved by step 1 or 2; left to step 3; a cut ``0 . q <= b`` with ``b < 0``; a
#: cut that misses the floored simplex on its own.
SOLVED, STEP_3, ZERO_CUT, OUT_OF_REACH = 0, 1, 2, 3

_EPS = sys.float_info.epsilon  # float64's
_MAX_ACTIVE_SET_STEPS = 12
_JACOBI_SWEEPS = 60
_COND_MAX = 1e12
#: The functions ``cut_rows`` calls (compiled with it for a batch).
STEPS = ("_one_row", "_dot", "_floored", "_kkt", "_well_conditioned", "_solve")


def cut_rows(y: Any, gamma: float, a: Any, b: Any, q: Any, mu: Any, status: Any) -> None:
    """Project each row ``y[r]`` (K,) under the cuts ``a[r]`` (m, K), ``b[r]`` (m,).

    ``q[r]`` (K,) gets the projection and ``mu[r]`` (m,) its multipliers (in the units of
    ``a``), and ``status[r]`` one of ``SOLVED``, ``STEP_3`` (``q[r]``, ``mu[r]`` unset),
    ``ZERO_CUT`` or ``OUT_OF_REACH``. Each cut is scaled to ``max |a_j| = 1`` first (the
    same half-space), and the rounding tolerances are those of ``solve_cuts``.
    """
    for r in range(len(y)):
        status[r] = _one_row(y[r], gamma, a[r], b[r], q[r], mu[r])


def _one_row(y: Any, gamma: float, a: Any, b: Any, q: Any, mu: Any) -> int:
    k, m = len(y), len(b)
    free = [False] * k
    _floored(y, gamma, q, free)
    for j in range(m):
        mu[j] = 0.0
    if m == 0:
        return SOLVED
    an = [[0.0] * k for _ in range(m)]
    bn = [0.0] * m
    safe = [1.0] * m
    for j in range(m):
        s = 0.0
        for i in range(k):
            v = abs(a[j][i])
            if v > s:
                s = v
        if s > 0.0:
            safe[j] = s
            bn[j] = b[j] / s
        elif b[j] < 0.0:
            return ZERO_CUT
        for i in range(k):
            an[j][i] = a[j][i] / safe[j]
    ymax = 0.0
    for i in range(k):
        v = abs(y[i])
        if v > ymax:
            ymax = v
    tol = [(64.0 * _EPS) * k * (1.0 + abs(bn[j]) + ymax) for j in range(m)]
    act = [False] * m
    any_violated = False
    for j in range(m):
        act[j] = _dot(an[j], q) > bn[j] + tol[j]
        any_violated = any_violated or act[j]
    if not any_violated:
        return SOLVED
    rest = 1.0 - k * gamma
    if rest < 0.0:
        rest = 0.0
    asum = [0.0] * m
    for j in range(m):
        low = an[j][0]
        for i in range(k):
            asum[j] += an[j][i]
            if an[j][i] < low:
                low = an[j][i]
        if gamma * asum[j] + rest * low - bn[j] > 1e3 * tol[j]:
            return OUT_OF_REACH
    z = [0.0] * k
    mu_n = [0.0] * m
    prev_free = [False] * k
    prev_act = [False] * m
    has_prev = False
    for _ in range(_MAX_ACTIVE_SET_STEPS):
        regular = _kkt(y, gamma, an, bn, asum, free, act, z, mu_n)
        zmax = 0.0
        for i in range(k):
            v = abs(z[i])
            if v > zmax:
                zmax = v
        slack = (64.0 * _EPS) * (ymax + zmax + 1.0)
        ok = regular
        for i in range(k):
            q[i] = z[i] if z[i] >= gamma else gamma
            if (z[i] < gamma - slack) if free[i] else (z[i] > gamma + slack):
                ok = False
        gap = [_dot(an[j], q) - bn[j] for j in range(m)]
        for j in range(m):
            if not (gap[j] <= tol[j] and mu_n[j] >= 0.0):
                ok = False
        if ok:
            for j in range(m):
                mu[j] = mu_n[j] / safe[j]
            return SOLVED
        if regular:
            new_free = [z[i] > gamma for i in range(k)]
            new_act = [mu_n[j] + gap[j] > 0.0 for j in range(m)]
        else:  # too few free coordinates for the equations: grow F by those of y above gamma
            new_free = [free[i] or y[i] > gamma for i in range(k)]
            new_act = act
        # Deterministic: a guess that repeats the current or the previous one cycles.
        if new_free == free and new_act == act:
            return STEP_3
        if has_prev and new_free == prev_free and new_act == prev_act:
            return STEP_3
        prev_free, prev_act, has_prev = free, act, True
        free, act = new_free, new_act
    return STEP_3


def _dot(u: Any, v: Any) -> float:
    s = 0.0
    for i in range(len(u)):
        s += u[i] * v[i]
    return s


def _floored(y: Any, gamma: float, q: Any, free: Any) -> None:
    """``q`` = the projection of ``y`` onto ``{sum q = 1, q >= gamma}`` and ``free`` its
    coordinates above the floor, in the operations of ``_simplex._floored_simplex``."""
    k = len(y)
    mass = 1.0 - k * gamma
    if mass <= 0.0:  # K gamma = 1: the single point 1/K
        for i in range(k):
            q[i] = 1.0 / k
            free[i] = False
        return
    top = y[0]
    for i in range(k):
        if y[i] > top:
            top = y[i]
    rel = [0.0] * k
    for i in range(k):
        v = y[i] - top
        rel[i] = v if v >= _FAR or v != v else _FAR  # np.maximum(v, _FAR)
    u = sorted(rel, reverse=True)
    css = [0.0] * k
    total = 0.0
    rho = 0
    for j in range(k):
        total += u[j]
        css[j] = total - mass
        if u[j] * (j + 1) > css[j]:
            rho += 1
    tau = css[rho - 1] / rho - gamma
    for i in range(k):
        s = rel[i] - tau
        q[i] = s if s >= gamma or s != s else gamma  # np.maximum(s, gamma)
        free[i] = s > gamma


def _kkt(
    y: Any,
    gamma: float,
    a: Any,
    b: Any,
    asum: Any,
    free: Any,
    act: Any,
    z: Any,
    mu: Any,
) -> bool:
    """The KKT point of the guess ``(F, J) = (free, act)``: ``z = y - A^T mu - tau`` and
    ``mu``, from ``|J| + 1`` equations (``msroute.core.qp.projection_cuts._kkt_point``). False (and
    ``z = y``, ``mu = 0``) when the system is singular or its condition number is 1e12 or
    more."""
    k, m = len(y), len(b)
    n = m + 1
    mat = [[0.0] * n for _ in range(n)]
    rhs = [0.0] * n
    nf = 0
    fy = 0.0
    for i in range(k):
        if free[i]:
            nf += 1
            fy += y[i]
    for j in range(m):
        if not act[j]:
            mat[j][j] = 1.0
            continue
        fsum = 0.0
        fdot = 0.0
        for i in range(k):
            if free[i]:
                fsum += a[j][i]
                fdot += a[j][i] * y[i]
        for h in range(m):
            if act[h]:
                s = 0.0
                for i in range(k):
                    if free[i]:
                        s += a[j][i] * a[h][i]
                mat[j][h] = s
        mat[j][m] = fsum
        mat[m][j] = fsum
        rhs[j] = fdot + gamma * (asum[j] - fsum) - b[j]
    mat[m][m] = float(nf)
    rhs[m] = fy + gamma * (k - nf) - 1.0
    regular = nf > 0 and _well_conditioned(mat) and _solve(mat, rhs)
    for j in range(m):
        mu[j] = rhs[j] if regular else 0.0
    tau = rhs[m] if regular else 0.0
    for i in range(k):
        s = 0.0
        for j in range(m):
            s += mu[j] * a[j][i]
        z[i] = y[i] - s - tau
    return regular


def _well_conditioned(mat: Any) -> bool:
    """Whether the symmetric ``mat`` has a 2-norm condition number below 1e12: its singular
    values are the absolute eigenvalues, in closed form for 2 x 2, else found by cyclic Jacobi
    rotations (on a copy)."""
    n = len(mat)
    if n == 2:  # one cut: the eigenvalues in closed form, the small one as det / the large one
        p, s, h = mat[0][0], mat[0][1], mat[1][1]
        mean, half = 0.5 * (p + h), 0.5 * (p - h)
        rad = math.sqrt(half * half + s * s)
        big = abs(mean) + rad
        small = abs(p * h - s * s) / big if big > 0.0 else 0.0
        return small > 0.0 and big / small < _COND_MAX
    e = [[mat[i][j] for j in range(n)] for i in range(n)]
    for _ in range(_JACOBI_SWEEPS):
        off = 0.0
        diag = 0.0
        for p in range(n):
            diag += e[p][p] * e[p][p]
            for h in range(p + 1, n):
                off += e[p][h] * e[p][h]
        if off <= _EPS * _EPS * diag * 1e-4 or off == 0.0:
            break
        for p in range(n - 1):
            for h in range(p + 1, n):
                apq = e[p][h]
                if apq == 0.0:
                    continue
                theta = (e[h][h] - e[p][p]) / (2.0 * apq)
                t = 1.0 / (abs(theta) + math.sqrt(theta * theta + 1.0))
                if abs(theta) > 1e150:
                    t = 0.5 / abs(theta)
                if theta < 0.0:
                    t = -t
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for i in range(n):
                    if i != p and i != h:
                        eip, eih = e[i][p], e[i][h]
                        e[i][p] = e[p][i] = c * eip - s * eih
                        e[i][h] = e[h][i] = s * eip + c * eih
                e[p][p] -= t * apq
                e[h][h] += t * apq
                e[p][h] = e[h][p] = 0.0
    big = 0.0
    small = math.inf
    for p in range(n):
        v = abs(e[p][p])
        if v != v:  # NaN
            return False
        big = v if v > big else big
        small = v if v < small else small
    return small > 0.0 and big / small < _COND_MAX


def _solve(mat: Any, rhs: Any) -> bool:
    """Solve ``mat x = rhs`` in place (``rhs`` becomes ``x``) by Gaussian elimination with
    partial pivoting; False on a zero pivot."""
    n = len(rhs)
    for c in range(n):
        piv = c
        for i in range(c + 1, n):
            if abs(mat[i][c]) > abs(mat[piv][c]):
                piv = i
        if mat[piv][c] == 0.0:
            return False
        if piv != c:
            mat[c], mat[piv] = mat[piv], mat[c]
            rhs[c], rhs[piv] = rhs[piv], rhs[c]
        for i in range(c + 1, n):
            f = mat[i][c] / mat[c][c]
            for h in range(c, n):
                mat[i][h] -= f * mat[c][h]
            rhs[i] -= f * rhs[c]
    for c in range(n - 1, -1, -1):
        s = rhs[c]
        for h in range(c + 1, n):
            s -= mat[c][h] * rhs[h]
        rhs[c] = s / mat[c][c]
    return True
