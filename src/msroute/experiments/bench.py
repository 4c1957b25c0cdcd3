"""``msroute bench``: the reward-budget frontier of a scenario against the certified optimum.

For every budget level of a scenario (``msroute.scenarios``), from the cheapest feasible one
to unconstrained, every policy is run on every seed (one cached cell per policy, all levels and
seeds batched, as the paper's sweeps), and OPT -- the best fixed feasible routing policy in
hindsight of eq. (3), certified by ``msroute.core.oracle.best_fixed_policy_for`` on the run's own
skill sequence -- is computed per (level, seed) in one more cell. The headline is the regret to
that frontier, ``opt_reward - avg_reward``, of the feasible runs.

Eq. (3)'s class is fixed distributions q with M i.i.d. draws, under the surrogate box ``S``
(``C^T q <= u / M``). Policies that route M *distinct* experts (random, greedy, CUCB, TS, their
BwK variants) are outside that class and can earn more than OPT when M >= 2; OMD and uniform
routing are inside it, so in a stationary environment they cannot beat OPT beyond sampling error.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from msroute.errors import InvalidValueError
from msroute.experiments.cells import (
    CellResult,
    CellSpec,
    build_batch,
    params_items,
    scenario_instance,
)
from msroute.experiments.config import check_policies
from msroute.experiments.output import Progress, Summary, preload_plotting, publish
from msroute.experiments.schedule import run_cells
from msroute.experiments.sweep import policy_variants, sweep_worker
from msroute.policies.live import live_kwargs
from msroute.policies.registry import POLICIES
from msroute.scenarios import Scenario, ScenarioInstance, get_scenario, parse_budgets

__all__ = ["OPT_CELL", "BenchConfig", "bench_worker", "default_policies", "run_bench"]

#: The policy field of the oracle's cell (not a registered policy).
OPT_CELL = "opt"

#: The per-run arrays of an oracle cell (``oracle_worker``).
OPT_KEYS = ("opt_reward", "opt_gap", "opt_cost")

_CANDIDATES = ("uniform", "random", "greedy", "cucb", "cbwk", "ts", "ts-bwk", "moe", "omd")


def default_policies() -> tuple[str, ...]:
    """The paper's policies, and ``uniform`` routing where the registry has it."""
    return tuple(p for p in _CANDIDATES if p in POLICIES)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """Settings of one frontier sweep.

    Attributes
    ----------
    scenario : str
        A registered scenario, or ``"files"`` with ``scenario_params``.
    scenario_params : tuple of (str, value)
        Parameters of a ``"files"`` scenario (``msroute.scenarios.files_scenario``).
    policies : tuple of str
        Registered policies (default: ``default_policies``).
    budgets : tuple of str
        Budget levels (numbers in the scenario's budget unit, or ``"none"``); empty for the
        scenario's grid of ``n_budgets`` levels and ``"none"``.
    n_budgets : int
        Levels of the default grid (before ``"none"``).
    seeds, first_seed, horizon : int
        Seeds ``first_seed, first_seed + 1, ...``; T rounds per run.
    oracle_tol : float
        Certified gap asked of each OPT.
    """

    scenario: str = "trec-sharp"
    scenario_params: tuple[tuple[str, Any], ...] = ()
    policies: tuple[str, ...] = dataclasses.field(default_factory=default_policies)
    budgets: tuple[str, ...] = ()
    n_budgets: int = 5
    seeds: int = 5
    first_seed: int = 0
    horizon: int = 5000
    oracle_tol: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("seeds", "horizon", "n_budgets"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidValueError(f"{name} == {value!r}, must be an integer >= 1")
        check_policies(self.policies)
        parse_budgets(self.budgets)
        if not self.oracle_tol > 0:
            raise InvalidValueError(f"oracle_tol == {self.oracle_tol}, must be > 0")

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds of the sweep."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))


def oracle_worker(spec: CellSpec) -> CellResult:
    """OPT of eq. (3) for every (level, seed) run of a cell, on the run's own skills.

    Returns
    -------
    dict of arrays
        ``opt_reward`` (R,) the certified value (a lower bound on OPT), ``opt_gap`` (R,) its
        certificate (``OPT <= opt_reward + opt_gap``), ``opt_cost`` (R, d) the expected
        realized cost ``sum_i c_i (1 - (1 - q_i)^M)`` of the optimum, ``wall_time``.
    """
    from msroute.core.oracle import best_fixed_policy_for

    tic = time.perf_counter()
    cell = build_batch(spec)
    skills = cell.env.skills(0, spec.horizon)
    value, gap, cost = [], [], []
    for r, problem in enumerate(cell.batch.problems):
        res = best_fixed_policy_for(problem, skills[:, cell.run_map[r]], tol=spec_tol(spec))
        value.append(res.value)
        gap.append(res.gap)
        cost.append((1.0 - (1.0 - res.q) ** problem.m_draws) @ problem.costs)
    return {
        "opt_reward": np.array(value),
        "opt_gap": np.array(gap),
        "opt_cost": np.array(cost),
        "wall_time": np.array(time.perf_counter() - tic),
    }


def spec_tol(spec: CellSpec) -> float:
    """The oracle tolerance of an OPT cell (kept in its parameters, so it keys the cache)."""
    return float(dict(spec.policy_params).get("tol", 1e-6))


def bench_worker(spec: CellSpec) -> CellResult:
    """One cell of the bench: the oracle's (``spec.policy == OPT_CELL``) or a policy's."""
    return oracle_worker(spec) if spec.policy == OPT_CELL else sweep_worker(spec)


def bench_specs(
    cfg: BenchConfig, scenario: Scenario, levels: tuple[str, ...], n_experts: int, n_dims: int
) -> list[tuple[str, CellSpec]]:
    """(label, cell) of OPT and of every policy: all levels and seeds in each cell."""

    def spec(policy: str, params: dict[str, Any]) -> CellSpec:
        return CellSpec(
            experiment="bench",
            env="stochastic",
            policy=policy,
            levels=levels,
            seeds=cfg.seed_list,
            horizon=cfg.horizon,
            n_experts=n_experts,
            m_draws=scenario.m_draws,
            n_dims=n_dims,
            env_params=params_items({"kappa": scenario.kappa}),
            policy_params=params_items(params),
            scenario=cfg.scenario,
            scenario_params=cfg.scenario_params,
        )

    out = [(OPT_CELL, spec(OPT_CELL, {"tol": cfg.oracle_tol}))]
    for label, name, params in policy_variants(cfg.policies, n_dims):
        # The live router's configuration (anytime OMD, paced): the bench reports what a
        # router gets (msroute.policies.live).
        live = live_kwargs(name, scenario.m_draws, 1)
        out.append((label, spec(name, {**params, **live})))
    return out


def tidy_rows(
    scenario: Scenario,
    cost_names: Sequence[str],
    labelled: Sequence[tuple[str, CellSpec]],
    results: Sequence[CellResult],
) -> list[dict[str, Any]]:
    """One row per (budget, policy, seed), with OPT of the same (budget, seed)."""
    opt = results[0]
    rows = []
    for (label, spec), res in zip(labelled[1:], results[1:], strict=True):
        n_seeds = len(spec.seeds)
        for li, level in enumerate(spec.levels):
            for si, seed in enumerate(spec.seeds):
                r = li * n_seeds + si
                reward = float(res["avg_reward"][r])
                ok = bool(res["feasible"][r])
                row: dict[str, Any] = {
                    "scenario": scenario.name,
                    "budget": level,
                    "policy": label,
                    "seed": seed,
                    "n_dims": spec.n_dims,
                    "avg_reward": reward,
                    "opt_reward": float(opt["opt_reward"][r]),
                    "opt_gap": float(opt["opt_gap"][r]),
                    "regret": float(opt["opt_reward"][r]) - reward if ok else None,
                    "feasible": ok,
                    "feasible_1e3": bool(res["feasible_1e3"][r]),
                }
                for j, name in enumerate(cost_names):
                    row[f"avg_{name}"] = float(res["avg_cost"][r, j])
                for j, name in enumerate(cost_names):
                    row[f"opt_{name}"] = float(opt["opt_cost"][r, j])
                rows.append(row)
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Per (budget, policy): mean OPT, mean reward, mean regret of the feasible runs (also per
    reward dimension), % feasible."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["budget"], row["policy"]), []).append(row)
    out = []
    for (budget, policy), grp in groups.items():
        regrets = [g["regret"] for g in grp if g["regret"] is not None]
        regret = float(np.mean(regrets)) if regrets else None
        n_dims = grp[0]["n_dims"]
        out.append(
            (
                budget,
                policy,
                float(np.mean([g["opt_reward"] for g in grp])),
                float(np.mean([g["avg_reward"] for g in grp])),
                regret if regret is not None else "infeasible",
                regret / n_dims if regret is not None else "-",
                100.0 * float(np.mean([g["feasible"] for g in grp])),
            )
        )
    return out


def resolve_levels(
    cfg: BenchConfig, scenario: Scenario
) -> tuple[tuple[str, ...], ScenarioInstance]:
    """The budget levels of the sweep and the first seed's instance."""
    instances = [scenario_instance(cfg.scenario, cfg.scenario_params, s) for s in cfg.seed_list]
    levels = cfg.budgets or tuple(scenario.budget_grid(instances, cfg.n_budgets))
    return tuple(levels), instances[0]


def run_bench(
    cfg: BenchConfig,
    out: Path,
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    plot: bool = True,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Run the sweep and write ``bench-<scenario>.csv``, ``.json``, ``.png`` and ``.svg``."""
    tic = time.perf_counter()
    progress = progress or Progress(enabled=not quiet)
    scenario = get_scenario(cfg.scenario, cfg.scenario_params)
    levels, first = resolve_levels(cfg, scenario)
    labelled = bench_specs(cfg, scenario, levels, first.n_experts, first.n_dims)
    # OPT runs one cell per level (the slowest cells: in parallel, and cached one by one).
    opt_cells = [dataclasses.replace(labelled[0][1], levels=(lv,)) for lv in levels]
    done = run_cells(
        opt_cells + [s for _, s in labelled[1:]],
        bench_worker,
        out,
        jobs=jobs,
        progress=progress,
        title="bench",
        when_free=preload_plotting if plot else None,
    )
    opt = {k: np.concatenate([r[k] for r in done[: len(levels)]]) for k in OPT_KEYS}
    opt["wall_time"] = np.array(sum(float(r["wall_time"]) for r in done[: len(levels)]))
    results = [opt, *done[len(levels) :]]
    rows = tidy_rows(scenario, first.cost_names, labelled, results)
    summary = Summary(
        f"{scenario.title}: regret to the frontier (OPT - reward of the feasible runs)",
        ("budget", "policy", "OPT", "reward", "regret", "regret/dim", "% feasible"),
        summarize(rows),
    )
    publish(
        out,
        f"bench-{scenario.name}",
        rows,
        config=cfg,
        seeds=cfg.seed_list,
        started=tic,
        summary=summary,
        extra={
            "scenario": {
                "name": scenario.name,
                "title": scenario.title,
                "m_draws": scenario.m_draws,
                "budget_cost": scenario.budget_cost,
                "budget_unit": scenario.budget_unit,
                "kappa": scenario.kappa,
                "params": dict(scenario.params),
                "notes": scenario.notes,
            },
            "budgets": list(levels),
            "cell_seconds": {
                label: float(r["wall_time"])
                for (label, _), r in zip(labelled, results, strict=True)
            },
        },
        plot=plot,
        quiet=quiet,
        figure="bench",
    )
    return rows
