"""Snapshots are bound to their journal (issue 44; ``msroute.router.snapshots``).

- A snapshot changed with its SHA-256 recomputed (format 2, as anyone can), rewritten in an
  earlier format (1: no checksum), copied from another journal or moved to another event is
  not used: the journal recovers from the snapshot before it, or from the start, and its state
  is the one its events give.
- A journal made before snapshots were bound is opened as before: it gets its key, and the
  snapshots it accepted until then (format 2 whose SHA-256 holds) are bound and used; the
  others are not.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from msroute.router import Router
from msroute.router.snapshots import SNAPSHOT_FORMAT, _digest
from test_journal_audit import CONFIG, _traffic


def _snapshots(db: sqlite3.Connection) -> list[tuple[int, bytes, dict[str, Any]]]:
    rows = db.execute("SELECT seq, policy, router FROM snapshots ORDER BY seq").fetchall()
    return [(int(seq), bytes(policy), json.loads(router)) for seq, policy, router in rows]


def _format_2(st: dict[str, Any], sha: bool = True) -> dict[str, Any]:
    """A format 3 router state as format 2 wrote it: its fields and their SHA-256 (a wrong
    one unless ``sha``)."""
    body = {**{k: v for k, v in st.items() if k != "hmac"}, "format": 2}
    return {**body, "sha256": _digest(body) if sha else "0" * 64}


def _open(path: Path, caplog: pytest.LogCaptureFixture) -> tuple[int, dict[str, Any], str]:
    """The snapshot a reopened journal started from, its state, and what it logged."""
    caplog.clear()
    with caplog.at_level("WARNING", logger="msroute.router"):
        router = Router.open(path)
    used, state = router._snap_seq, router.state()
    router.close()
    return used, state, caplog.text


def _replayed(path: Path) -> dict[str, Any]:
    router = Router.open(path, use_snapshot=False)
    state = router.state()
    router.close()
    return state


@pytest.mark.parametrize(
    "change", ["rehashed", "format 2", "format 1", "another journal's", "another event's"]
)
def test_a_snapshot_not_bound_to_its_journal_and_event_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    path, other = tmp_path / "j.db", tmp_path / "other.db"
    _traffic(path, 25, CONFIG["experts"])
    _traffic(other, 25, CONFIG["experts"])  # the same calls: another journal of the same state
    replayed = _replayed(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        (old, _, _), (seq, policy, st) = _snapshots(db)
        assert st["format"] == SNAPSHOT_FORMAT
        if change == "rehashed":  # a change no other check sees, its SHA-256 recomputed
            st["counters"]["late"] += 1
            st = _format_2(st)
        elif change == "format 2":
            st = _format_2(st)
        elif change == "format 1":
            st = {k: v for k, v in st.items() if k not in ("format", "hmac")}
        elif change == "another journal's":
            with contextlib.closing(sqlite3.connect(other)) as o:
                oseq, policy, st = _snapshots(o)[1]
            assert oseq == seq
        else:  # the older snapshot's state and policy stored as the newer one's
            _, policy, st = _snapshots(db)[0]
        db.execute(
            "UPDATE snapshots SET router = ?, policy = ? WHERE seq = ?",
            (json.dumps(st), policy, seq),
        )
        db.commit()
    used, state, log = _open(path, caplog)
    assert f"snapshot {seq}: not used" in log
    assert "HMAC does not match" in log or "an earlier format is refused" in log
    assert used == old and state == replayed


def test_an_old_journals_snapshots_are_bound_when_it_is_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.db"
    final = _traffic(path, 25, CONFIG["experts"])
    with contextlib.closing(sqlite3.connect(path)) as db:  # as a journal before the binding
        db.execute("DELETE FROM meta WHERE key = 'snapshot_key'")
        (old, _, old_st), (new, _, new_st) = _snapshots(db)
        for seq, st in ((old, _format_2(old_st)), (new, _format_2(new_st))):
            db.execute("UPDATE snapshots SET router = ? WHERE seq = ?", (json.dumps(st), seq))
        db.commit()
    used, state, log = _open(path, caplog)
    assert used == new and state == final and "not used" not in log
    with contextlib.closing(sqlite3.connect(path)) as db:
        key = dict(db.execute("SELECT key, value FROM meta").fetchall())["snapshot_key"]
        assert len(bytes.fromhex(key)) == 32
        assert [st["format"] for _, _, st in _snapshots(db)] == [SNAPSHOT_FORMAT] * 2
        db.execute("DELETE FROM meta WHERE key = 'snapshot_key'")  # again, the newest one
        (_, _, old_st), (_, _, new_st) = _snapshots(db)  # damaged, the older one format 1
        for seq, st in (
            (old, {k: v for k, v in old_st.items() if k not in ("format", "hmac")}),
            (new, _format_2(new_st, sha=False)),
        ):
            db.execute("UPDATE snapshots SET router = ? WHERE seq = ?", (json.dumps(st), seq))
        db.commit()
    used, state, log = _open(path, caplog)  # neither is bound: a replay from the start
    assert used == 0 and state == final
    assert f"snapshot {new}: not used" in log and f"snapshot {old}: not used" in log
