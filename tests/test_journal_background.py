"""Folds in the background (``Journal.fold_in_background``, ``msroute.router.folder``).

- A router folding (and syncing, and taking its periodic snapshots) on the folder thread reads,
  reopens and decides exactly as a twin folding on its calls' path.
- Killed by SIGKILL while a syncing job holds the tail moved aside (``<journal>-tail-old``) and
  frames go on to the new tail, it loses nothing acknowledged: opening folds both, the old one
  first, and the state is the twin's bit for bit. A moved-aside tail that the new one does not
  continue is refused.
- A job that fails fails no call: its events stay readable, the tail moved aside stays until a
  later job syncs it, a failed snapshot is tried again.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from _children import acked_until_killed
from msroute.errors import JournalError
from msroute.router import Router
from msroute.router import folder as folder_module
from msroute.router.folder import old_tail_path
from msroute.router.tail import tail_path
from test_journal_tail import CALLS, CONFIG, comparable, play, twin

FAST: dict[str, Any] = {**CONFIG, "snapshot_every": 64}


def timeless(events: Any) -> list[Any]:
    """Events without their clock readings (two routers' calls are not at the same time)."""
    return [
        (seq, kind, ref, {k: v for k, v in payload.items() if k != "deadline"}, probs)
        for seq, kind, ref, _, payload, probs in events
    ]


def background(path: Path, cfg: dict[str, Any] = FAST) -> Router:
    router = Router(cfg, journal=path)
    router.set_fold_every(8, background=True)
    return router


def test_background_folds_read_reopen_and_decide_as_folds_on_the_path(tmp_path: Path) -> None:
    bg = background(tmp_path / "bg.db")
    path_folds = Router(FAST, journal=tmp_path / "on.db")
    path_folds.set_fold_every(8)
    play(bg)
    play(path_folds)
    journal = bg._journal
    journal._drain()  # type: ignore[union-attr]
    assert journal._folded_seq > 0  # type: ignore[union-attr]  # it did fold
    assert timeless(journal.events()) == timeless(path_folds._journal.events())
    for i in (0, 7, CALLS - 1):
        assert timeless(journal.events_of(f"d{i}")) == timeless(
            path_folds._journal.events_of(f"d{i}")
        )
    # A snapshot due while a job is in flight is taken when the next group ends instead.
    taken = [s[0] for s in journal.snapshots()]
    due = [s[0] for s in path_folds._journal.snapshots()]
    assert len(taken) == len(due) == 2 and all(
        0 <= t - d < 16 for t, d in zip(taken, due, strict=True)
    )
    bg.close()
    path_folds.close()
    assert not tail_path(tmp_path / "bg.db").exists()
    assert not old_tail_path(tmp_path / "bg.db").exists()
    reopened = Router.open(tmp_path / "bg.db")
    decides_as_its_twin(reopened)


def decides_as_its_twin(reopened: Router) -> None:
    """A reopened journal's router holds the state of a twin that played the same calls in
    memory and makes the same next decisions (then closed)."""
    live = twin()
    assert comparable(reopened.state()) == comparable(live.state())
    for i in range(CALLS, CALLS + 10):
        a = reopened.route(context="x", decision_id=f"d{i}")
        b = live.route(context="x", decision_id=f"d{i}")
        assert {**a.to_dict(), "deadline": 0} == {**b.to_dict(), "deadline": 0}
    reopened.close()


CHILD = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[2])
from msroute.router import Router, folder
from test_journal_tail import CONFIG, play
held = threading.Event()
if sys.argv[3] == "held":  # the first job that syncs never ends: its tail stays moved aside
    run = folder.run_job
    def run_job(db, job):
        if job.sync:
            held.set()
            time.sleep(600)
        run(db, job)
    folder.run_job = run_job
    from msroute.router import journal
    journal.TAIL_SYNC, journal.TAIL_FOLD = 1, 16
router = Router({**CONFIG, "snapshot_every": 10**6}, journal=sys.argv[1])
router.set_fold_every(16, background=True)
play(router, sys.stdout)
assert held.is_set() or sys.argv[3] != "held"
sys.stdout.write("done\n")
sys.stdout.flush()
time.sleep(60)
"""


@pytest.mark.parametrize("mode", ["held", "plain"])
def test_a_router_killed_while_its_tail_is_moved_aside_loses_nothing(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "j.db"
    acked, _ = acked_until_killed(CHILD, [str(path), str(Path(__file__).parent), mode], "done", 60)
    assert len(acked) == CALLS + CALLS // 2
    if mode == "held":
        assert old_tail_path(path).exists() and tail_path(path).exists()
    reopened = Router.open(path)
    assert not old_tail_path(path).exists() and not tail_path(path).exists()
    decides_as_its_twin(reopened)


def test_a_moved_aside_tail_the_tail_does_not_continue_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    acked_until_killed(CHILD, [str(path), str(Path(__file__).parent), "held"], "done", 60)
    shutil.copy(old_tail_path(path), tail_path(path))  # the same events twice
    with pytest.raises(JournalError, match="moved aside ends at event"):
        Router.open(path)
    assert old_tail_path(path).exists() and tail_path(path).exists()  # both left as they are


def test_a_failed_job_fails_no_call_and_a_later_one_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j.db"
    failing = threading.Event()
    failing.set()
    run = folder_module.run_job

    def run_job(db: sqlite3.Connection, job: folder_module.FoldJob) -> None:
        if failing.is_set():
            raise sqlite3.OperationalError("disk I/O error")
        run(db, job)

    monkeypatch.setattr(folder_module, "run_job", run_job)
    monkeypatch.setattr("msroute.router.journal.TAIL_SYNC", 1)
    monkeypatch.setattr("msroute.router.journal.TAIL_FOLD", 64)
    router = background(path)
    play(router)  # every job fails: no call does
    journal = router._journal
    journal._drain()  # type: ignore[union-attr]
    assert journal._folded_seq == 0  # type: ignore[union-attr]
    assert old_tail_path(path).exists()  # the failed sync left it moved aside
    assert router._snap_retry > 0  # a snapshot's job failed: tried again later
    live = twin()
    assert comparable(router.state()) == comparable(live.state())
    assert len(list(journal.events())) == journal.last_seq
    failing.clear()
    for i in range(CALLS, CALLS + 40):
        router.route(context="x", decision_id=f"d{i}")
        live.route(context="x", decision_id=f"d{i}")
    journal._drain()  # type: ignore[union-attr]
    assert journal._folded_seq > 0  # type: ignore[union-attr]
    assert not old_tail_path(path).exists()  # synced by a later job
    router.close()
    reopened = Router.open(path)
    assert comparable(reopened.state()) == comparable(live.state())
    reopened.close()


def test_a_background_switch_that_is_not_a_bool_is_refused(tmp_path: Path) -> None:
    from msroute.errors import InvalidTypeError

    for router in (Router(FAST), Router(FAST, journal=tmp_path / "j.db")):
        with pytest.raises(InvalidTypeError, match="background == 'no', must be a bool"):
            router.set_fold_every(8, background="no")  # type: ignore[arg-type]
        router.close()
    journal = Router(FAST, journal=tmp_path / "k.db")
    with pytest.raises(InvalidTypeError, match="fold_in_background == 1, must be a bool"):
        journal._journal.fold_in_background = 1  # type: ignore[union-attr]
    assert not journal._journal.fold_in_background  # type: ignore[union-attr]
    journal.close()


def test_a_job_that_committed_but_could_not_sync_counts_as_folded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync of the WAL that fails once, after a job's COMMIT, leaves its rows folded (they
    are in SQLite): later jobs fold the later events, not those rows again (which SQLite
    refuses), one of them syncs and removes the tail moved aside, and the journal reopens as
    the twin."""
    path = tmp_path / "j.db"
    failures = []
    sync = folder_module._sync_wal

    def sync_wal(wal: Path) -> None:
        if not failures:
            failures.append(wal)
            raise OSError(5, "Input/output error")
        sync(wal)

    monkeypatch.setattr(folder_module, "_sync_wal", sync_wal)
    monkeypatch.setattr("msroute.router.journal.TAIL_SYNC", 1)
    monkeypatch.setattr("msroute.router.journal.TAIL_FOLD", 64)
    router = background(path)
    play(router)
    journal = router._journal
    journal._drain()  # type: ignore[union-attr]
    assert failures  # the first sync failed
    live = twin()
    for i in range(CALLS, CALLS + 200):
        router.route(context="x", decision_id=f"d{i}")
        live.route(context="x", decision_id=f"d{i}")
    journal._drain()  # type: ignore[union-attr]
    assert journal.last_seq - journal._folded_seq < 64  # type: ignore[union-attr]
    assert not old_tail_path(path).exists()  # a later job synced and removed it
    assert len(list(journal.events())) == journal.last_seq
    router.close()
    reopened = Router.open(path)
    assert comparable(reopened.state()) == comparable(live.state())
    reopened.close()


@pytest.mark.parametrize("events", [0, -3, 2.5, True, "8", None])
def test_a_fold_every_that_is_not_a_count_is_refused_in_memory_too(
    tmp_path: Path, events: Any
) -> None:
    """``set_fold_every`` checks its count for a router in memory as for one with a file
    (which its journal checks), and changes nothing when it refuses."""
    from msroute.errors import InvalidValueError

    for router in (Router(FAST), Router(FAST, journal=tmp_path / f"j{events!r}.db")):
        with pytest.raises(InvalidValueError, match=r"fold_every == .*, must be an int >= 1"):
            router.set_fold_every(events, background=True)
        assert router._fold_every is None and not router._fold_background
        router.close()
