"""Speed of the regret metrics and of the oracle on a Figure 1-sized run.

Measures, on one run of T = 10,000 rounds with R = 20 runs (N = 3, K = 50, M = 5) of the
packaged TREC instance and the stochastic environment:

* R1, the paper's proxy, computed exactly (closed form) and with the paper's 200-draw Monte Carlo
  estimate (on a 500-round slice, extrapolated: the estimate is linear in T);
* R2 on the running average;
* OPT of eq. (3) for one run (T = 10,000), certified to a gap of 1e-6.

Usage: ``python benchmarks/bench_metrics.py``. Prints a Markdown table.
"""

from __future__ import annotations

import time

import numpy as np

from msroute import (
    Constraints,
    Problem,
    StochasticEnv,
    best_fixed_policy_for,
    constraint_regret,
    objective_regret_proxy,
    sample_instance,
)
from msroute.datasets import load_crowd

T, R, M = 10_000, 20, 5


def main() -> None:
    inst = sample_instance(load_crowd(), n_experts=50, n_dims=3, seed=0)
    env = StochasticEnv(inst.skills_base, seed=list(range(R)))
    skills = env.skills(0, T)
    rng = np.random.default_rng(0)
    rewards = rng.random((T, R)) * 3
    costs = rng.random((T, R, 2))
    q = rng.dirichlet(np.ones(50), size=R)
    at = np.arange(10, T + 1, 10)

    tic = time.perf_counter()
    objective_regret_proxy(rewards, q, skills, M, at=at)
    exact = time.perf_counter() - tic

    part = 500
    tic = time.perf_counter()
    objective_regret_proxy(
        rewards[:part], q, skills[:part], M, at=at[at <= part], method="monte_carlo", seed=1
    )
    mc = (time.perf_counter() - tic) * T / part

    tic = time.perf_counter()
    constraint_regret(costs, np.full(2, -np.inf), np.array([0.5, 2.0]), at=at)
    r2 = time.perf_counter() - tic

    problem = Problem(inst.costs, M, Constraints(upper=[M * inst.costs[:, 0].mean(), 2.0]))
    tic = time.perf_counter()
    res = best_fixed_policy_for(problem, skills[:, 0])
    oracle = time.perf_counter() - tic

    print(f"T = {T:,} rounds, R = {R} runs, N = 3, K = 50, M = {M}")
    print()
    print("| computation | seconds |")
    print("|---|---:|")
    print(f"| R1 proxy, exact, at all {at.size} batch ends, all runs | {exact:.3f} |")
    print(f"| R1 proxy, 200-draw Monte Carlo (extrapolated from {part} rounds) | {mc:.1f} |")
    print(f"| R2 at all batch ends, all runs | {r2:.4f} |")
    print(f"| OPT of eq. (3) for one run, certified gap {res.gap:.1e} | {oracle:.2f} |")
    print()
    print(f"Exact R1 is {mc / exact:.0f}x faster than the paper's Monte Carlo estimate.")


if __name__ == "__main__":
    main()
