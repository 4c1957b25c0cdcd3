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

The contexts: ``category`` (the task), ``text`` (a context model fitted on the eval half's
prompts, ``msroute.prompts``: by default the eval half's task predicted from the text, the eval
prompts in their held-out contexts; cold, it is fitted on the eval half all the same and only
its scores are left unused), ``none``.

Beside each warm row, ``prior alone``: what the start is worth without learning, the eval half's
OPT^ctx routing in the router's contexts (no floor) played fixed on the same streamed prompts, and
its spend / budget (it is fitted to the eval half's costs, so it may end over the budget).

With ``--bounds``, beside it, ``full information``: what the stream could add to the prior at
most, at that horizon: the OPT^ctx routing of the eval half and the streamed prompts together,
every model's grade of every streamed prompt known (the router sees only the routed model's
answer), played fixed from the first query on the same streamed prompts; and ``population``:
what knowing the stream's distribution exactly is worth, the OPT^ctx routing of the whole
streamed part (the prompts the stream draws from) played fixed on the same streamed prompts. Its
gap to the row's OPT^ctx is what choosing in hindsight on the scored prompts adds to OPT^ctx:
no router that learns from the traffic can expect to come nearer.

To measure an alternative to the defaults (nothing is changed in the package): ``--strength N``
sets the warm start's strength, ``--no-margin`` starts it without the live budget margin (the
warm start before it: the optimum of the bounds themselves, the price gated by the dual;
``msroute.policies.warm``, "The margin"), ``--no-explored`` without its decaying floor counting
the table as explored (the warm start before it: the floor of the anchor's steps;
``msroute.policies.warm``, "The floor"), ``--omd KEY=VALUE`` overrides one of the live OMD
parameters (``msroute.policies.live.DEFAULT_OMD_PARAMS``, in this process and the workers it
forks), ``--cases category:warm ...`` runs only those (contexts, start) pairs, and ``--by
scores`` (or ``words``, ``task``) fits the text contexts' model that way instead of the
package's default for the eval half (``msroute.prompts.model``: by task, the table having
categories).

Usage: ``python benchmarks/bench_warm_start.py [--horizons 2000 20000] [--jobs 2] [--strength N]
[--no-margin] [--no-explored] [--omd eta_mult=0.01] [--cases category:warm] [--by scores]
[--bounds]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.metadata
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import msroute
from msroute.datasets.outcomes import OutcomeTable
from msroute.experiments.outcome_runs import RunTables
from msroute.experiments.outcomes import OutcomeBenchConfig, _problems, run_outcome_bench
from msroute.oracle import contextual_opt
from msroute.outcome_env import OutcomeEnv
from msroute.policies.live import DEFAULT_OMD_PARAMS
from msroute.prompts import model as context_models
from msroute.warmstart import DEFAULT_STRENGTH

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


def fixed_value(
    cfg: Started, budget: float, seed: int, fitted: OutcomeTable
) -> tuple[float, float]:
    """The mean reward and spend / budget of the OPT^ctx routing of table ``fitted`` (in the
    router's contexts, no floor) played fixed on seed ``seed``'s streamed prompts."""
    t = cfg.tables(seed)
    j = 0  # the packaged table's first cost, the budget's
    res = contextual_opt(
        fitted.scores,
        fitted.category,
        np.ones((fitted.n_contexts, fitted.n_dims)),
        _problems(fitted, 1, [budget], 1, j)[0],
        floor=0.0,
        round_costs=fitted.costs,
        tol=cfg.oracle_tol,
    )
    env = streamed(cfg, t, seed)
    q = res.q[env.contexts(0, cfg.horizon)[:, 0]]  # (T, K)
    reward = (q * env.skills(0, cfg.horizon)[:, 0].sum(axis=1)).sum(axis=1).mean()
    spend = (q * env.round_costs(0, cfg.horizon)[:, 0, :, j]).sum(axis=1).mean()
    return float(reward), float(spend) / budget


def streamed(cfg: Started, t: RunTables, seed: int) -> OutcomeEnv:
    """Seed ``seed``'s stream of the streamed part's prompts, as the bench draws it."""
    return OutcomeEnv(
        t.routed, horizon=cfg.horizon, n_runs=1, seed=np.random.SeedSequence(seed), mode=cfg.mode
    )


def prior_alone(cfg: Started, budget: float, seed: int) -> tuple[float, float]:
    """The eval part's OPT^ctx routing played fixed on the streamed prompts (``fixed_value``)."""
    warm = cfg.tables(seed).warm
    assert warm is not None
    return fixed_value(cfg, budget, seed, warm)


def full_information(cfg: Started, budget: float, seed: int) -> tuple[float, float]:
    """What a learner that had every model's grade of every streamed prompt (not only the
    routed model's answer) could play from the first query: the OPT^ctx routing of the eval
    part and the streamed prompts together, played fixed on the streamed prompts. A bound on
    what the bandit feedback of the stream can add to the prior, at that horizon."""
    t = cfg.tables(seed)
    warm = t.warm
    assert warm is not None
    rows = streamed(cfg, t, seed).prompts[: cfg.horizon, 0]
    both = dataclasses.replace(
        warm,
        scores=np.concatenate([warm.scores, t.routed.scores[rows]]),
        category=np.concatenate([warm.category, t.routed.category[rows]]),
        costs=np.concatenate([warm.costs, t.routed.costs[rows]]),
        prompt_ids=(*warm.prompt_ids, *(t.routed.prompt_ids[i] for i in rows)),
        prompts=None,
        features=None,
    )
    return fixed_value(cfg, budget, seed, both)


def population(cfg: Started, budget: float, seed: int) -> tuple[float, float]:
    """The OPT^ctx routing of the whole streamed part, the prompts the stream draws from, played
    fixed on seed ``seed``'s streamed prompts: the best fixed routing for the stream's
    distribution, known exactly (``fixed_value``)."""
    return fixed_value(cfg, budget, seed, cfg.tables(seed).routed)


def _mean_pair(pairs: list[tuple[float, float]]) -> str:
    """The mean reward and, in brackets, the mean spend / budget of ``pairs``."""
    return (
        f"{statistics.mean(a for a, _ in pairs):.3f} ({statistics.mean(b for _, b in pairs):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--horizons", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--strength", type=float, default=DEFAULT_STRENGTH)
    parser.add_argument("--no-margin", action="store_true")
    parser.add_argument("--no-explored", action="store_true")
    parser.add_argument("--omd", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--cases", nargs="+", default=[f"{c}:{s}" for c, s in CASES])
    parser.add_argument("--by", choices=("default", *context_models.BY), default="default")
    parser.add_argument("--bounds", action="store_true")
    args = parser.parse_args()
    if args.by != "default":
        context_models.fit_context_model = functools.partial(  # type: ignore[assignment]
            context_models.fit_context_model, by=args.by
        )
    cases = [tuple(c.split(":", 1)) for c in args.cases]
    for key, value in (kv.split("=", 1) for kv in args.omd):
        if key not in DEFAULT_OMD_PARAMS:
            parser.error(f"--omd {key}: not one of {', '.join(DEFAULT_OMD_PARAMS)}")
        kind = type(DEFAULT_OMD_PARAMS[key])
        DEFAULT_OMD_PARAMS[key] = kind(value)
    print(
        f"msroute {msroute.__version__}, numpy {importlib.metadata.version('numpy')}; live OMD "
        f"parameters {DEFAULT_OMD_PARAMS}, warm strength {args.strength:g}"
        f"{' without the margin' if args.no_margin else ''}"
        f"{' without the floor counting it as explored' if args.no_explored else ''}, text "
        f"contexts by {args.by}; seeds 0-4, M = 1, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(
        "| T | contexts | start | budget $/query | reward | OPT^ctx | gap | spend / budget (max) "
        "| within | prior alone (spend / budget) | contexts seen |"
        + (
            " full information (spend / budget) | population (spend / budget) |"
            if args.bounds
            else ""
        )
    )
    rule = "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    print(rule + ("---:|---:|" if args.bounds else ""))
    for horizon in args.horizons:
        for contexts, start in cases:
            cfg = Started(
                m_draws=(1,),
                policies=("omd",),
                horizon=horizon,
                warm_split=0.5,
                contexts=contexts,
                start=start,
                warm_strength=args.strength,
                warm_margin=not args.no_margin,
                warm_explored=not args.no_explored,
            )
            tic = time.perf_counter()
            with tempfile.TemporaryDirectory() as out:
                rows = run_outcome_bench(cfg, Path(out), jobs=args.jobs, plot=False, quiet=True)
            for budget in sorted({r["budget"] for r in rows}, key=float):
                g = [r for r in rows if r["budget"] == budget]
                reward = statistics.mean(r["avg_reward"] for r in g)
                opt = statistics.mean(r["opt_reward"] for r in g)
                ratio = [r["spend_ratio"] for r in g]
                prior = full = ""
                if start == "warm":
                    prior = _mean_pair([prior_alone(cfg, float(budget), r["seed"]) for r in g])
                if start == "warm" and args.bounds:
                    full = _mean_pair([full_information(cfg, float(budget), r["seed"]) for r in g])
                    known = _mean_pair([population(cfg, float(budget), r["seed"]) for r in g])
                    full = f" {full} | {known} |"
                ks = sorted({int(r["n_contexts"]) for r in g})
                print(
                    f"| {horizon:,} | {contexts} | {start} | {budget} | {reward:.3f} | "
                    f"{opt:.3f} | {opt - reward:.4f} | {statistics.mean(ratio):.2f} "
                    f"({max(ratio):.2f}) | {sum(r['feasible'] for r in g)}/{len(g)} | {prior} | "
                    f"{ks[0]}-{ks[-1]} |{full}",
                    flush=True,
                )
            print(f"<!-- {contexts} {start} T={horizon}: {time.perf_counter() - tic:.0f} s -->")


if __name__ == "__main__":
    main()
