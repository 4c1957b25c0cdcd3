"""Where a journaled router's time goes at ``journal_sync = "normal"``, part by part.

The default OMD router over the stream of ``bench_peers.py`` (K models, M = 1, three contexts,
each query's feedback at once) with a journal at ``"normal"``: each call appends one frame to
the journal's tail, the tail is folded into SQLite every ``TAIL_FOLD`` events, and the periodic
snapshot folds it too. Each part is timed where it runs, by wrapping the journal's own methods
and its SQLite connection's statements (the wrappers cost about 0.1 us a call, so the parts
are a little high), and reported in microseconds a route + feedback pair:

* the calls' commits (``Journal.commit``), and inside them the tail's frames (``Tail.append``,
  ``_frame``) and the folds (``Journal._fold``);
* the events' rows (``Journal._store``), and inside them the payloads' JSON (``_encode``);
* the snapshots (``take_snapshot``) and the policy's archive (``policy_bytes``);
* each SQLite statement the folds and snapshots run (the rows into ``events``, the ids into
  ``refs``, the COMMIT at ``synchronous = FULL``...).

The total is the journaled router's whole pair (the router's own work included): compare it
with ``bench_peers.py --journal-only`` for what the journal adds. The collector is off while
the pairs are timed, so that its collections land in no part.

    python benchmarks/bench_journal_parts.py [--queries 20000] [--k 5]
"""

from __future__ import annotations

import argparse
import collections
import gc
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_peers import Stream, compiled_step_loaded, router_run
from msroute.router import Router, recovery, tail
from msroute.router import journal as journal_module

#: What is timed: (owner, attribute, label), the labels indented under what calls them.
WRAPPED: list[tuple[Any, str, str]] = [
    (journal_module.Journal, "commit", "Journal.commit (a call's commit)"),
    (tail.Tail, "append", "  Tail.append (its frame, written)"),
    (tail, "_frame", "    _frame (the frame built)"),
    (journal_module.Journal, "_fold", "  Journal._fold (every TAIL_FOLD events)"),
    (journal_module.Journal, "_store", "Journal._store (an event's row)"),
    (journal_module, "_encode", "  _encode (its payload's JSON)"),
    (recovery, "take_snapshot", "take_snapshot (every snapshot_every events)"),
    (recovery, "policy_bytes", "  policy_bytes (the policy's archive)"),
]

#: Calls and seconds per part.
Parts = collections.defaultdict[str, list[float]]


def _timed(owner: Any, name: str, label: str, parts: Parts) -> None:
    """Replace ``owner.name`` by a wrapper adding each call's time to ``parts[label]``."""
    fn = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            entry = parts[label]
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    setattr(owner, name, wrapper)


class _Statements:
    """A SQLite connection whose statements are timed by their first words."""

    def __init__(self, db: sqlite3.Connection, parts: Parts) -> None:
        self._db, self._parts = db, parts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def _run(self, call: Callable[[], Any], sql: str) -> Any:
        start = time.perf_counter()
        try:
            return call()
        finally:
            entry = self._parts["sql: " + " ".join(sql.split()[:4])]
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    def execute(self, sql: str, *args: Any) -> Any:
        return self._run(lambda: self._db.execute(sql, *args), sql)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self._run(lambda: self._db.executemany(sql, rows), sql)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    print(f"the live router's compiled step loaded: {compiled_step_loaded()}")
    warm = 2_000
    stream = Stream(args.k, 1, 3, args.queries + warm)
    parts: Parts = collections.defaultdict(lambda: [0, 0.0])
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {**stream.config("omd"), "journal_sync": "normal"}
        router = Router(cfg, journal=Path(tmp) / "j.db")
        run = router_run(router, stream)
        run(0, warm)
        for owner, name, label in WRAPPED:
            _timed(owner, name, label, parts)
        journal = router._journal
        assert isinstance(journal, journal_module.Journal)
        journal._db = _Statements(journal._db, parts)  # type: ignore[assignment]
        gc.disable()
        try:
            start = time.perf_counter()
            run(warm, warm + args.queries)
            total = time.perf_counter() - start
        finally:
            gc.enable()
        router.close()
    n = args.queries
    print(
        f"K = {args.k}, M = 1, 3 contexts, journal_sync = 'normal', {n} pairs: "
        f"{total / n * 1e6:.1f} us a pair in all (TAIL_FOLD {journal_module.TAIL_FOLD}, "
        f"snapshot_every {cfg.get('snapshot_every', 'default')})"
    )
    statements = sorted((k for k in parts if k.startswith("sql: ")), key=lambda k: -parts[k][1])
    for label in [w[2] for w in WRAPPED if w[2] in parts] + statements:
        calls, seconds = parts[label]
        print(
            f"  {label:48s} {int(calls):7d} calls {seconds / calls * 1e6:9.1f} us each "
            f"{seconds / n * 1e6:6.2f} us a pair"
        )


if __name__ == "__main__":
    main()
