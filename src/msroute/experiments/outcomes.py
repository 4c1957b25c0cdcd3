"""``msroute bench llmrouter`` and ``--outcomes FILE``: routing on recorded LLM outcomes.

Each run replays a recorded outcome table (``msroute.outcome_env.OutcomeEnv``): one prompt
per round, its category as the context, the team's reward the best member's recorded score, the
realized cost the recorded per-prompt cost of each distinct model called. For every team size
M, budget level and seed, every policy is run (all levels and seeds of a policy batched in one
run), and compared on the run's own prompt sequence with

* ``opt_reward``: ``OPT^ctx``, the certified best fixed policy per category under the budget on
  the aggregate time-averaged cost (``msroute.core.oracle.contextual_opt``, the comparator of
  Algorithm 2, whose dual is shared by the contexts);
* ``opt_flat_reward``: OPT, the best single fixed policy for all prompts (eq. (3));
* ``best_single``: the best single model whose mean cost on the run's prompts meets the budget
  (what a team that hard-codes one model gets), and ``uniform`` routing as a policy.

Both oracles hold the surrogate box of eq. (3) (``C^T q <= u / M``, exact at M = 1 and
conservative for larger teams, which pay each distinct model once).

A team's answer is its best member's by default (``team_answer="best"``, the paper's sum-max: an
oracle picker, an upper bound for a real team); ``"judge:P"`` and ``"random"`` score it as a judge
that picks the best member with probability P (``msroute.outcome_env``), for the policies and
the oracles alike.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from msroute.core.problem import Constraints, Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.datasets.outcomes import OutcomeTable, describe
from msroute.errors import InvalidValueError
from msroute.experiments.config import check_policies
from msroute.experiments.outcome_runs import (
    CONTEXT_SOURCES,
    LLMROUTER,
    RunTables,
    load_table,
    run_tables,
)
from msroute.experiments.output import Progress, Summary, preload_plotting, publish
from msroute.metrics import feasible
from msroute.outcome_env import OutcomeEnv, SampleMode, best_pick
from msroute.policies.live import live_kwargs
from msroute.policies.registry import make_policy
from msroute.scenarios.base import format_budget, parse_budget, parse_budgets
from msroute.warmstart import DEFAULT_STRENGTH, table_contexts, warm_start

__all__ = [
    "LLMROUTER",
    "OutcomeBenchConfig",
    "budget_levels",
    "default_budgets",
    "load_table",
    "run_outcome_bench",
]

#: Budgets of the packaged table, $ per query: cheap (above the small models' price, tight for a
#: team of two), middle, generous (the most accurate single model fits with room).
LLMROUTER_BUDGETS = ("0.00005", "0.0001", "0.0002")

_POLICIES = ("omd", "cbwk", "ts-bwk", "uniform")

#: Spawn key of the policies' streams, apart from the environment's.
_POLICY_KEY = 0x706F6C


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutcomeBenchConfig:
    """Settings of a sweep on a recorded outcome table.

    Attributes
    ----------
    table : str
        ``"llmrouter"`` (the packaged table) or the path of a CSV / JSON Lines outcome table.
    budget_cost : str
        The cost the budget bounds (default: the table's first cost).
    m_draws : tuple of int
        Team sizes M (M i.i.d. draws per query).
    budgets : tuple of str
        Budget levels in the cost's unit per query (empty: ``default_budgets``).
    policies : tuple of str
        Registered policies; a policy with an ``n_contexts`` parameter learns per category.
    seeds, first_seed, horizon : int
        Seeds ``first_seed, ...``; T queries per run.
    mode : {"replace", "permutation"}
        How prompts are drawn from the table.
    oracle_tol : float
        Certified gap asked of each OPT.
    team_answer : str
        How a team's answer is combined: ``"best"`` (sum-max), ``"judge:P"`` or ``"random"``
        (``msroute.outcome_env.best_pick``).
    warm_start : str or None
        An eval table (a path, or ``"llmrouter"``) the OMD policies start from
        (``msroute.warmstart``); the baselines start cold.
    warm_split : float or None
        Split the table by prompt per seed: warm on this fraction, stream the rest
        (``msroute.experiments.outcome_runs``).
    warm_strength : float
        The warm start's strength ``N``.
    warm_margin : bool
        Whether the warm start keeps the live budget margin (``msroute.warmstart.warm_start``).
    warm_explored : bool
        Whether its decaying floor counts the table as explored (the same function).
    contexts : {"category", "text", "none"}
        What the router sees of a prompt (the comparators stay per category).
    """

    table: str = LLMROUTER
    budget_cost: str | None = None
    m_draws: tuple[int, ...] = (1, 2)
    budgets: tuple[str, ...] = ()
    policies: tuple[str, ...] = _POLICIES
    seeds: int = 5
    first_seed: int = 0
    horizon: int = 20_000
    mode: SampleMode = "replace"
    oracle_tol: float = 1e-6
    team_answer: str = "best"
    warm_start: str | None = None
    warm_split: float | None = None
    warm_strength: float = DEFAULT_STRENGTH
    warm_margin: bool = True
    warm_explored: bool = True
    contexts: str = "category"

    def __post_init__(self) -> None:
        best_pick(self.team_answer)
        if self.warm_start is not None and self.warm_split is not None:
            raise InvalidValueError("give a warm-start table or a warm split, not both")
        if self.warm_split is not None and not 0.0 < self.warm_split < 1.0:
            raise InvalidValueError(f"warm_split == {self.warm_split!r}, must be in (0, 1)")
        if not (math.isfinite(self.warm_strength) and self.warm_strength >= 0):
            raise InvalidValueError(
                f"warm_strength == {self.warm_strength!r}, must be a number >= 0"
            )
        if self.contexts not in CONTEXT_SOURCES:
            raise InvalidValueError(
                f"contexts == {self.contexts!r}, must be one of {', '.join(CONTEXT_SOURCES)}"
            )
        for name in ("seeds", "horizon"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidValueError(f"{name} == {value!r}, must be an integer >= 1")
        if not self.m_draws or any(
            not isinstance(m, int) or isinstance(m, bool) or m < 1 for m in self.m_draws
        ):
            raise InvalidValueError(f"m_draws == {self.m_draws!r}, must be integers >= 1")
        check_policies(self.policies)
        if None in parse_budgets(self.budgets):
            raise InvalidValueError("an outcome bench needs numeric budgets, not 'none'")
        if self.mode not in ("replace", "permutation"):
            raise InvalidValueError(f"mode == {self.mode!r}, must be 'replace' or 'permutation'")
        if not self.oracle_tol > 0:
            raise InvalidValueError(f"oracle_tol == {self.oracle_tol}, must be > 0")

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds of the sweep."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))

    @property
    def split(self) -> bool:
        """Whether every seed streams its own table (``warm_split``)."""
        return self.warm_split is not None

    def tables(self, seed: int, contexts: str | None = None) -> RunTables:
        """The tables of seed ``seed``'s runs (``contexts``: another source than the
        configured one)."""
        return run_tables(
            self.table,
            seed=seed,
            warm_start=self.warm_start,
            warm_split=self.warm_split,
            contexts=self.contexts if contexts is None else contexts,
        )


def budget_levels(cfg: OutcomeBenchConfig, table: OutcomeTable, cost: str) -> tuple[str, ...]:
    """The sweep's budgets: the configured ones, else the packaged table's own (known by the
    table's name, not its file's: a user's file may be called ``llmrouter.csv`` too), else
    ``default_budgets``."""
    if cfg.budgets:
        return cfg.budgets
    if cfg.table == LLMROUTER:
        return LLMROUTER_BUDGETS
    return default_budgets(table, cost, max(cfg.m_draws))


def default_budgets(table: OutcomeTable, cost: str, m_max: int = 1) -> tuple[str, ...]:
    """Three budgets per query from cheap to generous, for a user's table (the packaged one
    runs at ``LLMROUTER_BUDGETS``).

    The cheapest is 1.25 x what the largest team ``m_max`` needs under eq. (3)'s surrogate box
    with the default floor, ``M ((1 - K gamma) min_i c_i + gamma sum_i c_i)``, ``gamma =
    1/(10K)``; the most generous the larger of twice that and the mean cost of the most
    accurate model; the middle their geometric mean (3 significant digits, rounded up).
    """
    spend = table.mean_costs()[:, table.cost_index(cost)]
    reward = table.scores.sum(axis=1).mean(axis=0)
    k = table.n_experts
    gamma = 1.0 / (10 * k)
    lo = 1.25 * m_max * ((1.0 - k * gamma) * float(spend.min()) + gamma * float(spend.sum()))
    hi = max(float(spend[int(np.argmax(reward))]), 2.0 * lo)
    if lo <= 0.0:
        return (format_budget(0.0), format_budget(_round_up(hi / 2)), format_budget(_round_up(hi)))
    return tuple(format_budget(_round_up(float(v))) for v in np.geomspace(lo, hi, 3))


def _round_up(value: float) -> float:
    """``value`` rounded up to 3 significant digits."""
    scale = 10.0 ** (math.floor(math.log10(value)) - 2)
    return float(f"{math.ceil(value / scale - 1e-9) * scale:.3g}")


def _cell_seeds(cfg: OutcomeBenchConfig, si: int | None) -> tuple[int, ...]:
    """The seeds a cell runs: all of them batched, or seed index ``si`` alone."""
    return cfg.seed_list if si is None else (cfg.seed_list[si],)


def _problems(
    table: OutcomeTable, m: int, budgets: Sequence[float], n_seeds: int, j: int
) -> list[Problem]:
    """One problem per (budget, seed) run: the table's mean costs (the policies' prior; the
    realized costs are the prompts' own) and the budget on cost ``j``."""
    prior = table.mean_costs()
    out = []
    for b in budgets:
        upper: list[float | None] = [None] * len(table.cost_names)
        upper[j] = b
        cons = Constraints(upper=upper, names=table.cost_names)
        out.extend([Problem(prior, m, cons)] * n_seeds)
    return out


def _policy_cell(
    cfg: OutcomeBenchConfig, m: int, policy: str, budgets: list[float], j: int, si: int | None
) -> dict[str, Any]:
    """Every (budget, seed) run of one policy at team size ``m``, batched (seed index ``si``
    alone where each seed streams its own table)."""
    from msroute.policies.omd import OMDApproachability
    from msroute.simulate import simulate_summary

    tic = time.perf_counter()
    seeds = _cell_seeds(cfg, si)
    tables = cfg.tables(seeds[0])
    table = tables.routed
    n_seeds = len(seeds)
    env = OutcomeEnv(
        table,
        horizon=cfg.horizon,
        n_runs=n_seeds,
        seed=[np.random.SeedSequence(s) for s in seeds],
        mode=cfg.mode,
        team_answer=cfg.team_answer,
    )
    batch = ProblemBatch(_problems(table, m, budgets, n_seeds, j))
    run_map = np.tile(np.arange(n_seeds), len(budgets))
    # The live router's configuration (anytime OMD, paced): what the bench reports is what a
    # router gets; only the baselines' duals read the horizon.
    kwargs = live_kwargs(policy, m, table.n_contexts)
    streams = [np.random.SeedSequence([s, _POLICY_KEY]) for _ in budgets for s in seeds]
    pol = make_policy(policy, batch, horizon=cfg.horizon, seed=streams, **kwargs)
    warm = tables.warm
    if warm is not None and isinstance(pol, OMDApproachability):
        contexts = table_contexts(warm, table.categories)
        pick = best_pick(cfg.team_answer)
        warm_start(
            pol,
            warm,
            contexts,
            cfg.warm_strength,
            pick=pick,
            margin=cfg.warm_margin,
            explored=cfg.warm_explored,
        )
    run = simulate_summary({policy: pol}, env, batch, cfg.horizon, run_map=run_map)[policy]
    return {
        "seeds": list(seeds),
        "n_contexts": table.n_contexts,
        "avg_reward": run.avg_reward,
        "avg_cost": run.avg_cost,
        "feasible": feasible(run.avg_cost, batch.lo_ori, batch.hi_ori, tol=0.0),
        "seconds": time.perf_counter() - tic,
    }


def _opt_cell(cfg: OutcomeBenchConfig, m: int, budget: float, si: int, j: int) -> dict[str, Any]:
    """OPT^ctx, OPT and the best single model of one (M, budget, seed) run, on the prompts it
    streams in their categories."""
    from msroute.core.oracle import contextual_opt

    tic = time.perf_counter()
    seed = cfg.seed_list[si]
    table = cfg.tables(seed, "category").stream
    env = OutcomeEnv(
        table, horizon=cfg.horizon, n_runs=1, seed=np.random.SeedSequence(seed), mode=cfg.mode
    )
    skills = env.skills(0, cfg.horizon)[:, 0]
    contexts = env.contexts(0, cfg.horizon)[:, 0]
    paid = env.round_costs(0, cfg.horizon)[:, 0]
    problem = _problems(table, m, [budget], 1, j)[0]
    ones = np.ones((table.n_contexts, table.n_dims))
    pick = best_pick(cfg.team_answer)
    ctx = contextual_opt(
        skills,
        contexts,
        ones,
        problem,
        floor=0.0,
        round_costs=paid,
        tol=cfg.oracle_tol,
        pick=pick,
    )
    flat = contextual_opt(
        skills,
        np.zeros_like(contexts),
        ones[:1],
        problem,
        floor=0.0,
        round_costs=paid,
        tol=cfg.oracle_tol,
        pick=pick,
    )
    reward = skills.sum(axis=1).mean(axis=0)  # (K,): one model on every prompt of the run
    spend = paid[:, :, j].mean(axis=0)
    ok = spend <= budget
    best = int(np.flatnonzero(ok)[np.argmax(reward[ok])]) if np.any(ok) else -1
    return {
        "opt_reward": ctx.value,
        "opt_gap": max(ctx.gap, flat.gap),
        "opt_cost": float(ctx.cost[j]) * m,
        "opt_flat_reward": flat.value,
        "best_single": float(reward[best]) if best >= 0 else math.nan,
        "best_single_model": table.models[best] if best >= 0 else "",
        "best_single_cost": float(spend[best]) if best >= 0 else math.nan,
        "seconds": time.perf_counter() - tic,
    }


def _call(args: tuple[Any, ...]) -> dict[str, Any]:
    kind, *rest = args
    return _policy_cell(*rest) if kind == "policy" else _opt_cell(*rest)


def run_outcome_bench(
    cfg: OutcomeBenchConfig,
    out: Path,
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    plot: bool = True,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Run the sweep and write ``bench-<name>.csv``, ``.json``, ``.png`` and ``.svg``."""
    tic = time.perf_counter()
    progress = progress or Progress(enabled=not quiet)
    table = load_table(cfg.table)
    cost = cfg.budget_cost or table.cost_names[0]
    j = table.cost_index(cost)
    levels = budget_levels(cfg, table, cost)
    budgets = [float(parse_budget(v) or 0.0) for v in levels]
    name = LLMROUTER if cfg.table == LLMROUTER else Path(cfg.table).stem
    tasks: list[tuple[Any, ...]] = []
    cells: list[int | None] = list(range(cfg.seeds)) if cfg.split else [None]
    for m in cfg.m_draws:
        tasks += [("policy", cfg, m, p, budgets, j, si) for p in cfg.policies for si in cells]
        tasks += [("opt", cfg, m, b, si, j) for b in budgets for si in range(cfg.seeds)]
    # The longest cells first (OMD's, then the nonlinear oracles of teams), so that the last
    # cells to finish are short ones.
    tasks.sort(key=lambda t: (t[0] != "policy" or t[3] != "omd", t[0] != "opt" or t[2] == 1))
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    with progress.track(f"bench {name}", len(tasks)):
        if jobs > 1:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(_call, t): i for i, t in enumerate(tasks)}
                if plot:
                    preload_plotting()
                for fut in as_completed(futures):
                    i = futures[fut]
                    results[i] = fut.result()
                    progress.advance(_label(tasks[i]))
        else:
            for i, t in enumerate(tasks):
                results[i] = _call(t)
                progress.advance(_label(t))
    rows = _tidy(table, cfg, levels, budgets, cost, tasks, results)
    summary = Summary(
        f"{name}: reward and spend per query (budget on {cost}), mean over {cfg.seeds} seeds",
        (
            "M",
            "budget",
            "policy",
            "reward",
            f"avg {cost}",
            "% within",
            "OPT^ctx",
            "OPT",
            "best single",
        ),
        summarize(rows, cost),
    )
    publish(
        out,
        f"bench-{name}",
        rows,
        config=cfg,
        seeds=cfg.seed_list,
        started=tic,
        summary=summary,
        extra={
            "table": describe(table),
            "budget_cost": cost,
            "budgets": list(levels),
            "headline": headline(rows, cost),
            "cell_seconds": {
                _label(t): float(r["seconds"]) for t, r in zip(tasks, results, strict=True) if r
            },
        },
        plot=plot,
        quiet=quiet,
        figure="frontier",
        plot_options={"cost": cost},
    )
    if not quiet:
        print(headline(rows, cost))
    return rows


def _label(task: tuple[Any, ...]) -> str:
    if task[0] == "policy":
        cfg, si = task[1], task[6]
        return f"M={task[2]} {task[3]}" + ("" if si is None else f" seed {cfg.seed_list[si]}")
    return f"M={task[2]} OPT at {task[3]:g} seed {task[4]}"


def _tidy(
    table: OutcomeTable,
    cfg: OutcomeBenchConfig,
    levels: Sequence[str],
    budgets: Sequence[float],
    cost: str,
    tasks: Sequence[tuple[Any, ...]],
    results: Sequence[dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """One row per (M, budget, policy, seed) with the run's OPT^ctx, OPT and best single."""
    opt: dict[tuple[int, float, int], dict[str, Any]] = {}
    for t, r in zip(tasks, results, strict=True):
        if t[0] == "opt" and r is not None:
            opt[(t[2], t[3], t[4])] = r
    rows: list[dict[str, Any]] = []
    played = [(t, r) for t, r in zip(tasks, results, strict=True) if t[0] == "policy" and r]
    played.sort(key=lambda tr: (tr[0][2], cfg.policies.index(tr[0][3]), tr[1]["seeds"][0]))
    for t, r in played:
        m, policy, seeds = t[2], t[3], r["seeds"]
        for li, (level, b) in enumerate(zip(levels, budgets, strict=True)):
            for at, seed in enumerate(seeds):
                run = li * len(seeds) + at
                o = opt[(m, b, cfg.seed_list.index(seed))]
                row: dict[str, Any] = {
                    "table": LLMROUTER if cfg.table == LLMROUTER else cfg.table,
                    "m_draws": m,
                    "budget": level,
                    "team_answer": cfg.team_answer,
                    "contexts": cfg.contexts,
                    "n_contexts": r["n_contexts"],
                    "warm": _warm_label(cfg),
                    "policy": policy,
                    "seed": seed,
                    "avg_reward": float(r["avg_reward"][run]),
                    "opt_reward": o["opt_reward"],
                    "opt_gap": o["opt_gap"],
                    "opt_flat_reward": o["opt_flat_reward"],
                    "best_single": o["best_single"],
                    "best_single_model": o["best_single_model"],
                    "feasible": bool(r["feasible"][run]),
                }
                for c, cname in enumerate(table.cost_names):
                    row[f"avg_{cname}"] = float(r["avg_cost"][run, c])
                row["spend_ratio"] = row[f"avg_{cost}"] / b if b > 0 else math.nan
                rows.append(row)
    return rows


def _warm_label(cfg: OutcomeBenchConfig) -> str:
    """How the OMD policies started: ``cold``, ``split F`` or the eval table's name."""
    if cfg.warm_split is not None:
        return f"split {cfg.warm_split:g}"
    return "cold" if cfg.warm_start is None else Path(cfg.warm_start).name


def summarize(rows: Sequence[dict[str, Any]], cost: str) -> list[tuple[Any, ...]]:
    """Per (M, budget, policy): mean reward and spend, % of runs within the budget, mean
    OPT^ctx, OPT and best single model."""
    groups: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["m_draws"], row["budget"], row["policy"]), []).append(row)
    out = []
    for (m, budget, policy), grp in groups.items():
        out.append(
            (
                m,
                budget,
                policy,
                round(float(np.mean([g["avg_reward"] for g in grp])), 4),
                f"{np.mean([g[f'avg_{cost}'] for g in grp]):.3g}",
                f"{100.0 * float(np.mean([g['feasible'] for g in grp])):.0f}",
                round(float(np.mean([g["opt_reward"] for g in grp])), 4),
                round(float(np.mean([g["opt_flat_reward"] for g in grp])), 4),
                round(float(np.nanmean([g["best_single"] for g in grp])), 4),
            )
        )
    return out


def headline(rows: Sequence[dict[str, Any]], cost: str, policy: str = "omd") -> str:
    """One line a practitioner can quote, at the middle budget and M = 1 (or the smallest M):
    "at $X per query, msroute reaches Y% accuracy; the best single model within that budget
    reaches Z%"."""
    mine = [r for r in rows if r["policy"] == policy]
    if not mine:
        return ""
    m = min(r["m_draws"] for r in mine)
    levels = sorted({r["budget"] for r in mine}, key=float)
    level = levels[len(levels) // 2]
    sel = [r for r in mine if r["m_draws"] == m and r["budget"] == level]
    reward = 100.0 * float(np.mean([r["avg_reward"] for r in sel]))
    single = 100.0 * float(np.nanmean([r["best_single"] for r in sel]))
    ok = all(r["feasible"] for r in sel)
    unit = "$" if cost == "usd" else f"{cost} "
    return (
        f"at {unit}{float(level):g} per query (M = {m}), msroute ({policy}) reaches "
        f"{reward:.1f}% accuracy{'' if ok else ' (over budget in some runs)'}; the best single "
        f"model within that budget reaches {single:.1f}%"
    )
