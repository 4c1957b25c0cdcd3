"""The M best experts of each run's scores, compiled (numba): the team of an index policy, and
Thompson sampling's decision on its Beta samples.

Both give ``msroute.policies.team.top_m``'s teams (best first, ties to the lower index): the
loops only compare, so the choice is the same as numpy's whatever the batch.
"""

from __future__ import annotations

import math

import numpy as np

from msroute._jit import compiled, inline
from msroute._validation import FloatArray, IntArray, UInt64Array
from msroute.policies._compiled.variates import betas, load, refresh, store

__all__ = ["beta_top", "top_rows"]


#: The largest float.
_FMAX = float(np.finfo(np.float64).max)


@compiled
def beta_top(
    a: FloatArray,
    b: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
    offset: FloatArray,
    state: UInt64Array,
    draws: IntArray,
) -> None:
    """The M best experts of Beta samples plus ``offset``: Thompson sampling's decision.

    ``draws[r]`` (M indices, best first; ties to the lower index) gets the top M of
    ``Beta(a[r, i], b[r, i]) + offset[r, i]``, the samples being those that
    ``beta_variates`` draws from the same state;
    ``offset`` is (R, K), or (R, 0) for none. The same as ``msroute.policies.team.top_m`` of
    those scores.
    """
    refresh(a, seen, d, c, 0)
    refresh(b, seen, d, c, a.shape[1])
    n_runs, m = draws.shape
    k = a.shape[1]
    g, log_g, score, best = np.empty(2 * k), np.empty(2 * k), np.empty(k), np.empty(m)
    picked = np.empty(k, dtype=np.int64)
    for r in range(n_runs):
        store(state, r, betas(seen[r], d[r], c[r], load(state, r), g, log_g, score))
        if offset.shape[1]:
            for i in range(k):
                score[i] += offset[r, i]
        _top_into(score, best, picked, draws, r)


#: Up to this M, ``_top_into`` finds the M-th largest score by a sorting network.
_NETWORK_SLOTS = 8


@inline
def _top_into(
    score: FloatArray, best: FloatArray, picked: IntArray, draws: IntArray, r: int
) -> None:
    """The M largest of ``score`` (K,) into ``draws[r]`` (M = ``draws.shape[1]``), best first,
    ties to the lower index (an equal score never passes an earlier one); ``best``: (M,) and
    ``picked``: (K,) scratch.

    Inserting each score into the best M so far takes branches that the CPU mispredicts
    whenever a score gets in (a dozen times per row of 50 random scores), which cost more
    than the comparisons. Up to M = 8, a sorting network of eight slots (a max and a min per
    slot and score, no branch) finds the M-th largest score; the scores at least that large are
    then the M best unless some tie it, and each one's place is the number of those above it
    and of the equal ones before it. With such ties or a NaN, the insertion decides.
    """
    m = draws.shape[1]
    if not 1 <= m <= _NETWORK_SLOTS:
        _top_by_insertion(score, best, draws, r)
        return
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = -math.inf
    nan = False
    for i in range(score.size):
        v = score[i]
        nan |= v != v
        b0, v = _larger_smaller(b0, v)
        b1, v = _larger_smaller(b1, v)
        b2, v = _larger_smaller(b2, v)
        b3, v = _larger_smaller(b3, v)
        b4, v = _larger_smaller(b4, v)
        b5, v = _larger_smaller(b5, v)
        b6, v = _larger_smaller(b6, v)
        b7, v = _larger_smaller(b7, v)
    cut = (b0, b1, b2, b3, b4, b5, b6, b7)[m - 1]
    n = 0
    if not nan:
        for i in range(score.size):  # the indices of the scores >= cut, in index order
            picked[n] = i
            n += score[i] >= cut
    if n != m:
        _top_by_insertion(score, best, draws, r)
        return
    for j in range(m):
        v = score[picked[j]]
        place = 0
        for e in range(m):
            w = score[picked[e]]
            place += (w > v) | ((w == v) & (e < j))
        draws[r, place] = picked[j]


@inline
def _larger_smaller(b: float, v: float) -> tuple[float, float]:
    """The larger and the smaller of ``b`` and ``v`` (a max and a min instruction)."""
    return (b if b > v else v), (v if b > v else b)


@inline
def _top_by_insertion(score: FloatArray, best: FloatArray, draws: IntArray, r: int) -> None:
    """``_top_into`` by inserting each score into the best M so far (``best``: their
    scores)."""
    m = draws.shape[1]
    for i in range(score.size):
        v = score[i]
        if i < m:
            j = i
        elif v > best[m - 1]:
            j = m - 1
        else:
            continue
        while j > 0 and best[j - 1] < v:  # insertion after the equal scores
            best[j] = best[j - 1]
            draws[r, j] = draws[r, j - 1]
            j -= 1
        best[j] = v
        draws[r, j] = i


@compiled
def top_rows(scores: FloatArray, lift: bool, draws: IntArray) -> None:
    """``msroute.policies.team.top_m`` of every row of ``scores`` (R, K), without a mask, into
    ``draws`` (R, M): the same teams. ``lift``: ``-inf`` counts as the lowest finite float (as
    top_m's successive argmaxes count it; its stable sort, for a larger M, does not)."""
    k = scores.shape[1]
    row, best, picked = np.empty(k), np.empty(draws.shape[1]), np.empty(k, dtype=np.int64)
    for r in range(scores.shape[0]):
        for i in range(k):
            row[i] = max(scores[r, i], -_FMAX) if lift else scores[r, i]
        _top_into(row, best, picked, draws, r)
