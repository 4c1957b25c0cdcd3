"""A warm start's switches over a generated family of outcome tables (docs/llm-routing.md).

``bench_warm_start.py`` measures the warm start on the packaged LLM table; a warm-start default
chosen there must not be tuned to that one table. Each instance here is an outcome table drawn
from its own seed, split by prompt in halves per seed as the packaged one is (``--warm-split
0.5``: the router starts from one half and streams the other, drawn from the same distribution):

* K 3-10 models at prices log-uniform over two decades (1e-4 to 1e-2 per call), each model's
  ability rising with its price (0.8 logit per decade) plus its own (sd 0.5), and per context
  (1-6 of them) an offset of each model's (sd 1): which model is best differs by context;
* 100-400 prompts per context and half, each with a difficulty shared by the models (sd 1:
  models fail together) and a length that scales every model's cost of it (log-normal, sd 0.5,
  and a context's own factor, sd 0.5); a score is a right answer (0 or 1) with probability
  ``sigmoid(ability - difficulty)``;
* the budgets ``msroute bench --outcomes`` picks for a user's table
  (``msroute.experiments.outcomes.default_budgets``: cheap, middle, generous).

Each instance is run by the outcome bench (the live router's configuration, M = 1) with one of
the warm start's switches (``msroute.warmstart.warm_start``) on, its default, and off (the warm
start before it), on the same prompts, at ``--horizons``: ``--switch margin`` (the default)
keeps the live budget margin, ``--switch explored`` lets the decaying floor count the table as
explored. Per horizon and start: the mean gap to the streamed half's OPT^ctx and its 90th
percentile over the runs, the runs within budget, and the paired difference (on minus off) per
budget level: its mean, its 10th percentile and the runs where the switch loses more than 0.005.

Usage: ``python benchmarks/bench_warm_family.py [--instances 30] [--seeds 2] [--horizons 2000
20000] [--jobs 1] [--switch explored]``.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import msroute
from msroute.datasets.outcomes import load_outcomes
from msroute.experiments.outcomes import OutcomeBenchConfig, default_budgets, run_outcome_bench

#: The family's spawn key (apart from every other seeded stream of the project).
_FAMILY_KEY = 0x77617266  # "warf"


def family_table(seed: int, path: Path) -> None:
    """Draw instance ``seed``'s outcome table (module docstring) and write it to ``path`` as
    a wide CSV (one score and one ``usd`` cost per model)."""
    rng = np.random.default_rng([seed, _FAMILY_KEY])
    k, x = int(rng.integers(3, 11)), int(rng.integers(1, 7))
    price = np.sort(10.0 ** rng.uniform(-4.0, -2.0, k))
    ability = 0.8 * np.log10(price / 1e-4) + rng.normal(0.0, 0.5, k) - 0.5
    per_ctx = ability + rng.normal(0.0, 1.0, (x, k))
    length = np.exp(rng.normal(0.0, 0.5, x))
    rows = []
    for c in range(x):
        for p in range(2 * int(rng.integers(100, 401))):
            hard = rng.normal(0.0, 1.0)
            chance = 1.0 / (1.0 + np.exp(-(per_ctx[c] - hard)))
            scores = (rng.random(k) < chance).astype(int)
            cost = price * length[c] * np.exp(rng.normal(0.0, 0.5))
            rows.append([f"p{c}-{p}", f"task{c}", *scores, *(f"{v:.6g}" for v in cost)])
    models = [f"m{i}" for i in range(k)]
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["prompt_id", "category", *models, *(f"{m}|usd" for m in models)])
        out.writerows(rows)


def instance_rows(seed: int, args: argparse.Namespace, horizon: int) -> list[dict[str, Any]]:
    """Instance ``seed`` run with the switch ``args.switch`` on and off: one row per (start,
    budget, seed)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"family{seed}.csv"
        family_table(seed, path)
        budgets = default_budgets(load_outcomes(path), "usd")
        for on in (True, False):
            cfg = OutcomeBenchConfig(
                table=str(path),
                m_draws=(1,),
                policies=("omd",),
                budgets=budgets,
                seeds=args.seeds,
                horizon=horizon,
                warm_split=0.5,
                warm_margin=on or args.switch != "margin",
                warm_explored=on or args.switch != "explored",
            )
            done = run_outcome_bench(cfg, Path(tmp) / "out", jobs=args.jobs, plot=False, quiet=True)
            for r in done:
                level = budgets.index(str(r["budget"]))
                rows.append({**r, "instance": seed, "on": on, "level": level})
    return rows


def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values), q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--horizons", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--switch", choices=("margin", "explored"), default="margin")
    args = parser.parse_args()
    print(
        f"msroute {msroute.__version__}; {args.instances} instances x {args.seeds} splits, M = 1, "
        f"switch {args.switch}, "
        f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}"
    )
    print(
        f"| T | budget | gap with {args.switch} (p90) | without (p90) | within with / without "
        "| paired difference (p10) | runs worse by > 0.005 |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for horizon in args.horizons:
        tic = time.perf_counter()
        rows = [r for s in range(args.instances) for r in instance_rows(s, args, horizon)]
        for level, name in enumerate(("cheap", "middle", "generous")):
            runs = [r for r in rows if r["level"] == level]
            key = {(r["instance"], r["seed"]): r for r in runs if not r["on"]}
            gap = {
                m: [r["opt_reward"] - r["avg_reward"] for r in runs if r["on"] == m]
                for m in (True, False)
            }
            within = {
                m: sum(bool(r["feasible"]) for r in runs if r["on"] == m) for m in (True, False)
            }
            diff = [
                r["avg_reward"] - key[(r["instance"], r["seed"])]["avg_reward"]
                for r in runs
                if r["on"]
            ]
            print(
                f"| {horizon:,} | {name} | {statistics.mean(gap[True]):.4f} "
                f"({quantile(gap[True], 0.9):.4f}) | {statistics.mean(gap[False]):.4f} "
                f"({quantile(gap[False], 0.9):.4f}) | {within[True]}/{len(gap[True])} / "
                f"{within[False]}/{len(gap[False])} | {statistics.mean(diff):+.4f} "
                f"({quantile(diff, 0.1):+.4f}) | {sum(d < -0.005 for d in diff)}/{len(diff)} |",
                flush=True,
            )
        print(f"<!-- T={horizon}: {time.perf_counter() - tic:.0f} s -->")


if __name__ == "__main__":
    main()
