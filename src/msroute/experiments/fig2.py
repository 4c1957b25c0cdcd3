"""Figure 2: the constraint-tightness sweep (Section 6.3).

Eight policies x four levels (Table 1) x two environments x 20 seeds, N = 3, K = 50, M = 5,
T = 10,000: the mean +- std of the time-averaged reward and the percentage of seeds whose
time-averaged realized cost meets every bound. OMD runs as msroute's default variant ("model":
a fitted-model control variate and a decaying floor, ``msroute.policies.omd_variants``);
``omd_variants = ["model", "paper"]`` adds Algorithm 1 as printed (the paper's ``eta_mult =
0.05``), labelled ``omd[paper]``.

The constraint-aware baselines' dual can be read on the running-average violation (the text's
words, the default) or on the per-round violation; ``bwk_violations`` runs CBwK and TS-BwK
under each reading given (labelled ``cbwk[round]`` etc. for the non-default one).

Each policy runs both environments in one cell (``run_sweep``); the sidecar's
``cell_seconds`` gives the seconds of each policy's cell(s), both environments together.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from msroute.errors import InvalidValueError
from msroute.experiments.backends import Backend
from msroute.experiments.cells import CellResult, CellSpec, params_items
from msroute.experiments.config import (
    ExperimentConfig,
    check_envs,
    check_levels,
    check_names,
    check_policies,
)
from msroute.experiments.output import Progress, Summary, preload_plotting, publish
from msroute.experiments.protocol import ENV_JOIN
from msroute.experiments.schedule import run_cells
from msroute.experiments.sweep import (
    merge_seed_blocks,
    policy_variants,
    split_envs,
    sweep_worker,
)
from msroute.policies.lagrangian import VIOLATIONS
from msroute.policies.omd_variants import VARIANTS
from msroute.policies.registry import POLICIES

#: The reward axes of the figure (``msroute.plotting.plot_fig2``; matplotlib not imported).
REWARD_AXES = ("differences", "full")

__all__ = ["Fig2Config", "run_fig2", "sweep_specs"]

PAPER_POLICIES = ("random", "greedy", "cucb", "cbwk", "ts", "ts-bwk", "moe", "omd")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fig2Config(ExperimentConfig):
    """Settings of Figure 2 (the paper's by default).

    Attributes
    ----------
    n_dims : int
        N = 3 task groups.
    envs, levels, policies : tuple of str
    omd_variants : tuple of str
        OMD variants to run (``msroute.policies.omd_variants.VARIANTS``): the first is
        labelled ``omd``, the others ``omd[name]``. Default ``("model",)``, msroute's default
        OMD; ``"paper"`` is Algorithm 1 as printed (Section 6.3's runs).
    eta_mult : float or None
        OMD's proximal multiplier; None (default) takes each variant's own (0.05 for "paper",
        as in Section 6.3; 0.001 for "model").
    bwk_violations : tuple of str
        Readings of the CBwK/TS-BwK dual to run: "average" (default) and/or "round".
    n_blocks, fraction, shrink : regime-switching environment (10, 0.1, 0.2).
    reward_axis : str
        The figure's reward axis: "differences" (zoomed on the bars, default) or "full" (from
        0, the paper's).
    seeds_per_cell : int
        Seeds batched in one cell (20): a sweep with more seeds runs one cell per block of
        this many seeds and policy, so that a cell's memory stays bounded and a cluster has
        many cells to run at once. Every run depends on its own seed only, so the numbers do
        not depend on this setting.
    """

    n_dims: int = 3
    envs: tuple[str, ...] = ("stochastic", "regime")
    levels: tuple[str, ...] = ("tight", "medium", "loose", "none")
    policies: tuple[str, ...] = PAPER_POLICIES
    omd_variants: tuple[str, ...] = ("model",)
    eta_mult: float | None = None
    bwk_violations: tuple[str, ...] = ("average",)
    n_blocks: int = 10
    fraction: float = 0.1
    shrink: float = 0.2
    reward_axis: str = "differences"
    seeds_per_cell: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        check_names((self.reward_axis,), REWARD_AXES, "reward_axis")
        check_envs(self.envs)
        check_levels(self.levels)
        check_policies(self.policies)
        check_names(self.bwk_violations, VIOLATIONS, "bwk_violations")
        check_names(self.omd_variants, VARIANTS, "omd_variants")


def _policy_variants(cfg: Fig2Config) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, registered name, constructor params) of every policy run."""
    return policy_variants(
        cfg.policies,
        cfg.n_dims,
        eta_mult=cfg.eta_mult,
        bwk_violations=cfg.bwk_violations,
        cost_count=cfg.cost_count,
        omd_variants=cfg.omd_variants,
    )


def sweep_specs(
    cfg: Fig2Config, experiment: str, record: tuple[str, ...] = ()
) -> list[tuple[str, CellSpec]]:
    """The (policy label, cell) pairs of the sweep, one per environment and policy (the sweep
    runs the environments of a policy in one cell: ``run_sweep``)."""
    env_params = params_items(
        {
            "kappa": cfg.kappa,
            "n_blocks": cfg.n_blocks,
            "fraction": cfg.fraction,
            "shrink": cfg.shrink,
        }
    )
    specs = []
    for env in cfg.envs:
        for label, name, params in _policy_variants(cfg):
            specs.append(
                (
                    label,
                    CellSpec(
                        experiment=experiment,
                        env=env,
                        policy=name,
                        levels=cfg.levels,
                        seeds=cfg.seed_list,
                        horizon=cfg.horizon,
                        n_experts=cfg.n_experts,
                        m_draws=cfg.m_draws,
                        n_dims=cfg.n_dims,
                        env_params=env_params,
                        policy_params=params_items(params),
                        record=record,
                        cost_count=cfg.cost_count,
                        dataset=cfg.dataset,
                    ),
                )
            )
    return specs


def run_sweep(
    cfg: Fig2Config,
    out: Path,
    jobs: int,
    progress: Progress,
    labels: Sequence[str] | None = None,
    backend: Backend | None = None,
    rewards: bool = False,
    plot: bool = False,
) -> tuple[list[tuple[str, CellSpec]], list[dict[str, np.ndarray]]]:
    """Run (or resume) the sweep's cells, with a progress bar.

    Each policy runs every environment in one cell (``env="stochastic+regime"``, per block of
    ``seeds_per_cell`` seeds): a batch of twice the runs costs far less than twice a batch, and
    every run's numbers are those it has alone. The results are returned per environment and
    policy, as ``sweep_specs`` lists them; each holds the wall time of the cell that ran
    it with the other environments.

    The cells record per-round rewards too, so that Figure 3 reads the same cells from the
    cache instead of simulating them again; ``labels`` keeps only the policies it names;
    ``backend`` runs the cells (default: ``jobs`` local processes); the results hold the
    per-round rewards only with ``rewards=True`` (they stay in the cache either way);
    ``plot``: a figure follows, so its library is loaded while the last cells run.
    """
    experiment = "sweep"
    labelled = sweep_specs(cfg, experiment, ("rewards",))
    if labels is not None:
        run = dict(labelled)
        unknown = [x for x in labels if x not in run and x not in POLICIES]  # typos
        if unknown or not any(x in run for x in labels):  # before any cell runs
            raise InvalidValueError(
                f"show_policies {unknown or list(labels)} are not among the sweep's policies "
                f"{list(run)}"
            )
        labelled = [(label, spec) for label, spec in labelled if label in labels]
    spec_of = dict(labelled)  # per label, the spec of an environment: they differ in env only
    step = cfg.seeds_per_cell
    blocks = [
        (label, dataclasses.replace(spec, env=ENV_JOIN.join(cfg.envs), seeds=spec.seeds[lo:hi]))
        for label, spec in spec_of.items()
        for lo in range(0, len(spec.seeds), step)
        for hi in [lo + step]
    ]
    results = run_cells(
        [b for _, b in blocks],
        sweep_worker,
        out,
        jobs=jobs,
        backend=backend,
        progress=progress,
        title="sweep",
        drop=() if rewards else ("rewards",),
        when_free=preload_plotting if plot else None,
    )
    by_env: dict[tuple[str, str], list[CellResult]] = {}
    for (label, _), result in zip(blocks, results, strict=True):
        for env, part in zip(cfg.envs, split_envs(result, len(cfg.envs)), strict=True):
            by_env.setdefault((label, env), []).append(part)
    merged = [
        merge_seed_blocks(by_env[label, spec.env], len(cfg.levels)) for label, spec in labelled
    ]
    return labelled, merged


def tidy_rows(
    cfg: Fig2Config, labelled: Sequence[tuple[str, CellSpec]], results: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per environment, level, policy and seed."""
    rows = []
    n_seeds = len(cfg.seed_list)
    for (label, spec), res in zip(labelled, results, strict=True):
        for li, level in enumerate(spec.levels):
            for si, seed in enumerate(spec.seeds):
                r = li * n_seeds + si
                rows.append(
                    {
                        "env": spec.env,
                        "level": level,
                        "policy": label,
                        "seed": seed,
                        "avg_reward": float(res["avg_reward"][r]),
                        "feasible": bool(res["feasible"][r]),
                        "feasible_1e3": bool(res["feasible_1e3"][r]),
                        "avg_workload": float(res["avg_cost"][r, 0]),
                        "avg_experts": float(res["avg_cost"][r, 1]),
                        "budget_bound": float(res["bounds"][r, 0]),
                        "expert_cap": float(res["bounds"][r, 1]),
                        "r2": float(res["r2"][r]),
                    }
                )
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Per (env, level, policy): mean and std reward, % feasible at 1e-9 and at 1e-3."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["env"], row["level"], row["policy"]), []).append(row)
    out = []
    for (env, level, policy), grp in groups.items():
        rew = np.array([g["avg_reward"] for g in grp])
        out.append(
            (
                env,
                level,
                policy,
                float(rew.mean()),
                float(rew.std()),
                100.0 * float(np.mean([g["feasible"] for g in grp])),
                100.0 * float(np.mean([g["feasible_1e3"] for g in grp])),
            )
        )
    return out


def run_fig2(
    cfg: Fig2Config,
    out: Path,
    *,
    jobs: int = 1,
    backend: Backend | None = None,
    progress: Progress | None = None,
    plot: bool = True,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Run Figure 2 and write ``fig2.csv``, ``fig2.json``, ``fig2.png`` and ``fig2.svg``."""
    tic = time.perf_counter()
    progress = progress or Progress(enabled=not quiet)
    labelled, results = run_sweep(cfg, out, jobs, progress, backend=backend, plot=plot)
    rows = tidy_rows(cfg, labelled, results)
    summary = Summary(
        "Figure 2: time-averaged reward and % feasible seeds",
        ("env", "level", "policy", "reward", "std", "% feasible", "% feas. 1e-3"),
        summarize(rows),
    )
    # Per policy: one cell ran it on every environment.
    cell_seconds = {
        label: float(r["wall_time"]) for (label, _), r in zip(labelled, results, strict=True)
    }
    publish(
        out,
        "fig2",
        rows,
        config=cfg,
        seeds=cfg.seed_list,
        started=tic,
        summary=summary,
        extra={"cell_seconds": cell_seconds},
        plot=plot,
        quiet=quiet,
        plot_options={"reward_axis": cfg.reward_axis},
        jobs=jobs,
    )
    return rows
