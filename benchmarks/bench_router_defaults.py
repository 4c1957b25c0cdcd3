"""Does the live Router learn as fast as ``msroute bench`` says? Both on the packaged LLM table.

``msroute bench llmrouter`` builds its policies with the live router's configuration
(``msroute.policies.live``), batched over seeds and budgets; here the same seeds' prompt
streams are also routed by ``msroute.Router`` at its defaults, one query at a time with its
feedback (the prompt's recorded score as the reward, its recorded cost as the realized cost).
Per budget and horizon: the mean reward of each, their difference, the spend / budget of the
worst router run, and the best single model within the budget (from the bench).

Usage: ``python benchmarks/bench_router_defaults.py [--horizons 6300 20000] [--seeds 5]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import msroute
from msroute.datasets.outcomes import load_llmrouter
from msroute.experiments.outcomes import (
    _POLICY_KEY,
    LLMROUTER_BUDGETS,
    OutcomeBenchConfig,
    run_outcome_bench,
)
from msroute.outcome_env import OutcomeEnv
from msroute.router import Router


def router_run(budget: float, seed: int, horizon: int) -> tuple[float, float]:
    """Mean reward and spend / budget of one Router on seed ``seed``'s prompt stream."""
    table = load_llmrouter()
    env = OutcomeEnv(table, horizon=horizon, seed=np.random.SeedSequence(seed))
    prompts = env.prompts[:, 0]
    prior = table.mean_costs()
    router = Router(
        {
            "policy": "omd",
            "m_draws": 1,
            "seed": seed + _POLICY_KEY,
            "cost_names": list(table.cost_names),
            "experts": {m: prior[i].tolist() for i, m in enumerate(table.models)},
            "contexts": list(table.categories),
            "constraints": {"upper": {table.cost_names[0]: budget}},
        }
    )
    col = {m: i for i, m in enumerate(table.models)}
    reward = 0.0
    for p in prompts:
        d = router.route(context=table.categories[table.category[p]])
        cols = [col[e] for e in d.team]
        r = float(table.scores[p][:, cols].max(axis=1).sum())
        cost = table.costs[p][cols].sum(axis=0)
        router.feedback(d.decision_id, r, cost=cost.tolist())
        reward += r
    spend = router.state()["avg_cost"][table.cost_names[0]]
    return reward / horizon, spend / budget


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--horizons", type=int, nargs="*", default=[6300, 20_000])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"msroute {msroute.__version__}, llmrouter, M = 1, {args.seeds} seeds")
    print(
        "| T | budget | bench | router | router - bench | worst router spend/budget | best single |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for horizon in args.horizons:
        tic = time.perf_counter()
        cfg = OutcomeBenchConfig(m_draws=(1,), policies=("omd",), seeds=args.seeds, horizon=horizon)
        with tempfile.TemporaryDirectory() as tmp:
            rows = run_outcome_bench(cfg, Path(tmp), plot=False, quiet=True)
        for level in LLMROUTER_BUDGETS:
            budget = float(level)
            sel = [r for r in rows if r["policy"] == "omd" and float(r["budget"]) == budget]
            bench = float(np.mean([r["avg_reward"] for r in sel]))
            single = float(np.mean([r["best_single"] for r in sel]))
            runs = np.array([router_run(budget, s, horizon) for s in cfg.seed_list])
            print(
                f"| {horizon} | {level} | {bench:.4f} | {runs[:, 0].mean():.4f} | "
                f"{runs[:, 0].mean() - bench:+.4f} | {runs[:, 1].max():.4f} | {single:.4f} |",
                flush=True,
            )
        print(f"(T = {horizon}: {time.perf_counter() - tic:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
