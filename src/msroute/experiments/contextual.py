"""The contextual experiment: Algorithm 2 against the context-free OMD (Section 5.2).

The paper states the contextual extension and its guarantee (Corollary 2) but runs no
experiment with it; this one is msroute's. Each round brings a case type (the context), drawn
uniformly at random; case type ``x`` is scored on its own task groups only — its reward is the
sum-max over those dimensions (by default N = 6 groups of TREC tasks, 3 case types of 2
groups each). The constraints (a Table 1 level) hold on the aggregate over all case types.

Both policies face the same skills and contexts. We report their time-averaged reward,
feasibility, and their regret (eq. 4 with the expected reward of the policy played) against
``OPT^ctx`` of Corollary 2 — the best fixed feasible policy *per context*, with the floor
``gamma`` — and against the best single fixed feasible policy ``OPT``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from msroute.core.oracle import best_fixed_policy_for, contextual_opt
from msroute.core.reward import context_scaled
from msroute.errors import InvalidValueError
from msroute.experiments.backends import Backend
from msroute.experiments.cells import CellResult, CellSpec, build_batch, params_items, policy_seeds
from msroute.experiments.config import ExperimentConfig, check_levels
from msroute.experiments.output import Progress, Summary, preload_plotting, publish
from msroute.experiments.protocol import CONTEXT_STREAM, stream
from msroute.experiments.schedule import run_cells
from msroute.metrics import feasible, time_averaged, true_regret
from msroute.policies.costs import check_cost_estimate
from msroute.policies.omd import OMDApproachability
from msroute.policies.omd_contextual import ContextualOMD
from msroute.simulate import simulate

__all__ = ["ContextualConfig", "contextual_worker", "run_contextual"]

QUICK: dict[str, Any] = {"seeds": 2, "horizon": 1000}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContextualConfig(ExperimentConfig):
    """Settings of the contextual experiment.

    Attributes
    ----------
    seeds : int
        10 by default.
    n_dims : int
        N, the number of task groups (6).
    case_types : tuple of tuple of int
        The task groups each case type is scored on (``((0, 1), (2, 3), (4, 5))``).
    level : str
        The Table 1 level of the shared constraints ("tight").
    eta_mult, batch : float, int
        The context-free OMD's settings (0.05, 10, as in Figure 2).
    ctx_eta_schedule : str
        "anytime" (Corollary 2's ``a sqrt(n_x)``) or "fixed".
    ctx_eta_mult, ctx_batch : float, int
        Algorithm 2's multiplier of ``a`` and its batch.
    split : str
        How tasks are grouped: "round-robin" (the paper's; every group is a uniform sample, so
        the case types are alike) or "contiguous" (blocks of sorted task ids, which keep a
        topic's tasks together and make the case types differ more).
    """

    seeds: int = 10
    n_dims: int = 6
    case_types: tuple[tuple[int, ...], ...] = ((0, 1), (2, 3), (4, 5))
    level: str = "tight"
    eta_mult: float = 0.05
    batch: int = 10
    ctx_eta_schedule: str = "anytime"
    ctx_eta_mult: float = 0.1
    ctx_batch: int = 10
    split: str = "round-robin"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_levels((self.level,))
        object.__setattr__(
            self, "case_types", tuple(tuple(int(g) for g in ct) for ct in self.case_types)
        )
        groups = [g for ct in self.case_types for g in ct]
        if not self.case_types or not all(self.case_types):
            raise InvalidValueError("case_types must list at least one task group per case type")
        if min(groups) < 0 or max(groups) >= self.n_dims:
            raise InvalidValueError(f"case_types name task groups outside [0, {self.n_dims - 1}]")

    def weights(self) -> np.ndarray:
        """Context weights (X, N): 1 on a case type's own task groups."""
        w = np.zeros((len(self.case_types), self.n_dims))
        for x, groups in enumerate(self.case_types):
            w[x, list(groups)] = 1.0
        return w


def contextual_worker(spec: CellSpec) -> CellResult:
    """Run both policies on every seed and compute rewards, feasibility and regrets."""
    tic = time.perf_counter()
    params = dict(spec.policy_params)
    weights = np.asarray(params.pop("weights"), dtype=np.float64)
    n_ctx = weights.shape[0]
    cell = build_batch(spec)
    batch = cell.batch
    contexts = np.stack(
        [
            np.random.default_rng(stream(s, CONTEXT_STREAM)).integers(0, n_ctx, spec.horizon)
            for s in spec.seeds
        ],
        axis=1,
    )
    ctx_pol = ContextualOMD(
        batch,
        horizon=spec.horizon,
        seed=policy_seeds(spec, "omd-contextual"),
        n_contexts=n_ctx,
        eta_mult=params["ctx_eta_mult"],
        batch=params["ctx_batch"],
        eta_schedule=params["ctx_eta_schedule"],
        cost_estimate=check_cost_estimate(spec.cost_count),
    )
    flat_pol = OMDApproachability(
        batch,
        horizon=spec.horizon,
        seed=policy_seeds(spec, "omd"),
        eta_mult=params["eta_mult"],
        batch=params["batch"],
        cost_estimate=check_cost_estimate(spec.cost_count),
        variant="paper",  # Algorithm 2 against Algorithm 1, both as printed
    )
    trajs = simulate(
        {"omd-contextual": ctx_pol, "omd": flat_pol},
        cell.env,
        batch,
        spec.horizon,
        run_map=cell.run_map,
        contexts=contexts,
        context_weights=weights,
        cost_count=spec.cost_count,
        track_expected=True,
    )
    skills = cell.replay().skills(0, spec.horizon)
    gamma = ctx_pol.gamma
    opt_ctx = np.empty(batch.n_runs)
    opt_flat = np.empty(batch.n_runs)
    gaps = np.empty(batch.n_runs)
    for r, problem in enumerate(batch.problems):
        ctx_res = contextual_opt(skills[:, r], contexts[:, r], weights, problem, floor=gamma)
        scored = context_scaled(skills[:, r], weights, contexts[:, r])
        flat_res = best_fixed_policy_for(problem, scored, floor=gamma)
        opt_ctx[r], opt_flat[r] = ctx_res.value, flat_res.value
        gaps[r] = max(ctx_res.gap, flat_res.gap)
    result: CellResult = {"opt_ctx": opt_ctx, "opt_flat": opt_flat, "opt_gap": gaps}
    for name, traj in trajs.items():
        assert traj.expected_rewards is not None
        key = name.replace("-", "_")
        result[f"{key}_avg_reward"] = time_averaged(traj.rewards)
        result[f"{key}_expected"] = time_averaged(traj.expected_rewards)
        result[f"{key}_feasible"] = feasible(
            time_averaged(traj.costs), batch.lo_ori, batch.hi_ori, tol=1e-9
        )
        result[f"{key}_regret_ctx"] = true_regret(
            opt_ctx, traj.expected_rewards, at=[spec.horizon]
        )[0]
        result[f"{key}_regret_flat"] = true_regret(
            opt_flat, traj.expected_rewards, at=[spec.horizon]
        )[0]
    result["wall_time"] = np.array(time.perf_counter() - tic)
    return result


def run_contextual(
    cfg: ContextualConfig,
    out: Path,
    *,
    jobs: int = 1,
    backend: Backend | None = None,
    progress: Progress | None = None,
    plot: bool = True,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Run the contextual experiment; write ``contextual.csv/.json/.png/.svg``."""
    tic = time.perf_counter()
    progress = progress or Progress(enabled=not quiet)
    weights = cfg.weights()
    spec = CellSpec(
        experiment="contextual",
        env="stochastic",
        policy="omd-contextual",
        levels=(cfg.level,),
        seeds=cfg.seed_list,
        horizon=cfg.horizon,
        n_experts=cfg.n_experts,
        m_draws=cfg.m_draws,
        n_dims=cfg.n_dims,
        env_params=params_items({"kappa": cfg.kappa}),
        cost_count=cfg.cost_count,
        split=cfg.split,
        dataset=cfg.dataset,
        policy_params=params_items(
            {
                "weights": tuple(map(tuple, weights.tolist())),
                "eta_mult": cfg.eta_mult,
                "batch": cfg.batch,
                "ctx_eta_schedule": cfg.ctx_eta_schedule,
                "ctx_eta_mult": cfg.ctx_eta_mult,
                "ctx_batch": cfg.ctx_batch,
            }
        ),
    )
    # Each seed is its own cell, so the oracles of different seeds run in parallel.
    specs = [dataclasses.replace(spec, seeds=(s,)) for s in cfg.seed_list]
    results = run_cells(
        specs,
        contextual_worker,
        out,
        jobs=jobs,
        backend=backend,
        progress=progress,
        title="contextual: seeds",
        when_free=preload_plotting if plot else None,
    )
    rows: list[dict[str, Any]] = []
    for s, res in zip(specs, results, strict=True):
        for name in ("omd-contextual", "omd"):
            key = name.replace("-", "_")
            rows.append(
                {
                    "policy": name,
                    "seed": s.seeds[0],
                    "avg_reward": float(res[f"{key}_avg_reward"][0]),
                    "expected_reward": float(res[f"{key}_expected"][0]),
                    "feasible": bool(res[f"{key}_feasible"][0]),
                    "opt": float(res["opt_ctx"][0]),
                    "opt_flat": float(res["opt_flat"][0]),
                    "regret": float(res[f"{key}_regret_ctx"][0]),
                    "regret_flat": float(res[f"{key}_regret_flat"][0]),
                }
            )
    summary = Summary(
        "Contextual: Algorithm 2 vs context-free OMD (means over seeds)",
        (
            "policy",
            "reward",
            "OPT ctx",
            "OPT flat",
            "regret vs OPT ctx",
            "regret vs OPT flat",
            "% feasible",
        ),
    )
    for name in ("omd-contextual", "omd"):
        grp = [r for r in rows if r["policy"] == name]
        means = (
            float(np.mean([g[k] for g in grp]))
            for k in ("avg_reward", "opt", "opt_flat", "regret", "regret_flat")
        )
        summary.rows.append((name, *means, 100.0 * float(np.mean([g["feasible"] for g in grp]))))
    publish(
        out,
        "contextual",
        rows,
        config=cfg,
        seeds=cfg.seed_list,
        started=tic,
        summary=summary,
        extra={"max_opt_gap": max(float(r["opt_gap"].max()) for r in results)},
        plot=plot,
        quiet=quiet,
        jobs=jobs,
    )
    return rows
