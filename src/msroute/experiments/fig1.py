"""Figure 1: objective and constraint regret against the OMD update step (Section 6.2).

OMD-Approachability alone, N in {3, 5}, levels tight/medium/loose, K = 50, M = 5,
T = 10,000, B = 10, 5 seeds, stochastic environment, ``eta_mult = 0.03``. At every batch end
``t = n B``:

* ``r1``: the paper's proxy ``R1(n) = (1/t) sum_{s<=t} (E_{A~q_T}[r(A, V_s)] - r_s)`` with the
  final policy ``q_T`` standing in for the optimum, computed *exactly* (the paper uses 200
  Monte Carlo draws; ``r1_method = "monte_carlo"`` reproduces that);
* ``r2``: ``R2(n)``, the distance of the running-average realized cost to ``S_ori`` (eq. 5);
* ``r1_true`` (with ``opt = true``): the true objective regret of eq. (4),
  ``OPT - (1/t) sum_{s<=t} Phi_s(q_s)`` against the certified best fixed feasible policy of the
  whole recorded sequence (``msroute.core.oracle``) — what the paper's proxy stands in for.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from msroute.core.oracle import best_fixed_policy_for
from msroute.errors import InvalidValueError
from msroute.experiments.backends import Backend
from msroute.experiments.cells import CellResult, CellSpec, build_batch, params_items, policy_seeds
from msroute.experiments.config import ExperimentConfig, check_levels
from msroute.experiments.output import Progress, Summary, preload_plotting, publish
from msroute.experiments.schedule import run_cells
from msroute.metrics import (
    constraint_regret,
    feasible,
    objective_regret_proxy,
    time_averaged,
    true_regret,
)
from msroute.policies.costs import check_cost_estimate
from msroute.policies.omd import OMDApproachability
from msroute.simulate import simulate

__all__ = ["Fig1Config", "fig1_worker", "run_fig1"]

#: ``--quick`` for Figure 1 (fewer seeds and rounds, both N).
QUICK: dict[str, Any] = {"seeds": 2, "horizon": 1000}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fig1Config(ExperimentConfig):
    """Settings of Figure 1 (the paper's by default).

    Attributes
    ----------
    dims : tuple of int
        The values of N (3 and 5).
    levels : tuple of str
        tight, medium, loose.
    eta_mult : float
        0.03 in Section 6.2.
    batch : int
        B = 10.
    r1_method : str
        "exact" (default) or "monte_carlo" (the paper's 200-draw estimate).
    mc_samples : int
        Draws of the Monte Carlo estimate (200).
    opt : bool
        Also compute the true regret against the certified OPT of each run.
    """

    seeds: int = 5
    dims: tuple[int, ...] = (3, 5)
    levels: tuple[str, ...] = ("tight", "medium", "loose")
    eta_mult: float = 0.03
    batch: int = 10
    r1_method: str = "exact"
    mc_samples: int = 200
    opt: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_levels(self.levels)
        if not self.dims or any(int(n) < 1 for n in self.dims):
            raise InvalidValueError(f"dims == {self.dims}, must be positive integers")
        if self.r1_method not in ("exact", "monte_carlo"):
            raise InvalidValueError(
                f"r1_method == {self.r1_method!r}, must be 'exact' or 'monte_carlo'"
            )
        if self.batch < 1 or self.horizon < self.batch:
            raise InvalidValueError(
                f"batch == {self.batch}, must be in [1, horizon = {self.horizon}]"
            )


def fig1_worker(spec: CellSpec) -> CellResult:
    """Run OMD on one N (all levels and seeds at once) and compute the regret curves."""
    tic = time.perf_counter()
    params = dict(spec.policy_params)
    batch_size = int(params["batch"])
    r1_method = str(params.pop("r1_method"))
    mc_samples = int(params.pop("mc_samples"))
    with_opt = bool(params.pop("opt"))
    cell = build_batch(spec)
    batch = cell.batch
    # Figure 1 is about Algorithm 1 as printed: its regret, its step.
    policy = OMDApproachability(
        batch,
        horizon=spec.horizon,
        seed=policy_seeds(spec),
        cost_estimate=check_cost_estimate(spec.cost_count),  # how realized costs are counted
        variant="paper",
        **params,
    )
    traj = simulate(
        {"omd": policy},
        cell.env,
        batch,
        spec.horizon,
        run_map=cell.run_map,
        cost_count=spec.cost_count,
        track_expected=with_opt,
    )["omd"]
    replay = cell.replay()
    at = np.arange(batch_size, spec.horizon + 1, batch_size)
    assert traj.final_q is not None
    result: CellResult = {
        "rounds": at,
        "r2": constraint_regret(traj.costs, batch.lo_ori, batch.hi_ori, at=at),
        "r1": objective_regret_proxy(
            traj.rewards,
            traj.final_q,
            replay.skills,
            spec.m_draws,
            at=at,
            method=r1_method,
            n_samples=mc_samples,
            seed=np.random.SeedSequence(list(spec.seeds), spawn_key=(9,)),
        ),
        "avg_reward": time_averaged(traj.rewards),
        "feasible": feasible(time_averaged(traj.costs), batch.lo_ori, batch.hi_ori, tol=1e-9),
    }
    if with_opt:
        assert traj.expected_rewards is not None
        skills = replay.skills(0, spec.horizon)
        opts = [best_fixed_policy_for(p, skills[:, r]) for r, p in enumerate(batch.problems)]
        opt = np.array([o.value for o in opts])
        result["opt"] = opt
        result["opt_gap"] = np.array([o.gap for o in opts])
        result["r1_true"] = true_regret(opt, traj.expected_rewards, at=at)
    result["wall_time"] = np.array(time.perf_counter() - tic)
    return result


def run_fig1(
    cfg: Fig1Config,
    out: Path,
    *,
    jobs: int = 1,
    backend: Backend | None = None,
    progress: Progress | None = None,
    plot: bool = True,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Run Figure 1 and write ``fig1.csv``, ``fig1.json``, ``fig1.png`` and ``fig1.svg``.

    The CSV has one row per N, level, seed and OMD step n.
    """
    tic = time.perf_counter()
    progress = progress or Progress(enabled=not quiet)
    policy_params = params_items(
        {
            "eta_mult": cfg.eta_mult,
            "batch": cfg.batch,
            "r1_method": cfg.r1_method,
            "mc_samples": cfg.mc_samples,
            "opt": cfg.opt,
        }
    )
    specs = [
        CellSpec(
            experiment="fig1",
            env="stochastic",
            policy="omd",
            levels=cfg.levels,
            seeds=cfg.seed_list,
            horizon=cfg.horizon,
            n_experts=cfg.n_experts,
            m_draws=cfg.m_draws,
            n_dims=int(n),
            env_params=params_items({"kappa": cfg.kappa}),
            policy_params=policy_params,
            cost_count=cfg.cost_count,
            dataset=cfg.dataset,
        )
        for n in cfg.dims
    ]
    results = run_cells(
        specs,
        fig1_worker,
        out,
        jobs=jobs,
        backend=backend,
        progress=progress,
        title="fig1",
        when_free=preload_plotting if plot else None,
    )
    rows: list[dict[str, Any]] = []
    summary = Summary(
        "Figure 1: regret of OMD-Approachability at the last step (mean over seeds)",
        ("N", "level", "R1 proxy", "R1 true", "R2", "R2 = 0 from step", "% feasible"),
    )
    n_seeds = len(cfg.seed_list)
    for spec, res in zip(specs, results, strict=True):
        steps = res["rounds"] // cfg.batch
        for li, level in enumerate(spec.levels):
            for si, seed in enumerate(spec.seeds):
                r = li * n_seeds + si
                for i, n in enumerate(steps):
                    row: dict[str, Any] = {
                        "n_dims": spec.n_dims,
                        "level": level,
                        "seed": seed,
                        "step": int(n),
                        "round": int(res["rounds"][i]),
                        "r1": float(res["r1"][i, r]),
                        "r2": float(res["r2"][i, r]),
                    }
                    if "r1_true" in res:
                        row["r1_true"] = float(res["r1_true"][i, r])
                    rows.append(row)
            runs = slice(li * n_seeds, (li + 1) * n_seeds)
            first_zero = _first_step_zero(res["r2"][:, runs], steps)
            summary.rows.append(
                (
                    f"N={spec.n_dims}",
                    level,
                    float(res["r1"][-1, runs].mean()),
                    float(res["r1_true"][-1, runs].mean()) if "r1_true" in res else float("nan"),
                    float(res["r2"][-1, runs].mean()),
                    first_zero,
                    100.0 * float(res["feasible"][runs].mean()),
                )
            )
    max_gap = max(float(r["opt_gap"].max()) for r in results) if cfg.opt else None
    publish(
        out,
        "fig1",
        rows,
        config=cfg,
        seeds=cfg.seed_list,
        started=tic,
        summary=summary,
        extra={"max_opt_gap": max_gap},
        plot=plot,
        quiet=quiet,
        jobs=jobs,
    )
    return rows


def _first_step_zero(r2: np.ndarray, steps: np.ndarray) -> int | str:
    """The first step from which the seed-mean R2 stays exactly 0 (or "never")."""
    mean = r2.mean(axis=1)
    nonzero = np.flatnonzero(mean > 0)
    if nonzero.size == 0:
        return int(steps[0])
    if nonzero[-1] == mean.size - 1:
        return "never"
    return int(steps[nonzero[-1] + 1])
