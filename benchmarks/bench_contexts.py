"""What contexts cost per round: OMD with 14 task contexts against one context, R = 1.

The packaged LLM table (9 models, 14 tasks), M = 1, a budget of $0.0001 per query, 5,000 queries
through ``simulate``; the policy's own time per round (select + update, the simulator's
``wall_time``), alternated three times so that a noisy machine hits both alike. Prints each
run's microseconds per round and the ratio of the medians.
Usage: ``python benchmarks/bench_contexts.py``.
"""

from __future__ import annotations

import numpy as np

from msroute.datasets.outcomes import load_llmrouter
from msroute.outcome_env import OutcomeEnv
from msroute.policies.registry import make_policy
from msroute.problem import Constraints, Problem
from msroute.simulate import simulate_summary

T = 5000


def per_round(n_contexts: int, seed: int) -> float:
    table = load_llmrouter()
    env = OutcomeEnv(table, horizon=T, seed=seed)
    problem = Problem(
        table.mean_costs(), 1, Constraints(upper=[1e-4, None], names=table.cost_names)
    )
    pol = make_policy("omd", problem, horizon=T, n_contexts=n_contexts, seed=seed)
    if n_contexts == 1:  # the same prompts, their categories not shown
        ctx = np.zeros((T, 1), dtype=np.int64)
        run = simulate_summary(
            {"omd": pol}, env, problem, T, contexts=ctx, context_weights=np.ones((1, 1))
        )
    else:
        run = simulate_summary({"omd": pol}, env, problem, T)
    return 1e6 * run["omd"].wall_time / T


def main() -> None:
    per_round(14, 99)  # compile the kernels first
    times: dict[int, list[float]] = {1: [], 14: []}
    for rep in range(3):
        for x in (1, 14):
            times[x].append(per_round(x, rep))
            print(f"contexts {x:2d}, pass {rep}: {times[x][-1]:7.1f} us a round", flush=True)
    one, many = float(np.median(times[1])), float(np.median(times[14]))
    print(f"median: 1 context {one:.1f} us, 14 contexts {many:.1f} us, ratio {many / one:.2f}")


if __name__ == "__main__":
    main()
