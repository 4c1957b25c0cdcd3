"""What contexts cost per round: OMD with 14 task contexts against one context, R = 1.

The packaged LLM table (9 models, 14 tasks), M = 1, a budget of $0.0001 per query, 5,000 queries
through ``simulate``; the policy's own time per round (select + update, the simulator's
``wall_time``), on the same 5 seeds for each configuration, each run twice in alternation so
that a noisy machine hits all alike. Prints each run's microseconds per round and the ratios
of the means over the seeds of each seed's faster run. One context is run twice: at its
defaults (no budget margin) and with the budget margin that contexts turn on by default
(``budget_margin=3``), so that the second ratio is what the contexts alone cost.
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


def per_round(n_contexts: int, seed: int, **options: float) -> float:
    table = load_llmrouter()
    env = OutcomeEnv(table, horizon=T, seed=seed)
    problem = Problem(
        table.mean_costs(), 1, Constraints(upper=[1e-4, None], names=table.cost_names)
    )
    pol = make_policy("omd", problem, horizon=T, n_contexts=n_contexts, seed=seed, **options)
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
    runs = {
        "1 context": {"n_contexts": 1},
        "1 context, budget_margin 3": {"n_contexts": 1, "budget_margin": 3.0},
        "14 contexts": {"n_contexts": 14},
    }
    # The same 5 seeds for every configuration, each run twice in alternation; a
    # configuration's time is the sum over the seeds of each seed's faster run, so that
    # every configuration does the same work and a burst of load hits them alike.
    seeds = range(5)
    times: dict[str, dict[int, float]] = {name: {} for name in runs}
    for rep in range(2):
        for seed in seeds:
            for name, options in runs.items():
                n = int(options["n_contexts"])
                extra = {k: v for k, v in options.items() if k != "n_contexts"}
                t = per_round(n, seed, **extra)
                times[name][seed] = min(t, times[name].get(seed, np.inf))
                print(f"{name:27s} pass {rep} seed {seed}: {t:7.1f} us a round", flush=True)
    mean = {name: float(np.mean(list(v.values()))) for name, v in times.items()}
    many = mean["14 contexts"]
    print("mean over seeds: " + ", ".join(f"{name} {v:.1f} us" for name, v in mean.items()))
    print(
        f"ratio 14 contexts / 1 context: {many / mean['1 context']:.2f} at the defaults, "
        f"{many / mean['1 context, budget_margin 3']:.2f} with the same margin"
    )


if __name__ == "__main__":
    main()
