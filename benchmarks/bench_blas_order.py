"""What the compiled loops that sum costs in OpenBLAS's order buy, side by side in one run.

Three compiled loops reproduce the order in which OpenBLAS sums numpy's cost products, so that a
batch of runs gets the floats a single run (a live router) gets from numpy: the simulator's
realized cost of the distinct routed experts (``msroute._outcome.PAIR_COSTS``), a learned
cost estimate's update (``msroute._outcome.credit_distinct``, ``pair_costs``) and the
Lagrangian dual's penalty (``msroute.policies._compiled.dual.penalties``). Where numpy's BLAS
sums in another order, each falls back to numpy's product. This script measures:

1. **the loops alone** against the numpy calls they replace (R runs, K = 50, M = 5, d = 2),
   alternated, medians of many calls;
2. **Figure 2's cells** (every policy, both environments, four levels, 20 seeds; ``--rounds``
   rounds instead of 10,000) with the loops and with numpy's product in their place, alternated,
   the results checked equal;
3. **whether a plain summing order would do**: the share of Figure 2's round costs and
   penalties whose floats differ from numpy's when summed in index order without the fused
   multiply-add (a plain compiled loop). Any difference breaks "a run gives the same numbers
   alone or in a batch" and the fingerprint (tests/test_fingerprint.py).

Usage: ``python benchmarks/bench_blas_order.py [--rounds 2000] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numba
import numpy as np

import msroute._outcome as outcome
import msroute.policies.lagrangian as lagrangian
from msroute.experiments.fig2 import Fig2Config, sweep_specs
from msroute.experiments.sweep import sweep_worker
from msroute.policies._compiled.dual import penalties
from msroute.problem_batch import team_cost
from msroute.reward import draws_to_mask


@contextmanager
def numpy_products() -> Iterator[None]:
    """numpy's product in place of the three loops (what a BLAS of another order gets)."""
    saved = outcome.blas_pairs_order, lagrangian._compiled_penalty_agrees
    outcome.blas_pairs_order = lambda: False  # type: ignore[assignment]
    lagrangian._compiled_penalty_agrees = lambda n_experts: False  # type: ignore[assignment]
    try:
        yield
    finally:
        outcome.blas_pairs_order, lagrangian._compiled_penalty_agrees = saved


def median_us(fn: Callable[[], object], calls: int) -> float:
    times = np.empty(calls)
    for i in range(calls):
        tic = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - tic
    return float(np.median(times)) * 1e6


def loops_alone(n_runs: int, calls: int) -> None:
    rng = np.random.default_rng(0)
    k, m = 50, 5
    costs = rng.random((n_runs, k, 2))
    draws = rng.integers(0, k, (n_runs, m))
    skills = rng.random((n_runs, 3, k))
    rows = np.arange(n_runs)
    reward, cost = np.empty(n_runs), np.empty((n_runs, 2))
    weights = rng.normal(size=(n_runs, 2))
    out = np.empty((n_runs, k))

    def paired() -> None:
        outcome.round_outcome(skills, rows, draws, costs, outcome.PAIR_COSTS, reward, cost)

    def by_numpy() -> None:
        outcome.round_outcome(skills, rows, draws, costs, outcome.NO_COST, reward, cost)
        team_cost(draws_to_mask(draws, k), costs)

    def penalty_loop() -> None:
        penalties(costs, weights, out)

    def penalty_numpy() -> None:
        lagrangian._matmul_penalty(costs, weights)

    paired(), by_numpy(), penalty_loop(), penalty_numpy()
    a, b, c, d = [], [], [], []
    for _ in range(5):  # alternated, so that a change of load falls on both
        a.append(median_us(paired, calls))
        b.append(median_us(by_numpy, calls))
        c.append(median_us(penalty_loop, calls))
        d.append(median_us(penalty_numpy, calls))
    pa, pb, pc, pd = (float(np.median(x)) for x in (a, b, c, d))
    print(
        f"| R = {n_runs} | round outcome {pa:.1f} µs, numpy cost {pb:.1f} µs ({pb / pa:.1f}x) "
        f"| penalty {pc:.1f} µs, numpy {pd:.1f} µs ({pd / pc:.1f}x) |"
    )


def figure2_cells(rounds: int, repeats: int) -> None:
    cfg = Fig2Config(horizon=rounds)
    specs = [spec for _, spec in sweep_specs(cfg, "bench")]
    for spec in specs[:2]:  # compile and warm both paths outside the timings
        sweep_worker(spec)
        with numpy_products():
            sweep_worker(spec)
    print(f"\nFigure 2's cells, {rounds} rounds, 20 seeds x 4 levels, seconds (best of {repeats}):")
    print("| policy | env | loops | numpy | ratio |\n|---|---|---|---|---|")
    total_fast = total_slow = 0.0
    for spec in specs:
        fast, slow = [], []
        for _ in range(repeats):
            tic = time.perf_counter()
            got = sweep_worker(spec)
            fast.append(time.perf_counter() - tic)
            with numpy_products():
                tic = time.perf_counter()
                want = sweep_worker(spec)
                slow.append(time.perf_counter() - tic)
            for key in ("avg_reward", "avg_cost", "feasible", "r2"):
                np.testing.assert_array_equal(got[key], want[key])
        f, s = min(fast), min(slow)
        total_fast, total_slow = total_fast + f, total_slow + s
        print(f"| {spec.policy} | {spec.env} | {f:.2f} | {s:.2f} | {s / f:.2f} |")
    print(f"| all | | {total_fast:.2f} | {total_slow:.2f} | {total_slow / total_fast:.2f} |")


@numba.njit(cache=False)
def _index_order_cost(draws: np.ndarray, costs: np.ndarray, out: np.ndarray) -> None:
    for r in range(draws.shape[0]):
        k = costs.shape[1]
        seen = np.zeros(k, dtype=np.bool_)
        for j in range(draws.shape[1]):
            seen[draws[r, j]] = True
        for c in range(costs.shape[2]):
            total = 0.0
            for i in range(k):
                if seen[i]:
                    total += costs[r, i, c]
            out[r, c] = total


@numba.njit(cache=False)
def _plain_penalty(costs: np.ndarray, weights: np.ndarray, out: np.ndarray) -> None:
    for r in range(costs.shape[0]):
        for i in range(costs.shape[1]):
            out[r, i] = costs[r, i, 0] * weights[r, 0] + costs[r, i, 1] * weights[r, 1]


def plain_order() -> None:
    cfg = Fig2Config(horizon=1)
    from msroute.experiments.cells import build_batch

    spec = sweep_specs(cfg, "bench")[0][1]
    batch = build_batch(spec).batch
    costs = np.ascontiguousarray(batch.costs, dtype=np.float64)
    n_runs, k = costs.shape[:2]
    rng = np.random.default_rng(1)
    differ = total = 0
    pen_differ = pen_total = 0
    for _ in range(200):
        draws = rng.integers(0, k, (n_runs, 5))
        want = team_cost(draws_to_mask(draws, k), costs)
        got = np.empty_like(want)
        _index_order_cost(draws, costs, got)
        differ += int(np.sum(got != want))
        total += want.size
        weights = rng.exponential(size=(n_runs, 2)) * np.array([-1.0, -1.0])
        pen = np.empty((n_runs, k))
        _plain_penalty(costs, weights, pen)
        pen_differ += int(np.sum(pen != lagrangian._matmul_penalty(costs, weights)))
        pen_total += pen.size
    print(
        f"\nPlain order on Figure 2's instances ({n_runs} runs, K = {k}): "
        f"{differ} of {total} round costs ({100 * differ / total:.1f}%) and "
        f"{pen_differ} of {pen_total} penalties ({100 * pen_differ / pen_total:.1f}%) "
        "differ from numpy's floats"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    print(f"OpenBLAS's pair order here: {outcome.blas_pairs_order()}\n")
    print("The loops alone (median µs per call, median of 5 alternated blocks):")
    for n_runs in (20, 160):
        loops_alone(n_runs, args.calls)
    plain_order()
    figure2_cells(args.rounds, args.repeats)


if __name__ == "__main__":
    main()
