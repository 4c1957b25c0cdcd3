"""Durability of every write path: a failed write or commit fails its calls and leaves nothing.

- A real full filesystem (a small tmpfs, mounted by the test where it can be; skipped with the
  reason otherwise): single calls and groups that cannot be written raise ``JournalError``, the
  in-memory state stays the journal's, and once space is freed the router goes on by itself. A
  child process is killed by SIGKILL after its disk filled up; the reopened journal holds
  exactly the calls the child saw acknowledged.
- Injected failures: a write inside a group fails (every call of the group then fails, the
  group raises, nothing is in memory or on disk); a snapshot fails after its event committed
  (the call succeeds, the event is durable, the snapshot is tried again later); a router that
  cannot read its journal back is reopened in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _children import acked_until_killed
from msroute.errors import JournalError, MSRouteError
from msroute.router import Router
from msroute.router.snapshots import SNAPSHOT_RETRY_EVENTS

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 5,
    "snapshot_every": 25,
    "experts": {"a": [0.03], "b": [0.002], "c": [0.01]},
    "constraints": {"upper": {"usd": 0.04}},
}

#: How a full disk shows in an error: SQLite's message, or the tail's write's (OSError ENOSPC).
DISK_FULL = "full|No space left"

#: The filesystem's size: a journal of a few hundred events fits, a filler takes the rest.
FS_SIZE = "4m"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A directory on its own small tmpfs, unmounted afterwards."""
    where = tmp_path / "fs"
    where.mkdir()
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs Linux and root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=10, check=False)


def fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` with one file until the disk is full."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 512)
    return filler


def decision_ids(path: Path) -> list[str]:
    """The decision ids of a closed journal, in order."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT ref FROM events WHERE kind = 'decision' ORDER BY seq")
        return [ref for (ref,) in rows]


# ---------------------------------------------------------------------- a real full disk
@pytest.mark.parametrize("sync", ["full", "normal"])
def test_a_full_disk_fails_calls_and_groups_and_changes_nothing(small_fs: Path, sync: str) -> None:
    """At "normal" the events go to the journal's tail (msroute.router.tail): a frame that
    does not fit is cut back, and the same guarantees hold."""
    path = small_fs / "j.db"
    router = Router({**CONFIG, "journal_sync": sync}, journal=path)
    acked = [router.route(decision_id=f"q{i}").decision_id for i in range(50)]
    filler = fill(small_fs)
    failed = 0
    for i in range(3000):  # the WAL's free pages are used first; then a write fails
        before = router.state()
        try:
            with router.group():
                for j in range(8):
                    router.route(decision_id=f"g{i}-{j}")
        except JournalError as exc:
            assert re.search(DISK_FULL, str(exc))
            assert router.state() == before  # nothing of the group is in memory
            assert not router.writable
            failed += 1
            break
        acked += [f"g{i}-{j}" for j in range(8)]
    assert failed == 1, "the disk never filled up"
    before = router.state()
    with pytest.raises(JournalError, match=DISK_FULL):
        router.route(decision_id="single")
    assert router.state() == before and not router.writable
    filler.unlink()  # space again: the router goes on without being reopened
    assert router.route(decision_id="after").decision_id == "after"
    assert router.writable and router.failure is None
    acked.append("after")
    router.close()
    assert decision_ids(path) == acked
    Router.open(path).close()  # and it replays


CHILD = r"""
import sys
from pathlib import Path
from msroute.errors import JournalError
from msroute.router import Router
sys.path.insert(0, sys.argv[3])
from test_journal_durability import CONFIG, fill
router = Router({**CONFIG, "journal_sync": sys.argv[4]}, journal=sys.argv[1])
out = sys.stdout
for i in range(30):
    router.route(decision_id=f"q{i}")
    out.write(f"ack q{i}\n")
out.flush()
fill(Path(sys.argv[2]))
failures = 0
for i in range(3000):
    try:
        with router.group():
            ids = [router.route(decision_id=f"g{i}-{j}").decision_id for j in range(8)]
            router.feedback(ids[0], 0.5)
    except JournalError:
        failures += 1
        if failures == 3:
            break
        continue
    out.write("".join(f"ack {d}\n" for d in ids))
    out.flush()
out.write(f"failures {failures}\n")
out.flush()
import time
time.sleep(60)
"""


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_killed_after_a_full_disk_the_journal_holds_exactly_what_was_acknowledged(
    small_fs: Path, sync: str
) -> None:
    path = small_fs / "j.db"
    here = str(Path(__file__).parent)
    acked, last = acked_until_killed(CHILD, [str(path), str(small_fs), here, sync], "failures", 120)
    assert last == "failures 3"
    (small_fs / "filler").unlink()
    tail = small_fs / "j.db-tail"
    assert tail.exists() == (sync == "normal")  # a killed router folds nothing
    reopened = Router.open(path)  # folds the tail into the file
    assert reopened.state()["decisions"] == len(acked)
    reopened.close()
    assert not tail.exists()
    assert decision_ids(path) == acked


def test_a_tail_that_cannot_be_folded_on_a_full_disk_names_the_disk(small_fs: Path) -> None:
    """Issue 44: folding a killed router's tail on a full disk was reported as "cannot
    rollback - no transaction is active" (SQLite had rolled back by itself). The open names
    the full disk and leaves the tail; once space is freed it folds every acknowledged call."""
    from test_journal_tail import killed

    path, acked = killed(small_fs)
    tail = small_fs / "j.db-tail"
    assert tail.exists()
    filler = fill(small_fs)
    with pytest.raises(JournalError, match=f"cannot fold the journal's tail: .*({DISK_FULL})"):
        Router.open(path)
    assert tail.exists()
    filler.unlink()
    reopened = Router.open(path)
    assert reopened.state()["decisions"] == sum(a.startswith("d") for a in acked)
    reopened.close()
    assert not tail.exists()


# ---------------------------------------------------------------------- injected failures
class _FailingInserts:
    """A connection whose event inserts fail once ``armed`` is set, delegating all else."""

    def __init__(self, db: sqlite3.Connection, after: int) -> None:
        self._db = db
        self.left = after

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith("INSERT INTO events"):
            if self.left <= 0:
                raise sqlite3.OperationalError("database or disk is full")
            self.left -= 1
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_failed_write_inside_a_group_fails_every_call_of_it(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    twin = Router(CONFIG)
    for r in (router, twin):
        for i in range(10):
            r.route(decision_id=f"q{i}")
    before = router.state()
    real = router._journal._db  # type: ignore[union-attr]
    router._journal._db = _FailingInserts(real, after=2)  # type: ignore[union-attr]
    answered: list[str] = []
    errors: list[BaseException] = []
    with pytest.raises(JournalError, match="rolled back: a write failed"), router.group():
        for j in range(5):  # as the service's owner runs a group: each call on its own
            try:
                answered.append(router.route(decision_id=f"g{j}").decision_id)
            except JournalError as exc:
                errors.append(exc)
    assert answered == ["g0", "g1"]  # answered inside the group, but the group raised
    assert "disk is full" in str(errors[0])
    assert all("an earlier write of this group failed" in str(e) for e in errors[1:])
    assert len(errors) == 3
    assert router.state() == before and not router.writable
    router._journal._db = real  # type: ignore[union-attr]
    for r in (router, twin):
        r.route(decision_id="next")
    assert router.state()["q"] == twin.state()["q"]
    assert router.writable
    router.close()
    assert decision_ids(path) == [*(f"q{i}" for i in range(10)), "next"]


def test_a_failed_snapshot_fails_no_call_and_is_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.db"
    router = Router({**CONFIG, "snapshot_every": 10}, journal=path)
    journal = router._journal
    real_put = journal.put_snapshot
    broken = [True]

    def put_snapshot(*args: Any, **kwargs: Any) -> None:
        if broken[0]:
            raise sqlite3.OperationalError("database or disk is full")
        real_put(*args, **kwargs)

    journal.put_snapshot = put_snapshot  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="msroute.router"):
        for i in range(15):  # a snapshot is due at event 10: it fails, the calls do not
            assert router.route(decision_id=f"q{i}").decision_id == f"q{i}"
    assert "cannot store a snapshot" in caplog.text and "retried later" in caplog.text
    assert router.writable  # the events are durable: the router is healthy
    assert router._snap_seq == 0
    broken[0] = False
    for i in range(15, 15 + SNAPSHOT_RETRY_EVENTS):
        router.route(decision_id=f"q{i}")
    assert router._snap_seq > 10  # tried again, and stored
    with pytest.raises(JournalError, match="cannot store a snapshot"):
        broken[0] = True
        router.snapshot()  # an explicit snapshot says so, and changes nothing else
    assert router.writable
    router.close()
    ids = decision_ids(path)
    assert ids == [f"q{i}" for i in range(15 + SNAPSHOT_RETRY_EVENTS)]
    reopened = Router.open(path)
    assert reopened.feedback("q3", 0.5) == "applied"  # the event of the failed snapshot is there
    reopened.close()


def test_a_router_that_cannot_read_its_journal_back_is_reopened_in_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    for i in range(30):
        router.route(decision_id=f"q{i}")
    before = router.state()
    real = router._journal._db  # type: ignore[union-attr]
    router._journal._db = _FailingInserts(real, after=0)  # type: ignore[union-attr]
    router._journal.events = _unreadable  # type: ignore[method-assign]  # the reload fails too
    with pytest.raises(JournalError, match="disk is full"):
        router.route(decision_id="lost")
    assert router.needs_reopen and not router.writable
    with pytest.raises(JournalError, match=r"could not read it back.*Router\.reopen\(\)"):
        router.route(decision_id="refused")
    router.reopen()  # a fresh connection: the disk works again
    assert router.writable and not router.needs_reopen
    assert {k: v for k, v in router.state().items()} == before
    assert router.route(decision_id="q30").decision_id == "q30"
    router.close()
    assert decision_ids(path) == [f"q{i}" for i in range(31)]


def _unreadable(*args: Any, **kwargs: Any) -> Iterator[Any]:
    raise sqlite3.OperationalError("disk I/O error")
    yield  # pragma: no cover


# ---------------------------------------------------------------------- the service's owner
def test_the_owner_fails_a_whole_group_on_a_full_disk_and_recovers(small_fs: Path) -> None:
    """Through the service's owner (every call in a group): a group that cannot be written
    fails every one of its calls with JournalError, ``writable`` says so, and once space is
    freed ``recover()`` makes the router healthy again without waiting for traffic."""
    from msroute.service.owner import RouterOwner

    path = small_fs / "j.db"
    acked: list[str] = []

    async def main() -> None:
        owner = RouterOwner("t", lambda: Router(CONFIG, journal=path))
        await owner.start()
        try:

            def route(did: str) -> Any:
                return owner.call(lambda r: r.route(decision_id=did).decision_id)

            acked.extend(await asyncio.gather(*(route(f"q{i}") for i in range(20))))
            assert owner.writable and owner.failure is None
            filler = fill(small_fs)
            for i in range(3000):
                out = await asyncio.gather(
                    *(route(f"g{i}-{j}") for j in range(8)), return_exceptions=True
                )
                if any(isinstance(o, BaseException) for o in out):
                    assert all(isinstance(o, JournalError) for o in out), out
                    break
                acked.extend(out)
            else:
                pytest.fail("the disk never filled up")
            assert not owner.writable and "full" in (owner.failure or "")
            filler.unlink()
            assert await owner.recover()  # a probe write: healthy again, no traffic needed
            assert owner.writable and owner.failure is None
            acked.append(await route("after"))
        finally:
            await owner.stop()

    asyncio.run(main())
    assert decision_ids(path) == acked


class _FailingWrites:
    """A connection whose writes (INSERT and COMMIT) fail while ``broken`` is set."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.broken = True

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self.broken and (sql.startswith("INSERT") or sql == "COMMIT"):
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_probe_reports_a_recovered_disk_without_traffic(tmp_path: Path) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    assert router.probe() and router.writable
    real = router._journal._db  # type: ignore[union-attr]
    failing = _FailingWrites(real)
    router._journal._db = failing  # type: ignore[union-attr]
    with pytest.raises(JournalError):
        router.route(decision_id="lost")
    assert not router.writable
    assert not router.probe() and not router.writable  # still failing: it says so
    failing.broken = False
    assert router.probe() and router.writable and router.failure is None
    with router.group(), pytest.raises(MSRouteError, match="between groups"):
        router.probe()
    router._journal._db = real  # type: ignore[union-attr]
    router.close()
    assert not router.probe()
    assert decision_ids(tmp_path / "j.db") == []


def test_a_journal_cannot_be_created_on_a_full_disk(small_fs: Path) -> None:
    filler = fill(small_fs)
    with pytest.raises(JournalError, match=r"j\.db"):
        Router(CONFIG, journal=small_fs / "j.db")
    filler.unlink()
    (small_fs / "j.db").unlink(missing_ok=True)
    Router(CONFIG, journal=small_fs / "j.db").close()  # space again: it can


class _FailingReads:
    """A connection whose SELECTs fail (an I/O error while reading), delegating all else."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.lstrip().startswith("SELECT"):
            raise sqlite3.OperationalError("disk I/O error")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_failed_read_is_a_journal_error(tmp_path: Path) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    d = router.route(decision_id="a")
    assert router.feedback(d.decision_id, 0.5) == "applied"
    real = router._journal._db  # type: ignore[union-attr]
    router._journal._db = _FailingReads(real)  # type: ignore[union-attr]
    with pytest.raises(JournalError, match="cannot read the journal: disk I/O error"):
        router.feedback("a", 0.5)  # a repeated feedback reads the journal back
    with pytest.raises(JournalError, match="cannot read the journal"):
        router.decisions_since(0)
    router._journal._db = real  # type: ignore[union-attr]
    router.close()
