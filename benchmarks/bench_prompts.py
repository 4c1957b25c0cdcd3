"""Contexts from text: what featurizing a prompt and assigning its context costs, in process.

A context model (``msroute.prompts``) is fitted on half of the LLMRouter prompts (their texts
from the public files of ``../shared/data/llmrouter``, PROVENANCE.md there; the package ships
no texts), k chosen from the table as a router does; then every prompt of the other half is
assigned one at a time (``ContextModel.context_of``: the hashed n-grams, then the cluster), each
timed with ``time.perf_counter_ns``. Reported: the fit's seconds, and per prompt p50, p99 and
the largest, over ``--rounds`` passes (the first pass warms up and is not counted); the target
is at most 1 ms per prompt at p99.

The model is fitted as a router fits it on a table with categories (by task: the prompts'
tasks predicted from the text, ``msroute.prompts.tasks``); ``--by scores`` or ``--by words``
measures the clusters instead (``msroute.prompts.model``).

Usage: ``python benchmarks/bench_prompts.py [--data DIR] [--rounds 3] [--by scores]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from msroute.datasets.outcomes import load_llmrouter
from msroute.prompts import feature_matrix, fit_context_model
from msroute.prompts.model import BY

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "llmrouter"


def texts(data: Path) -> list[str]:
    """The prompts' texts in the packaged table's order (train, then test)."""
    return [
        e["question"]
        for split in ("train", "test")
        for e in json.loads((data / f"{split}.json").read_text())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--by", choices=BY, default="task")
    args = parser.parse_args()
    if not (args.data / "train.json").is_file():
        raise SystemExit(f"no LLMRouter files in {args.data} (see its PROVENANCE.md)")
    prompts = texts(args.data)
    table = load_llmrouter()
    order = np.random.default_rng(0).permutation(len(prompts))
    fit, rest = order[: len(order) // 2], order[len(order) // 2 :]
    tic = time.perf_counter()
    model = fit_context_model(
        feature_matrix([prompts[i] for i in fit]),
        table.scores[fit].sum(axis=1),
        labels=[table.categories[table.category[i]] for i in fit],
        seed=0,
        by=args.by,
    )
    fit_s = time.perf_counter() - tic
    ns: list[int] = []
    for r in range(args.rounds + 1):
        for i in rest:
            t0 = time.perf_counter_ns()
            model.context_of(prompts[i])
            if r:
                ns.append(time.perf_counter_ns() - t0)
    ms = np.array(ns) / 1e6
    chars = np.array([len(prompts[i]) for i in rest])
    chosen = f" (criterion {model.info['criterion']})" if "criterion" in model.info else ""
    print(
        f"fit on {fit.size} prompts by {args.by}: {fit_s:.2f} s, k = {model.k}{chosen}; model "
        f"{len(model.to_bytes()) / 1e6:.2f} MB"
    )
    print(
        f"featurize + assign, {ms.size} prompts ({rest.size} x {args.rounds}; {chars.mean():.0f} "
        f"characters on average, {chars.max()} at most): p50 {np.percentile(ms, 50):.3f} ms, "
        f"p99 {np.percentile(ms, 99):.3f} ms, max {ms.max():.3f} ms"
    )


if __name__ == "__main__":
    main()
