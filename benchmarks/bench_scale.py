"""OMD-Approachability's per-round cost as the number of experts K grows (one run, R = 1).

Run: ``python benchmarks/bench_scale.py [--experts 50 1000 10000 100000] [--rounds 2000]
[--variants model paper]``.

One run routes M = 5 draws per round among K experts with a budget and an expert cap (the
Section 6 cost shapes: a workload in [0, 1] and 10 flagged experts), as a live router would.
Each round's ``select`` + ``update`` is timed (the environment's skills, the reward and the
cost are computed outside the timed part); the mean includes the projection that OMD makes
once per batch of B = 10 rounds, so it is the amortized per-round cost. Times are CPU time of
this thread, so that other load on the machine inflates them less. The ratio is to K = 50 of
the same variant, measured in the same run; the variants alternate at each K, so that a change
in the machine's load hits them alike. The default ``model`` variant fits its reward model
densely up to ``DENSE_FIT_MAX_EXPERTS`` experts and sparsely above
(:mod:`msroute.policies.omd_variants`); the table says which fit each K used.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from msroute import Constraints, Problem, batch_sum_max_reward
from msroute.policies.base import draws_to_mask
from msroute.policies.omd_variants import DENSE_FIT_MAX_EXPERTS, VARIANTS
from msroute.policies.registry import make_policy
from msroute.problem_batch import ProblemBatch


def per_round(k: int, rounds: int, variant: str, m: int = 5, n: int = 3) -> tuple[float, float]:
    """Mean and median microseconds of one OMD round with K = k experts."""
    rng = np.random.default_rng(0)
    costs = np.column_stack([rng.random(k), (np.arange(k) < 10).astype(float)])
    problem = Problem(costs, m_draws=m, constraints=Constraints(upper=[m * 0.4, 1.0]))
    batch = ProblemBatch(problem, 1)
    pol = make_policy("omd", problem, horizon=rounds, seed=1, variant=variant)
    means = rng.uniform(0.3, 0.9, (n, k))
    spent = np.empty(rounds)
    for t in range(rounds):
        skills = np.clip(means + 0.1 * rng.standard_normal((1, n, k)), 0.0, 1.0)
        tic = time.thread_time()
        decision = pol.select()
        mid = time.thread_time()
        mask = draws_to_mask(decision.draws, k)
        reward = batch_sum_max_reward(skills, mask)
        cost = batch.realized_cost(mask)
        back = time.thread_time()
        pol.update(decision, reward, cost)
        spent[t] = (mid - tic) + (time.thread_time() - back)
    return float(spent.mean() * 1e6), float(np.median(spent) * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experts", type=int, nargs="+", default=[50, 1000, 10_000, 100_000])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--variants", nargs="+", default=["model", "paper"], help="OMD variants")
    args = ap.parse_args()
    print("OMD-Approachability, R = 1, M = 5, d = 2; CPU microseconds per round (select + update)")
    print(
        "| K | variant (fit) | mean (with the projection every 10 rounds) | median | "
        "mean / mean at the first K |"
    )
    print("|---:|---|---:|---:|---:|")
    for variant in args.variants:  # warm up: lazy imports and first-call costs stay out
        per_round(50, 50, variant)
    base: dict[str, float] = {}
    for k in args.experts:
        for variant in args.variants:
            mean, median = per_round(k, args.rounds, variant)
            base.setdefault(variant, mean)
            fit = ""
            if VARIANTS[variant].estimator == "model":
                fit = " (dense)" if k <= DENSE_FIT_MAX_EXPERTS else " (sparse)"
            print(
                f"| {k:,} | {variant}{fit} | {mean:.0f} | {median:.0f} | "
                f"{mean / base[variant]:.1f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
