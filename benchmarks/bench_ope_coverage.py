"""Do ``msroute.evaluate``'s intervals cover at their nominal rate? Coverage by simulation.

A Router at its defaults (OMD, anytime, paced) routes ``T`` queries of a small instance (K = 5
experts, dollars per call, a budget; a team's answer is right with its best member's skill)
with immediate feedback; ``msroute.evaluate`` then estimates, from its log, the reward of
fixed candidates whose exact value is known (``msroute.expected_reward`` of the skills):
uniform routing, the cheapest expert alone, a mixture near what the router learned. Over many
seeds, by effective-sample-size bucket: how often the 95% interval (one for both estimates)
holds the exact value, its mean width, each estimate's mean absolute error, and how often
``evaluate`` refused (``min_ess``).

Usage: ``python benchmarks/bench_ope_coverage.py [--seeds 200] [--horizon 3000] [--m 1 2]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import msroute
from msroute.errors import UnsupportedEstimateError

COSTS = [0.002, 0.004, 0.008, 0.015, 0.03]
SKILL = np.array([0.35, 0.5, 0.62, 0.74, 0.85])
BUDGET = 0.012
BUCKETS = (0.0, 10.0, 30.0, 100.0, 300.0, 1000.0, np.inf)


def _candidates(learned: dict[str, float]) -> dict[str, dict[str, float]]:
    ids = [f"e{i}" for i in range(len(COSTS))]
    return {
        "uniform": dict.fromkeys(ids, 1.0 / len(ids)),
        "cheapest": {ids[0]: 1.0},
        "near the learned": {e: 0.8 * learned.get(e, 0.0) + 0.2 / len(ids) for e in ids},
    }


def _run(seed: int, m: int, horizon: int, min_ess: float) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    ids = [f"e{i}" for i in range(len(COSTS))]
    router = msroute.Router(
        {
            "policy": "omd",
            "m_draws": m,
            "cost_names": ["usd"],
            "seed": seed,
            "experts": {e: [c] for e, c in zip(ids, COSTS, strict=True)},
            "constraints": {"upper": {"usd": BUDGET * m}},
        }
    )
    for _ in range(horizon):
        d = router.route()
        p = max(SKILL[ids.index(e)] for e in d.team)
        router.feedback(d.decision_id, float(rng.random() < p))
    learned = router.state()["q"]
    out = []
    for name, cand in _candidates(learned).items():
        q = np.array([cand.get(e, 0.0) for e in ids])
        truth = float(msroute.expected_reward(q, SKILL[None, :], m))
        row: dict[str, Any] = {"seed": seed, "M": m, "candidate": name, "truth": truth}
        try:
            res = msroute.evaluate(router, cand, min_ess=min_ess)
        except UnsupportedEstimateError:
            row["refused"] = True
            out.append(row)
            continue
        row.update(refused=False, ess=res.ess, width=res.snips_reward.high - res.snips_reward.low)
        row["cover"] = res.snips_reward.low <= truth <= res.snips_reward.high
        for est, e in (("ips", res.ips_reward), ("snips", res.snips_reward)):
            row[f"{est}_err"] = abs(e.value - truth)
        out.append(row)
    router.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--horizon", type=int, default=3000)
    ap.add_argument("--m", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--min-ess", type=float, default=0.0, help="evaluate's min_ess (0: all)")
    args = ap.parse_args(argv)
    tic = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        futs = [
            pool.submit(_run, s, m, args.horizon, args.min_ess)
            for m in args.m
            for s in range(args.seeds)
        ]
        rows = [r for f in futs for r in f.result()]
    print(
        f"msroute {msroute.__version__}: {args.seeds} seeds x M in {args.m}, T = {args.horizon}, "
        f"min_ess = {args.min_ess:g}, {time.perf_counter() - tic:.0f} s"
    )
    head = "| M | candidate | ESS | runs | refused | cover | width | IPS err | SNIPS err"
    print(head + " |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for m in args.m:
        for name in ("uniform", "cheapest", "near the learned"):
            sel = [r for r in rows if r["M"] == m and r["candidate"] == name]
            refused = sum(r["refused"] for r in sel)
            for lo, hi in itertools.pairwise(BUCKETS):
                b = [r for r in sel if not r["refused"] and lo <= r["ess"] < hi]
                if not b:
                    continue
                print(
                    f"| {m} | {name} | [{lo:g}, {hi:g}) | {len(b)} | {refused} | "
                    f"{np.mean([r['cover'] for r in b]):.2f} | "
                    f"{np.mean([r['width'] for r in b]):.3f} | "
                    f"{np.mean([r['ips_err'] for r in b]):.3f} | "
                    f"{np.mean([r['snips_err'] for r in b]):.3f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
