"""Which OMD the live Router should run: variants under the anytime step, through the Router.

Two workloads, immediate feedback, no journal, the same seeds for every candidate:

* ``llmrouter``: the packaged LLM table, 9 models, 14 task contexts, M = 1, a budget of
  $0.0001 per query on the prompts' own costs (reported with the feedback), 20,000 queries;
* ``trec``: a simulated TREC pool (K = 20, M = 3, N = 3, the paper's tight workload budget and
  expert cap 1.0, Beta skills), 5,000 queries (docs/architecture.md's step-size benchmark).

Prints per candidate and workload the mean reward, the worst spend / bound over the seeds (on
trec the nearer of the two bounds) and the time per route+feedback pair.
Usage: ``python benchmarks/bench_router_defaults.py [seeds]``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

import msroute
from msroute.datasets.outcomes import load_llmrouter
from msroute.experiments.protocol import level_constraints, paper_instance
from msroute.outcome_env import OutcomeEnv
from msroute.router import DEFAULT_OMD_PARAMS, Router

CANDIDATES: dict[str, dict[str, Any]] = {
    "paper, eta_mult 0.1": {"variant": "paper", "eta_mult": 0.1},
    "model, eta_mult 0.0003": {"variant": "model", "eta_mult": 0.0003},
    "model, eta_mult 0.001": {"variant": "model", "eta_mult": 0.001},
    "model, eta_mult 0.001, linear surrogate": {
        "variant": "model",
        "eta_mult": 0.001,
        "surrogate": "linear",
    },
    "router default": {},
}


def llm_run(params: dict[str, Any], seed: int) -> tuple[float, float, float]:
    table = load_llmrouter()
    t_len, budget = 20_000, 1e-4
    env = OutcomeEnv(table, horizon=t_len, seed=seed)
    prompts = env.prompts[:, 0]
    prior = table.mean_costs()
    router = Router(
        {
            "policy": "omd",
            "m_draws": 1,
            "seed": seed,
            "cost_names": list(table.cost_names),
            "experts": {m: prior[i].tolist() for i, m in enumerate(table.models)},
            "contexts": list(table.categories),
            "constraints": {"upper": {"usd": budget}},
            "params": {"eta_schedule": "anytime", **params},
        }
    )
    col = {m: i for i, m in enumerate(table.models)}
    reward = spend = 0.0
    tic = time.perf_counter()
    for p in prompts:
        d = router.route(context=table.categories[table.category[p]])
        cols = [col[e] for e in d.team]
        r = float(table.scores[p][:, cols].max(axis=1).sum())
        cost = table.costs[p][cols].sum(axis=0)
        router.feedback(d.decision_id, r, cost=cost.tolist())
        reward += r
        spend += float(cost[0])
    per_pair = (time.perf_counter() - tic) / t_len
    return reward / t_len, spend / t_len / budget, per_pair


def trec_run(params: dict[str, Any], seed: int) -> tuple[float, float, float]:
    k, m, n, t_len = 20, 3, 3, 5000
    inst = paper_instance(seed, k, n)
    budget = float(level_constraints(inst, m, "tight").upper_array()[0])
    ids = [f"w{i}" for i in range(k)]
    router = Router(
        {
            "policy": "omd",
            "m_draws": m,
            "cost_names": ["workload", "experts"],
            "seed": seed,
            "experts": {e: [float(c) for c in inst.costs[i]] for i, e in enumerate(ids)},
            "constraints": {"upper": {"workload": budget, "experts": 1.0}},
            "params": {"eta_schedule": "anytime", **params},
        }
    )
    skills = msroute.StochasticEnv(inst.skills_base, kappa=20, seed=[seed + 7]).skills(0, t_len)
    reward = 0.0
    spend = np.zeros(2)
    tic = time.perf_counter()
    for t in range(t_len):
        d = router.route()
        cols = [ids.index(e) for e in d.team]
        r = float(skills[t, 0][:, cols].max(axis=1).sum())
        router.feedback(d.decision_id, r)
        reward += r
        spend += inst.costs[cols].sum(axis=0)
    worst = float((spend / t_len / np.array([budget, 1.0])).max())  # the bound nearest
    return reward / t_len, worst, (time.perf_counter() - tic) / t_len


def main(seeds: int) -> None:
    print(f"Router default today: {DEFAULT_OMD_PARAMS}")
    for workload, run in (("llmrouter", llm_run), ("trec", trec_run)):
        print(f"\n{workload}: mean reward, worst spend/budget, us per pair ({seeds} seeds)")
        for label, params in CANDIDATES.items():
            out = np.array([run(params, s) for s in range(seeds)])
            print(
                f"  {label:40s} reward {out[:, 0].mean():.4f}  worst spend {out[:, 1].max():.4f}"
                f"  {1e6 * out[:, 2].mean():6.1f} us",
                flush=True,
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
