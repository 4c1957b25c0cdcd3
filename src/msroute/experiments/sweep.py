"""The worker of one sweep cell: one policy on one environment, every level and seed at once."""

from __future__ import annotations

import time

import numpy as np

from msroute.experiments.common import CellResult, CellSpec, build_batch, policy_seeds
from msroute.metrics import constraint_regret, feasible, time_averaged
from msroute.policies.registry import make_policy
from msroute.simulate import simulate

__all__ = ["sweep_worker"]


def sweep_worker(spec: CellSpec) -> CellResult:
    """Run one cell and summarize every run of it.

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
    policy = make_policy(
        spec.policy,
        batch,
        horizon=spec.horizon,
        seed=policy_seeds(spec),
        **dict(spec.policy_params),
    )
    traj = simulate(
        {spec.policy: policy},
        cell.env,
        batch,
        spec.horizon,
        run_map=cell.run_map,
        cost_count=spec.cost_count,
    )[spec.policy]
    avg_cost = time_averaged(traj.costs)
    result: CellResult = {
        "avg_reward": time_averaged(traj.rewards),
        "avg_cost": avg_cost,
        "feasible": feasible(avg_cost, batch.lo_ori, batch.hi_ori, tol=1e-9),
        "feasible_1e3": feasible(avg_cost, batch.lo_ori, batch.hi_ori, tol=1e-3),
        "r2": constraint_regret(traj.costs, batch.lo_ori, batch.hi_ori, at=[spec.horizon])[0],
        "bounds": batch.hi_ori,
    }
    if "rewards" in spec.record:
        result["rewards"] = traj.rewards.astype(np.float32)
    result["wall_time"] = np.array(time.perf_counter() - tic)
    return result
