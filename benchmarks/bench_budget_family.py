"""The budget guarantee and the live router's defaults, over a generated family of instances.

Each instance of ``msroute.experiments.family`` (K 2-50, M 1-5, 1-3 cost coordinates with
packing and covering bounds, budgets from just above the cheapest routing the router accepts
to generous, contexts, eligibility masks, per-call cost noise, price rises seen only in the
feedback, delayed and missing feedback, a bound changed and an expert removed mid-run) is run
through ``msroute.Router`` query by query, once per candidate configuration, on the same
traffic. Per candidate: the runs that end over any bound (no tolerance), the worst spend /
bound, the mean reward / OPT (OPT: the certified best fixed routing per context under the
table costs), the share of decisions the pacer narrowed, and the seconds per run.

Usage::

    python benchmarks/bench_budget_family.py                        # every candidate, 200 instances
    python benchmarks/bench_budget_family.py --candidates default --instances 1000
    python benchmarks/bench_budget_family.py --out results/family   # CSV + JSON sidecar

The default candidate is the Router's own configuration (nothing overridden), so its figures
are what a user of the live router gets.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import msroute
from msroute.errors import MSRouteError
from msroute.experiments.family import family_instance, opt_reward, run_instance

#: Candidate configurations: policy, params (over the Router's defaults), pacing.
CANDIDATES: dict[str, dict[str, Any]] = {
    "default": {},
    "unpaced": {"pacing": False},
    "eta_mult 0.001, budget_margin 3 (the defaults before the family)": {
        "params": {"eta_mult": 0.001, "budget_margin": 3.0}
    },
    "eta_mult 0.001": {"params": {"eta_mult": 0.001}},
    "eta_mult 0.003": {"params": {"eta_mult": 0.003}},
    "eta_mult 0.01": {"params": {"eta_mult": 0.01}},
    "eta_mult 0.03": {"params": {"eta_mult": 0.03}},
    "eta_mult 0.01, budget_margin 0": {"params": {"eta_mult": 0.01, "budget_margin": 0.0}},
    "eta_mult 0.01, budget_margin 1": {"params": {"eta_mult": 0.01, "budget_margin": 1.0}},
    "eta_mult 0.01, budget_margin 2": {"params": {"eta_mult": 0.01, "budget_margin": 2.0}},
    "eta_mult 0.003, budget_margin 1": {"params": {"eta_mult": 0.003, "budget_margin": 1.0}},
    "eta_mult 0.01, linear surrogate": {"params": {"eta_mult": 0.01, "surrogate": "linear"}},
    "library (fixed eta, horizon known, linear, unpaced)": {
        "params": {"eta_schedule": "fixed", "surrogate": "linear"},
        "horizon": True,
        "pacing": False,
    },
    "cbwk": {"policy": "cbwk"},
    "ix 1/(2K) at every M (the default before)": {"params": {"ix_per_k": 0.5}},
    "ix 1/K at every M": {"params": {"ix_per_k": 1.0}},
}


def _instance_rows(
    seed: int, horizon: int, candidates: list[str], with_opt: bool
) -> list[dict[str, Any]]:
    """Instance ``seed`` drawn once, its OPT (unless ``with_opt`` is false) and one row per
    candidate run on it; each row also says how long the drawing and the OPT took."""
    tic = time.perf_counter()
    inst = family_instance(seed, horizon)
    drawn = time.perf_counter() - tic
    opt = opt_reward(inst) if with_opt else math.nan
    opt_s = time.perf_counter() - tic - drawn
    rows = []
    for name in candidates:
        spec = CANDIDATES[name]
        try:
            res = run_instance(
                inst,
                horizon,
                policy=spec.get("policy", "omd"),
                params=spec.get("params"),
                pacing=spec.get("pacing", True),
                config={"horizon": horizon} if spec.get("horizon") else None,
            )
        except MSRouteError as exc:  # e.g. CBwK needs M <= K, also after an expert's removal
            print(f"  seed {seed}, {name}: not run ({exc})", file=sys.stderr)
            continue
        rows.append(
            {
                "candidate": name,
                **inst.features(),
                **res.row(),
                "opt_reward": opt,
                "reward_over_opt": res.reward / opt,
                "draw_seconds": drawn,
                "opt_seconds": opt_s,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--horizon", type=int, default=3000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--candidates", nargs="*", default=list(CANDIDATES))
    ap.add_argument("--out", type=Path, default=None, help="write <out>.csv and <out>.json")
    ap.add_argument(
        "--no-opt", action="store_true", help="skip OPT (the guarantee's count only: faster)"
    )
    args = ap.parse_args(argv)
    unknown = [c for c in args.candidates if c not in CANDIDATES]
    if unknown:
        ap.error(f"unknown candidate(s) {unknown}; known: {list(CANDIDATES)}")
    seeds = list(range(args.first, args.first + args.instances))
    tic = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(_instance_rows, s, args.horizon, args.candidates, not args.no_opt)
            for s in seeds
        ]
        for done, fut in enumerate(as_completed(futures), start=1):
            rows.extend(fut.result())
            if done % 50 == 0:
                print(
                    f"  {done}/{len(futures)} instances ({time.perf_counter() - tic:.0f} s)",
                    file=sys.stderr,
                )
    wall = time.perf_counter() - tic
    per_seed = {r["seed"]: r for r in rows}.values()
    print(
        f"{len(seeds)} instances (seeds {seeds[0]}..{seeds[-1]}), T = {args.horizon}, "
        f"msroute {msroute.__version__}, {wall:.0f} s on {args.jobs} processes (CPU seconds: "
        f"drawing the instances {sum(r['draw_seconds'] for r in per_seed):.0f}, OPT "
        f"{sum(r['opt_seconds'] for r in per_seed):.0f}, the router runs "
        f"{sum(r['seconds'] for r in rows):.0f})"
    )
    print(
        "| candidate | runs | over a bound | worst spend/bound | reward/OPT (mean) | "
        "reward/OPT (p10) | paced decisions | s/run |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in args.candidates:
        sel = [r for r in rows if r["candidate"] == c]
        if not sel:
            continue
        ratio = np.array([r["reward_over_opt"] for r in sel])
        print(
            f"| {c} | {len(sel)} | {sum(r['over'] for r in sel)} | "
            f"{max(r['worst'] for r in sel):.4f} | {ratio.mean():.4f} | "
            f"{np.quantile(ratio, 0.1):.4f} | "
            f"{np.mean([r['restricted'] for r in sel]) / args.horizon:.1%} | "
            f"{np.mean([r['seconds'] for r in sel]):.2f} |"
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        rows.sort(key=lambda r: (args.candidates.index(r["candidate"]), r["seed"]))
        with open(args.out.with_suffix(".csv"), "w", newline="") as fh:
            fields = list(dict.fromkeys(k for r in rows for k in r))  # cost names differ
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        sidecar = {
            "msroute_version": msroute.__version__,
            "seeds": seeds,
            "horizon": args.horizon,
            "candidates": {c: CANDIDATES[c] for c in args.candidates},
            "seconds": wall,
            "jobs": args.jobs,
            "opt": not args.no_opt,
        }
        args.out.with_suffix(".json").write_text(json.dumps(sidecar, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
