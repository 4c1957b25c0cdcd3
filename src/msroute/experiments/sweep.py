"""The worker of one sweep cell: one policy on one environment, every level and seed at once."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from msroute.experiments.cells import CellResult, CellSpec, build_batch, policy_seeds
from msroute.metrics import feasible, regret_of_averages
from msroute.policies.registry import get_policy_class, make_policy
from msroute.simulate import simulate_summary

__all__ = [
    "ignores_levels",
    "merge_seed_blocks",
    "policy_variants",
    "split_envs",
    "sweep_worker",
]

#: The run axis of each per-run output of ``sweep_worker`` (0 unless listed).
_RUN_AXIS = {"rewards": 1}


def policy_variants(
    policies: Sequence[str],
    n_dims: int,
    *,
    eta_mult: float | None = None,
    bwk_violations: Sequence[str] = ("average",),
    cost_count: str = "distinct",
    omd_variants: Sequence[str] = ("model",),
) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, registered name, constructor params) of every policy run of a sweep.

    TS and TS-BwK normalize their Beta update by N (Section 6.3's ``r_t / N``); OMD gets
    ``eta_mult`` when one is given, and learns costs counted as they are spent when
    ``cost_count`` is not "distinct"; it runs once per variant in ``omd_variants``
    (``msroute.policies.omd_variants.VARIANTS``; labelled ``omd`` for the first, ``omd[paper]``
    etc. for the others); CBwK and TS-BwK run once per dual reading in ``bwk_violations``
    (labelled ``cbwk[round]`` etc. for the non-default one).
    """
    out: list[tuple[str, str, dict[str, Any]]] = []
    for name in policies:
        cls = get_policy_class(name)
        base: dict[str, Any] = {"reward_scale": float(n_dims)} if cls.thompson else {}
        if name == "omd":
            omd: dict[str, Any] = {} if eta_mult is None else {"eta_mult": eta_mult}
            if cost_count != "distinct":
                omd["cost_estimate"] = cost_count
            for i, variant in enumerate(omd_variants):
                label = name if i == 0 else f"{name}[{variant}]"
                out.append((label, name, {**omd, "variant": variant}))
        elif cls.lagrangian_dual:
            for i, v in enumerate(bwk_violations):
                label = name if i == 0 and v == "average" else f"{name}[{v}]"
                out.append((label, name, {**base, "violation": v}))
        else:
            out.append((name, name, base))
    return out


def ignores_levels(spec: CellSpec) -> bool:
    """Whether a cell's policy decides the same at every constraint level: its class never
    reads the constraints (``BasePolicy.ignores_constraints``) and it is not paced (a pacer
    reads them for it)."""
    paced = bool(dict(spec.policy_params).get("pacing"))
    return get_policy_class(spec.policy).ignores_constraints and not paced


def sweep_worker(spec: CellSpec) -> CellResult:
    """Run one cell and summarize every run of it, in memory independent of the horizon
    (the rounds stream into the summary: ``msroute.simulate.simulate_summary``).

    A policy that ignores the constraints (Random, Greedy, CUCB, TS, Fixed, Uniform) is played
    at the first level only and its trajectories judged against every level's bounds: the same
    numbers as playing each level, in a fraction of the time.

    Returns
    -------
    dict of arrays
        ``avg_reward`` (R,), ``avg_cost`` (R, d), ``feasible`` and ``feasible_1e3`` (R,) bool,
        ``r2`` (R,) the final constraint regret, ``wall_time`` (seconds, 0-d); with "rewards" in
        ``spec.record`` also the per-round ``rewards`` (T, R) as float32.
    """
    tic = time.perf_counter()
    cell = build_batch(spec)
    batch = cell.batch
    # A policy that never reads the constraints makes the same decisions at every level
    # (BasePolicy.ignores_constraints; a run's stream is its seed's at every level): it plays
    # the first level only, and each (environment, level, seed) run takes the trajectory of
    # its (environment, seed), which is the played run cell.run_map points at.
    shared = len(spec.levels) > 1 and ignores_levels(spec)
    played = replace(spec, levels=spec.levels[:1]) if shared else spec
    play = build_batch(played) if shared else cell
    policy = make_policy(
        spec.policy,
        play.batch,
        horizon=spec.horizon,
        seed=policy_seeds(played),
        **dict(spec.policy_params),
    )
    run = simulate_summary(
        {spec.policy: policy},
        play.env,
        play.batch,
        spec.horizon,
        run_map=play.run_map,
        cost_count=spec.cost_count,
        keep_rewards="rewards" in spec.record,
    )[spec.policy]
    runs = cell.run_map if shared else slice(None)
    avg_cost = run.avg_cost[runs]
    result: CellResult = {
        "avg_reward": run.avg_reward[runs],
        "avg_cost": avg_cost,
        "feasible": feasible(avg_cost, batch.lo_ori, batch.hi_ori, tol=1e-9),
        "feasible_1e3": feasible(avg_cost, batch.lo_ori, batch.hi_ori, tol=1e-3),
        "r2": regret_of_averages(run.running_cost[:, runs], batch.lo_ori, batch.hi_ori)[0],
        "bounds": batch.hi_ori,
    }
    if run.rewards is not None:
        result["rewards"] = run.rewards[:, runs].astype(np.float32)
    result["wall_time"] = np.array(time.perf_counter() - tic)
    return result


def split_envs(result: CellResult, n_envs: int) -> list[CellResult]:
    """The results of each environment of a cell that ran ``n_envs`` side by side (its runs
    environment by environment); each keeps the cell's wall time."""
    parts: list[CellResult] = [{} for _ in range(n_envs)]
    for key, arr in result.items():
        pieces = [arr] * n_envs if arr.ndim == 0 else np.split(arr, n_envs, _RUN_AXIS.get(key, 0))
        for part, piece in zip(parts, pieces, strict=True):
            part[key] = piece
    return parts


def merge_seed_blocks(results: Sequence[CellResult], n_levels: int) -> CellResult:
    """One result for the seeds of several cells that differ only in their block of seeds.

    Each result holds its runs level by level (run ``li * S_b + si``); the merged one holds
    every block's seeds in order within each level, as one cell of all the seeds would, and the
    sum of the blocks' wall times.
    """
    if len(results) == 1:
        return results[0]
    merged: CellResult = {}
    for key in results[0]:
        parts = [res[key] for res in results]
        if parts[0].ndim == 0:
            merged[key] = np.asarray(sum(float(p) for p in parts))
            continue
        axis = _RUN_AXIS.get(key, 0)
        by_level = [np.moveaxis(p, axis, 0) for p in parts]
        by_level = [p.reshape(n_levels, -1, *p.shape[1:]) for p in by_level]
        joined = np.concatenate(by_level, axis=1)
        merged[key] = np.moveaxis(joined.reshape(-1, *joined.shape[2:]), 0, axis)
    return merged
