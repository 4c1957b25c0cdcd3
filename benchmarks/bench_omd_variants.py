"""OMD variants against OPT: the gap, feasibility and cost per round, on TREC and web.

Run: ``python benchmarks/bench_omd_variants.py [--datasets trec web] [--envs stochastic regime]
[--horizons 1000 10000] [--seeds 10] [--levels tight] [--variants paper model ...]
[--out omd_variants.json]``.

The Figure 2 protocol (K = 50 workers of the data set's reliable pool per seed, N = 3, M = 5,
Table 1's levels, kappa = 20, regime switching with 10 blocks, 10%, factor 0.2), through the
experiments' own cells: the same seeds give the same pools, skill streams and policy streams as
``msroute reproduce fig2 --dataset ...``. Every variant of a (data set, environment, T) runs in
one simulation on the same skill stream (common random numbers), so the differences are not
noise of the environment.

* **OPT** is certified per (level, seed) by :func:`msroute.oracle.best_fixed_policy_for` on the
  seed's realized skills (eq. (3): the best fixed policy whose surrogate cost is in ``S``).
* **gap** = OPT - the time-averaged realized reward, mean over seeds (a negative gap means the
  learner beat the best *fixed* policy, which happens under regime switching).
* **feasible** = % of runs whose time-averaged realized cost meets every bound (to 1e-9).
* **us/round** = the policy's own time (select + update) per round for all the cell's runs
  (R = levels x seeds) at once, the simulator's clock.

Results are written as JSON (one record per data set, environment, T, level and variant) and
printed as a table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the oracle's SLSQP (see msroute.oracle)

import numpy as np

from msroute.experiments.cells import CellSpec, build_batch, params_items, policy_seeds
from msroute.metrics import feasible, time_averaged
from msroute.oracle import best_fixed_policy_for
from msroute.policies.omd import OMDApproachability
from msroute.simulate import simulate

#: label -> constructor keyword arguments of OMDApproachability.
VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {"variant": "paper"},
    "paper, decaying floor": {"variant": "paper", "floor": "decay"},
    "model, ix=0, fixed floor, eta_mult=0.01": {
        "variant": "model",
        "ix": 0.0,
        "floor": "fixed",
        "eta_mult": 0.01,
    },
    "model, fixed floor": {"variant": "model", "floor": "fixed"},
    "model (default)": {"variant": "model"},
    "model, anytime eta": {"variant": "model", "eta_schedule": "anytime"},
    "model, B=1": {"variant": "model", "batch": 1},
}

ENV_PARAMS = params_items({"kappa": 20.0, "n_blocks": 10, "fraction": 0.1, "shrink": 0.2})


def opt_values(spec: CellSpec, cache: Path) -> np.ndarray:
    """Certified OPT of every (level, seed) run of ``spec``, cached in ``cache`` (JSON)."""
    known = json.loads(cache.read_text()) if cache.exists() else {}
    keys = [
        f"{spec.dataset}/{spec.env}/{level}/{seed}/{spec.horizon}"
        for level in spec.levels
        for seed in spec.seeds
    ]
    if any(k not in known for k in keys):
        cell = build_batch(spec)
        skills = cell.env.skills(0, spec.horizon)
        for r, key in enumerate(keys):
            if key not in known:
                res = best_fixed_policy_for(cell.batch.problems[r], skills[:, cell.run_map[r]])
                known[key] = {"value": res.value, "gap": res.gap, "converged": res.converged}
        cache.write_text(json.dumps(known, indent=1, sort_keys=True))
    return np.array([known[k]["value"] for k in keys])


def measure(
    dataset: str,
    env: str,
    horizon: int,
    seeds: int,
    levels: tuple[str, ...],
    labels: list[str],
    cache: Path,
) -> list[dict[str, Any]]:
    """Every variant on one (data set, environment, T) cell: gap, feasibility, time."""
    spec = CellSpec(
        experiment="omd-variants",
        env=env,
        policy="omd",
        levels=levels,
        seeds=tuple(range(seeds)),
        horizon=horizon,
        env_params=ENV_PARAMS,
        dataset=dataset,
    )
    opt = opt_values(spec, cache)
    cell = build_batch(spec)
    policies = {
        label: OMDApproachability(
            cell.batch, horizon=horizon, seed=policy_seeds(spec), **VARIANTS[label]
        )
        for label in labels
    }
    trajs = simulate(policies, cell.env, cell.batch, horizon, run_map=cell.run_map)
    rows = []
    for label, traj in trajs.items():
        reward = time_averaged(traj.rewards)
        ok = feasible(time_averaged(traj.costs), cell.batch.lo_ori, cell.batch.hi_ori)
        for li, level in enumerate(levels):
            sl = slice(li * seeds, (li + 1) * seeds)
            rows.append(
                {
                    "dataset": dataset,
                    "env": env,
                    "horizon": horizon,
                    "level": level,
                    "variant": label,
                    "params": VARIANTS[label],
                    "seeds": seeds,
                    "opt": float(opt[sl].mean()),
                    "reward": float(reward[sl].mean()),
                    "gap": float((opt[sl] - reward[sl]).mean()),
                    "gap_std": float((opt[sl] - reward[sl]).std()),
                    "feasible_pct": 100.0 * float(ok[sl].mean()),
                    "us_per_round": 1e6 * traj.wall_time / horizon,
                    "runs_per_cell": len(levels) * seeds,
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--datasets", nargs="+", default=["trec", "web"])
    ap.add_argument("--envs", nargs="+", default=["stochastic", "regime"])
    ap.add_argument("--horizons", nargs="+", type=int, default=[1000, 10_000])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--levels", nargs="+", default=["tight"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--out", type=Path, default=Path("omd_variants.json"))
    ap.add_argument("--opt-cache", type=Path, default=Path("omd_variants_opt.json"))
    args = ap.parse_args()
    from msroute import __version__

    records = json.loads(args.out.read_text())["rows"] if args.out.exists() else []
    for horizon in args.horizons:
        for dataset in args.datasets:
            for env in args.envs:
                tic = time.perf_counter()
                rows = measure(
                    dataset,
                    env,
                    horizon,
                    args.seeds,
                    tuple(args.levels),
                    args.variants,
                    args.opt_cache,
                )
                done = {
                    (r["dataset"], r["env"], r["horizon"], r["level"], r["variant"]) for r in rows
                }
                records = [
                    r
                    for r in records
                    if (r["dataset"], r["env"], r["horizon"], r["level"], r["variant"]) not in done
                ]
                records += rows
                args.out.write_text(json.dumps({"msroute": __version__, "rows": records}, indent=1))
                print(f"# {dataset} {env} T={horizon}: {time.perf_counter() - tic:.0f} s")
                for r in rows:
                    print(
                        f"{r['level']:6s} {r['variant']:42s} OPT {r['opt']:.4f} "
                        f"reward {r['reward']:.4f} gap {r['gap']:+.4f} "
                        f"feasible {r['feasible_pct']:.0f}% {r['us_per_round']:.0f} us/round",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
