"""The journal's id lookups (``refs``, written in batches) against a scan of the events.

A journal writes the ids of its events to ``refs`` every ``REFS_BATCH`` events and holds the
ids since in memory. Whatever the batch boundary, a lookup by id must return exactly the events
that carry that id, as a scan of ``events`` finds them: after the ids moved to ``refs``, while
they are in memory, after a reopen (the in-memory ids are read back from the events), and after
a commit whose batch failed (it rolls back with its call).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from msroute.errors import JournalError
from msroute.router import Router
from msroute.router import journal as journal_module
from msroute.router.journal import _EVENT_COLUMNS, Journal
from msroute.router.tail import encode_json

BATCH = 5

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 3,
    "snapshot_every": 40,
    "feedback_ttl_s": 3600.0,
    "experts": {"a": [0.03], "b": [0.002], "c": [0.01]},
    "constraints": {"upper": {"usd": 0.04}},
}


@pytest.fixture(autouse=True)
def small_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "REFS_BATCH", BATCH)


def _journal(router: Router) -> Journal:
    journal = router._journal
    assert isinstance(journal, Journal)
    return journal


def assert_lookups_match_a_scan(router: Router) -> None:
    """Every id's events through ``events_of`` = those a scan of ``events`` finds."""
    journal = _journal(router)
    db = journal._db
    refs = [r for (r,) in db.execute("SELECT DISTINCT ref FROM events WHERE ref IS NOT NULL")]
    assert refs
    for ref in [*refs, "never-routed"]:
        scanned = [
            (int(s), k, r, float(t), p, b)
            for s, k, r, t, p, b in db.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE ref = ? ORDER BY seq", (ref,)
            )
        ]
        got = [(s, k, r, t, encode_json(p), b) for s, k, r, t, p, b in journal.events_of(ref)]
        assert got == scanned, ref
    in_memory = len(journal._recent_rows)
    assert in_memory == sum(len(v) for v in journal._recent.values())
    indexed = db.execute("SELECT count(*) FROM refs").fetchone()[0]
    assert (
        indexed + in_memory
        == db.execute("SELECT count(*) FROM events WHERE ref IS NOT NULL").fetchone()[0]
    )


def traffic(router: Router, start: int, count: int) -> None:
    """Decisions with client and generated ids, feedbacks, duplicates, late feedbacks."""
    for i in range(start, start + count):
        d = router.route(decision_id=f"q{i}" if i % 3 else None)
        if i % 4 == 0:
            assert router.feedback(d.decision_id, 0.5) == "applied"
        if i % 8 == 0:
            assert router.feedback(d.decision_id, 0.5) == "duplicate"
        if i % 3 == 1 and i > start:  # a retried request: the same decision back
            assert router.route(decision_id=f"q{i}").decision_id == f"q{i}"


def test_lookups_match_a_scan_across_batches_and_groups(tmp_path: Path) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    for block in range(6):
        traffic(router, 7 * block, 7)
        assert_lookups_match_a_scan(router)
        assert len(_journal(router)._recent_rows) < BATCH + 2  # bounded: one call's events
    with router.group():
        traffic(router, 100, 9)
    assert_lookups_match_a_scan(router)
    assert not _journal(router)._recent_rows or len(_journal(router)._recent_rows) < BATCH
    router.expire(
        now=time.time() + 10_000.0
    )  # every pending decision expires: one event each, in one call
    assert router.feedback("q5", 0.5) == "late"
    assert_lookups_match_a_scan(router)
    router.close()


def test_ids_held_in_memory_are_read_back_when_the_journal_is_opened(tmp_path: Path) -> None:
    """Closing writes nothing more (as a killed process would): the ids after ``refs_upto``
    come back from the events."""
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 0, 9)
    held = list(_journal(router)._recent_rows)
    assert held, "the test needs ids that are still in memory"
    first = router.route(decision_id="last")
    router.close()
    reopened = Router.open(path)
    assert_lookups_match_a_scan(reopened)
    assert [r for r, _ in _journal(reopened)._recent_rows][: len(held)] == [r for r, _ in held]
    assert reopened.route(decision_id="last").draws == first.draws
    assert reopened.feedback("q4", 0.5) == "duplicate"
    assert reopened.feedback("last", 0.5) == "applied"
    assert_lookups_match_a_scan(reopened)
    reopened.close()


class _FailingBatch:
    """A connection whose write of a batch of ids fails, delegating all else."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith("INSERT INTO refs"):
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_failed_batch_fails_its_call_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    journal = _journal(router)
    n = 0
    while len(journal._recent_rows) < BATCH - 1:  # the next event completes a batch
        router.route(decision_id=f"q{n}")
        n += 1
    before, held = router.state(), list(journal._recent_rows)
    real = journal._db
    journal._db = _FailingBatch(real)  # type: ignore[assignment]
    with pytest.raises(JournalError, match="disk is full"):
        router.route(decision_id="fails")
    assert router.state() == before and journal._recent_rows == held
    assert journal.events_of("fails") == []
    journal._db = real
    router.route(decision_id="next")
    assert journal._recent_rows == []  # the batch went through with this call
    assert_lookups_match_a_scan(router)
    router.close()
