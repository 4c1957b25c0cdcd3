"""Router throughput (route + feedback pairs per second) and the choice of OMD's live step size.

Throughput: one OMD router (R = 1) routes a query and receives its feedback at once, over and
over, in memory and with its SQLite journal at synchronous=FULL and NORMAL (each call committed
before it returns: two commits a pair; and FULL with group commit of 16 pairs per transaction,
as the HTTP service does), for K = 50 (a TREC pool) and K = 10,000 (synthetic costs). The
figures go in the README.

``--schedule``: the Router's default step schedule. A live router does not know its horizon, so
OMD uses Corollary 2's anytime eta ``a sqrt(n)``; this compares multipliers of ``a`` with the
fixed eta that knows T, on TREC pools (K = 20, M = 3, tight budget, expert cap 1.0, 5,000
rounds, immediate feedback, 2 pools x 4 runs), against the exact expected reward of uniform
routing.

    python benchmarks/bench_router.py [--pairs 3000] [--schedule]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import msroute
from msroute.experiments.protocol import level_constraints, paper_instance
from msroute.router import Router

M = 3


def config(k: int) -> dict[str, Any]:
    """An OMD router over K experts with a binding workload budget and an expert cap."""
    if k == 50:
        costs = paper_instance(0, 50, 3).costs
    else:
        rng = np.random.default_rng(0)
        costs = np.column_stack([rng.uniform(0.5, 1.5, k), (rng.random(k) < 0.2).astype(float)])
    return {
        "policy": "omd",
        "m_draws": M,
        "cost_names": ["workload", "experts"],
        "seed": 0,
        "experts": {f"e{i}": [float(c) for c in row] for i, row in enumerate(costs)},
        "constraints": {"upper": {"workload": M * float(costs[:, 0].mean()), "experts": 2.0}},
    }


def pairs_per_second(router: Router, pairs: int, group: int = 1) -> float:
    """Route + immediate feedback, ``pairs`` times.

    ``group = 1``: each call commits before it returns (two commits a pair); ``group > 1``:
    ``group`` pairs share one transaction (:meth:`Router.group`).
    """

    def pair() -> None:
        d = router.route()
        router.feedback(d.decision_id, 1.0)

    for _ in range(50):  # warm-up
        pair()
    tic = time.perf_counter()
    if group == 1:
        for _ in range(pairs):
            pair()
    else:
        for _ in range(pairs // group):
            with router.group():
                for _ in range(group):
                    pair()
    return (pairs // group) * group / (time.perf_counter() - tic)


def bare_commits_per_second(sync: str, n: int = 500) -> float:
    """The floor of a durable write: one-row INSERT + COMMIT in WAL mode with the journal's
    exclusive locking mode, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "bare.db", isolation_level=None)
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {sync}")
        db.execute("CREATE TABLE t(x INTEGER)")
        tic = time.perf_counter()
        for i in range(n):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO t VALUES (?)", (i,))
            db.execute("COMMIT")
        rate = n / (time.perf_counter() - tic)
        db.close()
    return rate


def throughput(pairs: int) -> None:
    full, normal = bare_commits_per_second("FULL"), bare_commits_per_second("NORMAL")
    print(
        f"bare SQLite commits per second on this machine now: FULL {full:.0f}, NORMAL "
        f"{normal:.0f} (a route + feedback pair needs two, or 2/16 with group commit)"
    )
    print(f"route + feedback pairs per second (OMD, M = {M}, d = 2; {pairs} pairs at K = 50)")
    print(f"{'K':>7}  {'memory':>8}  {'FULL':>8}  {'NORMAL':>8}  {'FULL, 16/commit':>15}")
    for k in (50, 10_000):
        n = pairs if k == 50 else max(50, pairs // 15)
        cfg = config(k)
        row = [pairs_per_second(Router(cfg), n)]
        with tempfile.TemporaryDirectory() as tmp:
            for i, (sync, group) in enumerate((("full", 1), ("normal", 1), ("full", 16))):
                router = Router({**cfg, "journal_sync": sync}, journal=Path(tmp) / f"{i}.db")
                row.append(pairs_per_second(router, n, group))
                router.close()
        cells = [f"{v:>{w}.0f}" for v, w in zip(row, (8, 8, 8, 15), strict=True)]
        print(f"{k:>7}  " + "  ".join(cells))


def schedule() -> None:
    k, n_dims, horizon, runs = 20, 3, 5000, 4
    rewards: dict[str, list[float]] = {}
    feasible: dict[str, bool] = {}
    for seed in range(2):
        inst = paper_instance(seed, k, n_dims)
        budget = float(level_constraints(inst, M, "tight").upper_array()[0])
        problem = msroute.Problem(inst.costs, M, msroute.Constraints(upper=[budget, 1.0]))
        batch = msroute.ProblemBatch(problem, runs)
        env = msroute.StochasticEnv(
            inst.skills_base, kappa=20, seed=[100 * seed + r for r in range(runs)]
        )
        pols: dict[str, msroute.BasePolicy] = {
            f"anytime, eta_mult {m}": msroute.OMDApproachability(
                batch, horizon=horizon, seed=1, eta_schedule="anytime", eta_mult=m, variant="paper"
            )
            for m in (0.03, 0.1, 0.3, 1.0)
        }
        pols["fixed (knows T), 0.05"] = msroute.OMDApproachability(
            batch, horizon=horizon, seed=1, eta_mult=0.05, variant="paper"
        )
        for name, tr in msroute.simulate(pols, env, batch, horizon).items():
            rewards.setdefault(name, []).append(float(tr.rewards.mean()))
            ok = msroute.feasible(tr.costs.mean(axis=0), batch.lo_ori, batch.hi_ori)
            feasible[name] = feasible.get(name, True) and bool(np.all(ok))
        skills = env.skills(0, horizon)
        uniform = msroute.expected_reward(np.full((runs, k), 1.0 / k), skills, M)
        rewards.setdefault("uniform routing (exact)", []).append(float(uniform.mean()))
    print(f"OMD step schedule: TREC pools K = {k}, M = {M}, tight budget, cap 1.0, T = {horizon}")
    for name, values in rewards.items():
        flag = "" if name not in feasible else ("  feasible" if feasible[name] else "  INFEASIBLE")
        print(f"  {name:28s} average reward {np.mean(values):.4f}{flag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--schedule", action="store_true", help="compare OMD step schedules")
    args = parser.parse_args()
    if args.schedule:
        schedule()
    else:
        throughput(args.pairs)


if __name__ == "__main__":
    main()
