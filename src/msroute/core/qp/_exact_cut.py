"""A binding cut of the QP step (6) solved in exact rational arithmetic, for one row.

``msroute.core.qp.projection`` solves the projection onto the floored simplex cut by a half-space in
floating point, and checks each solution (``msroute.core.qp._simplex._accurate``: the point sums to
one and lies on its cut). A row whose floats cannot be trusted (inputs of an extreme scale,
where ``y - mu a`` cancels) is solved again here, with ``fractions.Fraction``: every float is
a rational number, so the projection and the cut's value are exact, and so is the root the
search finds.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np

from msroute._validation import FloatArray
from msroute.errors import InvalidValueError

__all__ = [
    "FLOAT_MAX",
    "MAX_EXACT_STEPS",
    "bisection_point",
    "exact_cut",
    "exact_piece",
    "floor_log2",
]

#: The largest float as an exact rational (the multiplier's cap).
FLOAT_MAX = Fraction(sys.float_info.max)

#: Cap on the steps of ``exact_cut``: a guard, far above what it takes (see there).
MAX_EXACT_STEPS = 4000


def exact_cut(
    y: FloatArray, gamma: float, a: FloatArray, b: float, mu_guess: float
) -> tuple[FloatArray, float]:
    """One row of a binding, non-degenerate cut solved in exact rational arithmetic.

    Every float is a rational number, so ``q(mu)`` (the floored-simplex projection of
    ``y - mu a``) and ``a . q(mu)`` can be computed exactly with ``fractions.Fraction``.
    The root of the piecewise linear, nonincreasing ``a . q(mu) = b`` is searched inside a
    bracket ``lo < mu < hi``, starting from the floating-point guess. At each point the search
    computes the whole linear piece it lies on (``exact_piece``); if the piece's line meets
    ``b`` on the piece, that is the root and the next point is exact (``a . q = b`` and
    ``sum q = 1`` exactly, returned as their roundings, each entry to half an ulp). Otherwise
    the bracket drops the whole piece, and the next point is the line's root when it falls in
    the bracket (a Newton step, typically one piece from the solution) or else a bisection
    point (``bisection_point``), with never two Newton steps in a row.

    So the search is bounded, whatever the scale of the input: every step but the last drops a
    piece from the bracket (and pieces are finitely many), and every other step halves it,
    first in ``log(1 + mu)`` (at most ~12 halvings: the initial bracket is below ``2^2100`` for
    finite floats, ``y`` spread over ~1e308 against gaps of ``a`` of ~1e-323), then linearly.
    On random inputs of every magnitude it takes at most 7 steps from any starting guess,
    where a purely linear bisection took thousands (the bracket spans ~1e630 and the root's
    piece can be thin). Slow (pure Python), and used only when the floating-point
    solution fails ``msroute.core.qp._simplex._accurate``. Raises ``ValueError`` if it does not
    settle.

    The multiplier is only a certificate: when it exceeds the largest float (``y`` spread over
    ~1e308 against gaps of ``a`` of ~1e-300) it is returned as the largest float, as
    ``msroute.core.qp._projection_rows._face_point`` does for its limit ``mu -> inf``; ``q`` is
    exact either way.
    """
    k = y.shape[0]
    ys = [Fraction(v) for v in y.tolist()]
    av = [Fraction(v) for v in a.tolist()]
    g = Fraction(gamma)
    bf = Fraction(b)
    mass = 1 - k * g

    def project(mu: Fraction) -> tuple[list[Fraction], list[int]]:
        # Floored simplex by sort and threshold: q_i = g + max(0, h_i), h_i = v_i - g - tau.
        v = [yi - mu * ai for yi, ai in zip(ys, av, strict=True)]
        order = sorted(range(k), key=v.__getitem__, reverse=True)
        css, tau, free = Fraction(0), Fraction(0), order[:1]
        for j, i in enumerate(order, 1):
            css += v[i] - g
            t = (css - mass) / j
            if v[i] - g - t > 0 or j == 1:
                tau, free = t, order[:j]
            else:
                break
        return [vi - g - tau for vi in v], free

    amin = min(av)
    gaps = [ai - amin for ai in av if ai > amin]
    lo = Fraction(0)
    hi = (max(ys) - min(ys) + 1) / min(gaps)  # every coordinate off argmin(a) floored
    mu = min(max(Fraction(max(mu_guess, 0.0)) if math.isfinite(mu_guess) else lo, lo), hi)
    newton = False
    for _ in range(MAX_EXACT_STEPS):
        h, free = project(mu)
        q = [g + max(Fraction(0), hk) for hk in h]
        f = sum((ai * qi for ai, qi in zip(av, q, strict=True)), Fraction(0))
        if f == bf:
            return np.array([float(x) for x in q]), float(min(mu, FLOAT_MAX))
        slope, start, end = exact_piece(av, h, free, mu, lo, hi)
        root = mu + (f - bf) / slope if slope > 0 else None
        if root is not None and start <= root <= end:
            mu, newton = root, True  # a . q is this line on [start, end]: the next step ends
            continue
        # The root is past the piece, on the side where a . q crosses b: drop the piece.
        if f > bf:
            lo = end
        else:
            hi = start
        newton = root is not None and lo < root < hi and not newton
        mu = root if newton and root is not None else bisection_point(lo, hi)
    raise InvalidValueError(
        f"project_step could not solve a cut step exactly in {MAX_EXACT_STEPS} steps "
        f"(K = {k}, max |y| = {float(np.abs(y).max()):.3g}); the input's scale cannot be handled"
    )


def exact_piece(
    a: list[Fraction],
    h: list[Fraction],
    free: list[int],
    mu: Fraction,
    lo: Fraction,
    hi: Fraction,
) -> tuple[Fraction, Fraction, Fraction]:
    """The linear piece of ``a . q(t)`` through ``t = mu``, exactly: its slope and ends.

    With the free set ``F`` of ``q(mu)`` held fixed, the threshold is linear in ``t`` and
    ``h_i(t) = h_i(mu) - (t - mu) (a_i - abar)`` with ``abar`` the mean of ``a`` on ``F``
    (``h = v - gamma - tau`` as ``exact_cut``'s projection returns it). That formula is
    the projection while ``h_i >= 0`` on ``F`` and ``h_i <= 0`` off it (the KKT conditions of
    the floored simplex in (6)), which each coordinate turns into one bound on ``t``; on those
    ``t``, ``a . q(t)`` falls with slope ``sum_F (a_i - abar)^2``. Returns that slope and the
    ends ``start <= mu <= end`` of the piece, clipped to ``[lo, hi]``.
    """
    abar = sum((a[i] for i in free), Fraction(0)) / len(free)
    slope = sum(((a[i] - abar) ** 2 for i in free), Fraction(0))
    is_free = [False] * len(a)
    for i in free:
        is_free[i] = True
    start, end = lo, hi
    for ai, hk, fr in zip(a, h, is_free, strict=True):
        d = ai - abar
        if d != 0:
            t = mu + hk / d  # where h_i reaches 0: an upper bound if it falls towards it
            if fr == (d > 0):
                end = min(end, t)
            else:
                start = max(start, t)
    return slope, start, end


def bisection_point(lo: Fraction, hi: Fraction) -> Fraction:
    """A point strictly inside ``(lo, hi)``, ``0 <= lo < hi``: the middle in ``log(1 + mu)``.

    Exact rationals have no exact logarithm, so while ``1 + hi`` exceeds ``4 (1 + lo)`` the
    point is the power of two ``2^m - 1`` with ``m`` halfway between the binary exponents of
    ``1 + lo`` and ``1 + hi`` (which halves their distance), and the plain middle once they
    are within a factor of 4 (as ``msroute.core.qp._projection_rows._search_mu`` bisects
    ``log1p(mu)`` in floats).
    """
    e_lo, e_hi = floor_log2(1 + lo), floor_log2(1 + hi)
    if e_hi - e_lo >= 2:  # 1 + lo < 2^(e_lo + 1) <= 2^m <= 2^(e_hi - 1) < 1 + hi
        return Fraction((1 << ((e_lo + e_hi + 1) // 2)) - 1)
    return (lo + hi) / 2


def floor_log2(x: Fraction) -> int:
    """``floor(log2(x))`` of a rational ``x >= 1``, exactly."""
    n, d = x.numerator, x.denominator
    e = n.bit_length() - d.bit_length()
    return e - 1 if n < d << e else e
