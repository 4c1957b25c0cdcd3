"""What contexts cost per round: OMD with 14 task contexts against one context, R = 1.

The packaged LLM table (9 models, 14 tasks), M = 1, a budget of $0.0001 per query, 5,000 queries
through ``simulate``; the policy's own time per round (select + update, the simulator's
``wall_time``). The configurations of a seed run side by side in one ``simulate`` call, round
after round on the same prompts (a context-free policy ignores the categories it is shown), so
that a burst of load on a noisy machine hits them alike; each seed runs twice, the second time
in the reverse order, and a configuration's time for the seed is the faster of its two. Prints
each pass's microseconds per round and the ratios of the means over the seeds. One context is
run twice: at its defaults (no budget margin) and with the budget margin that contexts turn on
by default (``budget_margin=3``), so that the second ratio is what the contexts alone cost.
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
RUNS: dict[str, dict[str, float]] = {
    "1 context": {"n_contexts": 1},
    "1 context, budget_margin 3": {"n_contexts": 1, "budget_margin": 3.0},
    "14 contexts": {"n_contexts": 14},
}


def per_round(seed: int, names: list[str]) -> dict[str, float]:
    """Microseconds per round of each configuration, all in one simulation (in this order)."""
    table = load_llmrouter()
    env = OutcomeEnv(table, horizon=T, seed=seed)
    problem = Problem(
        table.mean_costs(), 1, Constraints(upper=[1e-4, None], names=table.cost_names)
    )
    policies = {}
    for name in names:
        options = dict(RUNS[name])
        n = int(options.pop("n_contexts"))
        policies[name] = make_policy("omd", problem, horizon=T, n_contexts=n, seed=seed, **options)
    run = simulate_summary(policies, env, problem, T)
    return {name: 1e6 * run[name].wall_time / T for name in names}


def main() -> None:
    per_round(99, list(RUNS))  # compile the kernels first
    seeds = range(5)
    times: dict[str, dict[int, float]] = {name: {} for name in RUNS}
    for seed in seeds:
        for rep, names in enumerate((list(RUNS), list(RUNS)[::-1])):
            for name, t in per_round(seed, names).items():
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
