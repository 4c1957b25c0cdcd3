"""Warm start and contexts from text on the packaged LLM table: the tables of docs/llm-routing.md.

Every run splits the table by prompt per seed (``--warm-split 0.5``: the router may learn from
one half, it streams the other) and plays the live router's configuration (OMD at
``msroute.policies.live`` defaults, paced), M = 1, at the packaged budgets, 5 seeds. Per
(contexts, start): the mean reward, the worst spend / budget and the runs within budget, and
the gap to the streamed half's per-category OPT^ctx (the comparator of every row, whatever the
router sees). The starts:

* ``cold``: the router starts from nothing (the eval half unused);
* ``warm``: it starts from the eval half (``msroute.warmstart``, default strength);
* ``inverted``: from the eval half with every score ``s`` replaced by ``1 - s`` (a wrong prior).

The contexts: ``category`` (the task), ``text`` (clusters of a context model fitted on the eval
half's prompts, ``msroute.prompts``; cold, it clusters the eval half all the same and only
leaves its scores unused), ``none``.

Usage: ``python benchmarks/bench_warm_start.py [--horizons 2000 20000] [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from msroute.experiments.outcome_runs import RunTables
from msroute.experiments.outcomes import OutcomeBenchConfig, run_outcome_bench
from msroute.policies.live import DEFAULT_OMD_PARAMS

CASES = (
    ("category", "cold"),
    ("category", "warm"),
    ("category", "inverted"),
    ("text", "cold"),
    ("text", "warm"),
    ("none", "cold"),
    ("none", "warm"),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Started(OutcomeBenchConfig):
    """The bench's configuration with the router started ``start``."""

    start: str = "warm"

    def tables(self, seed: int, contexts: str | None = None) -> RunTables:
        t = super().tables(seed, contexts)
        if self.start == "cold" or t.warm is None:
            return dataclasses.replace(t, warm=None)
        if self.start == "inverted":
            w = t.warm
            return dataclasses.replace(t, warm=dataclasses.replace(w, scores=1.0 - w.scores))
        return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--horizons", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    print(f"live OMD defaults: {DEFAULT_OMD_PARAMS}")
    print("| T | contexts | start | budget | reward | OPT^ctx | gap | spend/budget max | within |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for horizon in args.horizons:
        for contexts, start in CASES:
            cfg = Started(
                m_draws=(1,),
                policies=("omd",),
                horizon=horizon,
                warm_split=0.5,
                contexts=contexts,
                start=start,
            )
            tic = time.perf_counter()
            with tempfile.TemporaryDirectory() as out:
                rows = run_outcome_bench(cfg, Path(out), jobs=args.jobs, plot=False, quiet=True)
            for budget in sorted({r["budget"] for r in rows}, key=float):
                g = [r for r in rows if r["budget"] == budget]
                reward = statistics.mean(r["avg_reward"] for r in g)
                opt = statistics.mean(r["opt_reward"] for r in g)
                print(
                    f"| {horizon:,} | {contexts} | {start} | {budget} | {reward:.3f} | "
                    f"{opt:.3f} | {opt - reward:.3f} | {max(r['spend_ratio'] for r in g):.2f} | "
                    f"{sum(r['feasible'] for r in g)}/{len(g)} |",
                    flush=True,
                )
            print(f"<!-- {contexts} {start} T={horizon}: {time.perf_counter() - tic:.0f} s -->")


if __name__ == "__main__":
    main()
