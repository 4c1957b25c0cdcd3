"""One compiled pass for a round's outcome: every run's reward and realized cost (numba).

The simulator's round needs, per run, the sum-max reward of the routed draws and the realized
cost. The public functions (``msroute.core.reward.draws_sum_max_reward``,
``msroute.core.problem_batch.team_cost`` on ``msroute.core.reward.draws_to_mask``,
``msroute.core.problem_batch.draws_cost``) make a dozen numpy calls on (R, N, M)-sized arrays a
round; here one loop over the runs gives the same floats, in the same order of operations:

* the reward: the maximum over the draws of each dimension (exact in any order), then the
  sum over the dimensions as numpy's ``sum(axis=-1)`` makes it, ``0.0`` plus numpy's pairwise
  sum of the N maxima (``pairwise_sum`` in numpy's ``loops_utils``: up to 7 values one after
  another, up to 128 in 8 interleaved partial sums, longer ranges halved);
* the cost of the draws (``cost_count="draws"``): each coordinate summed draw after draw, as
  numpy sums the (R, M, d) picks over their middle axis, or with d = 1, as it sums the rows
  of the (R, M) picks (``0.0`` plus the pairwise sum);
* the cost of the distinct routed experts: ``team_cost`` is a matrix product that numpy hands
  to its BLAS, and OpenBLAS's ``dgemv_n`` sums a product with d = 2 or 3 coordinates in its
  own order: over the experts in blocks of four, each block adding the pair (i, i + 1) and
  then the pair (i + 2, i + 3) to the running sum, and the last ``K mod 4`` experts one by
  one. With 0/1 weights every product is exact and an expert left out adds an exact 0, so
  the routed experts' costs summed in that order are the product's floats. Another BLAS may
  sum in another order: ``blas_pairs_order`` checks, once per process, that numpy's
  product agrees with this order on probes that tell the orders apart, and the simulator
  falls back to ``team_cost`` when it does not (or when d is not 2 or 3).

Why the BLAS's order is reproduced rather than a plain one: a batch then gets the floats numpy
gives a single run, so the paper's numbers do not depend on how runs are batched, while the pass
stays cheaper than numpy's product (``benchmarks/bench_blas_order.py`` measures both; a plain
order changes about one cost in a hundred in its last bits). ``tests/test_outcome.py`` checks it.

Imported on first use, compiled as ``msroute._jit`` describes.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba.core import types

from msroute._jit import compiled, eager, read_only, repeated
from msroute._validation import FloatArray, IntArray

__all__ = ["PAIR_COSTS", "blas_pairs_order", "credit_distinct", "pair_costs", "round_outcome"]

#: Cost modes of ``round_outcome``: none (the caller computes it), per draw, distinct
#: experts summed in OpenBLAS's pair order.
NO_COST, DRAW_COSTS, PAIR_COSTS = 0, 1, 2

#: numpy's pairwise-summation block (``PW_BLOCKSIZE``).
_LEAF = 128


@compiled
def _leaf_sum(x: FloatArray, lo: int, n: int) -> float:
    """numpy's sum of ``x[lo : lo + n]`` for ``1 <= n <= 128``: one after another below 8,
    else 8 interleaved partial sums combined pairwise, then the last ``n mod 8``."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = 8
    while i < n - n % 8:
        j = lo + i
        r0 += x[j]
        r1 += x[j + 1]
        r2 += x[j + 2]
        r3 += x[j + 3]
        r4 += x[j + 4]
        r5 += x[j + 5]
        r6 += x[j + 6]
        r7 += x[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[lo + i]
        i += 1
    return float(res)


@compiled
def _pairwise_sum(x: FloatArray, n: int) -> float:
    """numpy's ``pairwise_sum`` of ``x[:n]`` (``n >= 1``): leaves of at most 128 values, a
    longer range split at ``n // 2 - (n // 2) % 8`` and its halves added (the recursion run
    on an explicit stack: numba does not cache recursive functions)."""
    if n <= _LEAF:
        return _leaf_sum(x, 0, n)
    todo = np.empty((192, 3), dtype=np.int64)  # (start, length, halves done?) per range
    partial = np.empty(64)
    todo[0, 0], todo[0, 1], todo[0, 2] = 0, n, 0
    top, done = 1, 0
    while top > 0:
        top -= 1
        lo, size, expanded = todo[top, 0], todo[top, 1], todo[top, 2]
        if size <= _LEAF:
            partial[done] = _leaf_sum(x, lo, size)
            done += 1
        elif expanded:
            partial[done - 2] = partial[done - 2] + partial[done - 1]
            done -= 1
        else:
            half = size // 2 - (size // 2) % 8
            todo[top, 2] = 1
            todo[top + 1, 0], todo[top + 1, 1], todo[top + 1, 2] = lo + half, size - half, 0
            todo[top + 2, 0], todo[top + 2, 1], todo[top + 2, 2] = lo, half, 0
            top += 3
    return float(partial[0])


@compiled
def _pair_cost(
    draws: IntArray, costs: FloatArray, r: int, routed: IntArray, cost: FloatArray
) -> None:
    """``cost[r]``: the cost of run ``r``'s distinct draws, summed in ``PAIR_COSTS`` order;
    ``routed``: (M,) scratch."""
    k, d = costs.shape[1], costs.shape[2]
    blocks = k - k % 4  # dgemv_n's blocks of four experts
    # The distinct draws in increasing order (insertion sort of M values).
    size = 0
    for j in range(draws.shape[1]):
        e = draws[r, j]
        pos = size
        while pos > 0 and routed[pos - 1] > e:
            pos -= 1
        if pos > 0 and routed[pos - 1] == e:
            continue
        for i in range(size, pos, -1):
            routed[i] = routed[i - 1]
        routed[pos] = e
        size += 1
    for c in range(d):
        total = 0.0
        i = 0
        while i < size:
            e = routed[i]
            term = costs[r, e, c]
            if e < blocks and e % 2 == 0 and i + 1 < size and routed[i + 1] == e + 1:
                term += costs[r, e + 1, c]  # the pair (e, e + 1) of a block
                i += 1
            total += term
            i += 1
        cost[r, c] = total


@eager(
    types.int64(
        read_only(types.float64, 3),
        read_only(types.int64, 1),
        read_only(types.int64, 2),
        read_only(types.float64, 3),
        types.int64,
        types.float64[::1],
        types.float64[:, ::1],
    )
)
def round_outcome(
    skills: FloatArray,
    rows: IntArray,
    draws: IntArray,
    costs: FloatArray,
    mode: int,
    reward: FloatArray,
    cost: FloatArray,
) -> int:
    """Every run's reward and realized cost of one round, in place; no Python in the loop.

    Parameters
    ----------
    skills : ndarray, shape (R', N, K), entries >= 0
    rows : ndarray of int64, shape (R,)
        Run ``r`` reads ``skills[rows[r]]`` (in ``[0, R')``, unchecked).
    draws : ndarray of int64, shape (R, M)
    costs : ndarray, shape (R, K, d), C-contiguous
    mode : int
        ``NO_COST`` (``cost`` untouched), ``DRAW_COSTS`` or ``PAIR_COSTS``.
    reward : ndarray, shape (R,)
        Filled with ``draws_sum_max_reward(skills, draws, rows)``.
    cost : ndarray, shape (R, d)
        Filled with ``draws_cost(draws, costs)`` or ``team_cost(draws_to_mask(draws, K),
        costs)``.

    Returns
    -------
    int
        -1, or the first run with a draw outside ``[0, K)`` (nothing is then computed for it
        and the later runs).
    """
    n_runs, m = draws.shape
    n_dims, k = skills.shape[1], skills.shape[2]
    d = costs.shape[2]
    maxima = np.empty(n_dims)
    routed = np.empty(m, dtype=np.int64)
    picked = np.empty(m)
    for r in range(n_runs):
        for j in range(m):
            if draws[r, j] < 0 or draws[r, j] >= k:
                return r
        v = skills[rows[r]]
        for n in range(n_dims):
            best = v[n, draws[r, 0]]
            for j in range(1, m):
                x = v[n, draws[r, j]]
                if x > best or x != x:  # np.maximum: NaN propagates
                    best = x
            maxima[n] = best
        reward[r] = 0.0 + _pairwise_sum(maxima, n_dims)
        if mode == DRAW_COSTS and d == 1:  # numpy sums the (R, M) picks along their rows
            for j in range(m):
                picked[j] = costs[r, draws[r, j], 0]
            cost[r, 0] = 0.0 + _pairwise_sum(picked, m)
        elif mode == DRAW_COSTS:
            for c in range(d):
                total = 0.0
                for j in range(m):
                    total += costs[r, draws[r, j], c]
                cost[r, c] = total
        elif mode == PAIR_COSTS:
            _pair_cost(draws, costs, r, routed, cost)
    return -1


@compiled
def pair_costs(draws: IntArray, costs: FloatArray, cost: FloatArray) -> None:
    """``cost`` (R, d) = ``team_cost(draws_to_mask(draws, K), costs)`` of the draws (R, M) in
    range, in ``PAIR_COSTS`` order (the product's floats where ``blas_pairs_order``)."""
    routed = np.empty(draws.shape[1], dtype=np.int64)
    for r in range(draws.shape[0]):
        _pair_cost(draws, costs, r, routed, cost)


@compiled
def credit_distinct(
    draws: IntArray, costs: FloatArray, cost: FloatArray, predicted: FloatArray, n_obs: FloatArray
) -> bool:
    """The counting half of a cost estimate's update
    (``msroute.policies.costs.CostEstimate.update``, mode "distinct") of a batch, in one
    loop: ``predicted`` (R, d) = ``pair_costs`` of the draws (R, M) under the estimates
    ``costs`` (R, K, d); ``n_obs`` (R, K) += 1.0 at each run's distinct routed experts (the
    floats of adding their 0/1 mask); returns whether any realized ``cost`` (R, d) differs from
    its prediction (only then do the estimates move)."""
    routed = np.empty(draws.shape[1], dtype=np.int64)
    moved = False
    for r in range(draws.shape[0]):
        _pair_cost(draws, costs, r, routed, predicted)
        for j in range(draws.shape[1]):  # the distinct draws, each once
            if not repeated(draws, r, j):
                n_obs[r, draws[r, j]] += 1.0
        for c in range(cost.shape[1]):
            if cost[r, c] != predicted[r, c]:
                moved = True
    return moved


def _probe(d: int) -> tuple[IntArray, FloatArray]:
    """Draws (R, 5) and costs (R, 23, d) on which summing orders differ: routed experts
    adjacent in a pair, split across pairs and among the last ``23 mod 4``, with costs spread
    over seven decades."""
    rng = np.random.default_rng(20240601 + d)
    patterns = [[0, 1, 2, 3, 4], [2, 3, 6, 7, 9], [1, 2, 5, 6, 21], [0, 4, 5, 20, 22]]
    draws = np.array(patterns * 10, dtype=np.int64)
    costs = rng.random((draws.shape[0], 23, d)) * 10.0 ** rng.integers(
        -3, 4, (draws.shape[0], 23, d)
    )
    return draws, costs


@cache
def blas_pairs_order() -> bool:
    """Whether numpy's ``team_cost`` sums d = 2 and d = 3 costs in ``PAIR_COSTS`` order:
    True when the product and ``round_outcome`` agree on every probe (``_probe``)."""
    from msroute.core.problem_batch import team_cost
    from msroute.core.reward import draws_to_mask

    for d in (2, 3):
        draws, costs = _probe(d)
        n_runs, k = costs.shape[:2]
        reward, cost = np.empty(n_runs), np.empty((n_runs, d))
        rows = np.zeros(n_runs, dtype=np.int64)
        round_outcome(np.zeros((1, 1, k)), rows, draws, costs, PAIR_COSTS, reward, cost)
        if not np.array_equal(cost, team_cost(draws_to_mask(draws, k), costs)):
            return False
    return True
