"""Contexts from text: what a context model's clusters are worth before any learning.

Per seed the packaged LLMRouter table is split by prompt in halves as ``msroute bench llmrouter
--warm-split 0.5`` splits it; a context model is fitted on the eval half's prompts and scores
(``msroute.prompts.fit_context_model``), the eval half's OPT^ctx routing in its clusters (no
floor) is played fixed on every prompt of the streamed half, and its mean reward is compared
with the streamed half's per-task OPT^ctx (the bench's comparator). This is the *prior alone*
of ``bench_warm_start.py``, taken over all the streamed prompts instead of a drawn stream of T:
exact, and fast enough to compare fits. Reported per variant: the gap at each packaged budget
(mean over the seeds), the spend / budget and the numbers of clusters.

A variant is ``task``, ``words`` or ``scores`` (``by``; the eval half's prompts in the contexts
a warm start gives them, ``ContextModel.eval_contexts``), optionally with ``:k=N`` (a fixed
number of clusters instead of the criterion's), ``:dims=N`` (``SCORE_DIMS``), ``:ridge=X``
(``RIDGE``) or ``:strength=X`` (the task model's ``STRENGTH``), e.g. ``scores:k=16:dims=64``; a
module constant is changed in this process only; ``:prior=assigned`` takes the eval half's
prompts in the contexts the model assigns them (by task, their own task: fitted on them, it
knows them) and ``:prior=hindsight`` the streamed half's own best routing in the model's
contexts instead of the eval half's. ``labels`` plays the eval half's per-task routing on the
streamed prompts' own tasks (the task column, which a text router does not see).

Usage: ``python benchmarks/bench_context_models.py [--seeds 5] [VARIANT ...]``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from msroute.datasets.outcomes import OutcomeTable, load_llmrouter
from msroute.experiments.outcome_runs import _split
from msroute.experiments.outcomes import LLMROUTER_BUDGETS, _problems
from msroute.oracle import contextual_opt
from msroute.prompts import model as context_models
from msroute.prompts import tasks as task_models

_SETTINGS = {
    "dims": (context_models, "SCORE_DIMS"),
    "ridge": (context_models, "RIDGE"),
    "strength": (task_models, "STRENGTH"),
}


def opt_routing(table: OutcomeTable, labels: np.ndarray, k: int, budget: float) -> np.ndarray:
    """The table's OPT^ctx routing (k, K) in the contexts ``labels``, no floor."""
    problem = _problems(table, 1, [budget], 1, 0)[0]
    res = contextual_opt(
        table.scores, labels, np.ones((k, 1)), problem, floor=0.0, round_costs=table.costs
    )
    return np.asarray(res.q)


def played(q: np.ndarray, labels: np.ndarray, table: OutcomeTable) -> tuple[float, float]:
    """Mean reward and cost of routing ``q`` played on every prompt of ``table``."""
    p = q[labels]
    return float((p * table.scores[:, 0]).sum(1).mean()), float(
        (p * table.costs[:, :, 0]).sum(1).mean()
    )


def contexts(
    variant: str, warm: OutcomeTable, stream: OutcomeTable, seed: int
) -> tuple[OutcomeTable, np.ndarray, np.ndarray, int]:
    """The table whose OPT^ctx routing is played (the eval half, or the streamed one in
    hindsight), its contexts and the streamed half's of ``variant``, and their number."""
    if variant == "labels":
        return warm, warm.category, stream.category, warm.n_contexts
    by, *options = variant.split(":")
    k, prior = None, "held-out"
    saved = {key: getattr(*where) for key, where in _SETTINGS.items()}
    try:
        for opt in options:
            key, value = opt.split("=", 1)
            if key == "k":
                k = int(value)
            elif key == "prior":
                prior = value
            else:
                setattr(*_SETTINGS[key], type(saved[key])(value))
        model = context_models.fit_context_model(
            warm.prompt_counts(),
            warm.scores.sum(axis=1),
            k=k,
            by=by,
            labels=warm.category_labels(),
            seed=seed,
        )
    finally:
        for key, value in saved.items():
            setattr(*_SETTINGS[key], value)
    s = model.assign_matrix(stream.prompt_counts())
    if prior == "hindsight":
        return stream, s, s, model.k
    if prior == "assigned":
        return warm, model.assign_matrix(warm.prompt_counts()), s, model.k
    return warm, model.eval_contexts(warm.prompt_counts()), s, model.k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("variants", nargs="*", default=["labels", "task", "scores", "words"])
    args = parser.parse_args()
    budgets = [float(b) for b in LLMROUTER_BUDGETS]
    full = load_llmrouter()
    halves = [_split(full, 0.5, seed) for seed in range(args.seeds)]
    best = [
        [played(opt_routing(s, s.category, s.n_contexts, b), s.category, s)[0] for b in budgets]
        for _, s in halves
    ]
    print(f"| variant | gap at {' / '.join(LLMROUTER_BUDGETS)} | spend / budget | k | s |")
    print("|---|---:|---:|---:|---:|")
    for variant in args.variants:
        tic = time.perf_counter()
        gaps, spends, ks = [], [], []
        for seed, (warm, stream) in enumerate(halves):
            fit_on, w, s, k = contexts(variant, warm, stream, seed)
            ks.append(k)
            runs = [played(opt_routing(fit_on, w, k, b), s, stream) for b in budgets]
            gaps.append([best[seed][i] - r for i, (r, _) in enumerate(runs)])
            spends.append([c / b for (_, c), b in zip(runs, budgets, strict=True)])
        gap, spend = np.mean(gaps, axis=0), np.mean(spends, axis=0)
        print(
            f"| {variant} | {' / '.join(f'{g:.3f}' for g in gap)} | "
            f"{' / '.join(f'{x:.2f}' for x in spend)} | {min(ks)}-{max(ks)} | "
            f"{time.perf_counter() - tic:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
