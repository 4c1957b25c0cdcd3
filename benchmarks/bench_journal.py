"""Journal size and latency under decision-only traffic (no feedback ever arrives).

Most LLM traffic gets feedback for few queries, so a router's pending decisions pile up until
they expire. This routes ``--decisions`` queries (default 100,000) with one OMD router over
K = 50 experts (a TREC pool, M = 3, a binding workload budget) and a journal at
``synchronous=FULL``, each call committed before it returns, no feedback, a deadline far away
(nothing expires: every decision stays pending, the worst case for snapshots), and the default
``snapshot_every`` (4,096 events). It reports the journal's size on disk (file and WAL) and per
event, the snapshots kept, the time to reopen the journal, and the p50/p99 latency of the first
and the last ``--window`` decisions (goal of docs/operations.md: the last window's p99 within
1.5x of the first's, the journal under 100 MB).

    python benchmarks/bench_journal.py [--decisions 100000] [--window 10000] [--k 50]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from msroute.experiments.protocol import paper_instance
from msroute.router import Router

M = 3


def config(k: int) -> dict[str, Any]:
    """An OMD router over a TREC pool of K experts with a binding workload budget."""
    costs = paper_instance(0, k, 3).costs
    return {
        "policy": "omd",
        "m_draws": M,
        "cost_names": ["workload", "experts"],
        "seed": 0,
        "feedback_ttl_s": 10**7,
        "experts": {f"e{i}": [float(c) for c in row] for i, row in enumerate(costs)},
        "constraints": {"upper": {"workload": M * float(costs[:, 0].mean()), "experts": 2.0}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=10_000)
    parser.add_argument("--k", type=int, default=50)
    args = parser.parse_args()
    if not 0 < args.window <= args.decisions:
        parser.error(f"--window {args.window} must be in [1, --decisions = {args.decisions}]")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "j.db"
        router = Router(config(args.k), journal=path)
        times = np.empty(args.decisions)
        clock = time.perf_counter
        for i in range(args.decisions):
            tic = clock()
            router.route()
            times[i] = clock() - tic
        wal = Path(f"{path}-wal")
        live_bytes = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        router.close()
        size = path.stat().st_size
        with contextlib.closing(sqlite3.connect(path)) as db:
            events = db.execute("SELECT count(*) FROM events").fetchone()[0]
            snaps = db.execute(
                "SELECT count(*), sum(length(policy) + length(router)) FROM snapshots"
            )
            n_snaps, snap_bytes = snaps.fetchone()
            payload = db.execute(
                "SELECT sum(length(payload)), sum(coalesce(length(probs), 0)) FROM events"
            ).fetchone()
        tic = clock()
        reopened = Router.open(path)
        reopen_s = clock() - tic
        pending = reopened.state()["pending"]
        reopened.close()
    first, last = times[: args.window] * 1e3, times[-args.window :] * 1e3
    p99_first, p99_last = np.percentile(first, 99), np.percentile(last, 99)
    print(f"K = {args.k}, {args.decisions:,} decisions, no feedback, synchronous=FULL")
    print(f"journal: {size / 1e6:.1f} MB closed ({live_bytes / 1e6:.1f} MB with the WAL live)")
    print(f"  {events:,} events, {size / events:.0f} bytes per event on disk")
    print(f"  payload JSON {payload[0] / events:.0f} B/event, distributions {payload[1]:,} B total")
    print(f"  snapshots kept: {n_snaps} ({(snap_bytes or 0) / 1e3:.1f} kB)")
    print(f"reopen: {reopen_s:.2f} s ({pending:,} pending decisions found again)")
    print(f"first {args.window:,}: p50 {np.median(first):.3f} ms, p99 {p99_first:.3f} ms")
    print(f"last  {args.window:,}: p50 {np.median(last):.3f} ms, p99 {p99_last:.3f} ms")
    print(f"p99 last / first: {p99_last / p99_first:.2f}x")


if __name__ == "__main__":
    main()
