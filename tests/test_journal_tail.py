"""The journal's tail at ``journal_sync = "normal"`` (``msroute.router.tail``).

- A router killed by SIGKILL leaves its last events in the tail; opening the journal folds them
  in: every acknowledged call is there, and the state is the one of a twin router that saw the
  same calls, bit for bit. A torn last frame (the write the process died in) is dropped, and
  nothing else: cut at every byte, a tail gives the frames before the cut; a tail already folded
  before the kill is not folded twice; a tail of format 2 is still read.
- A tail that does not continue the journal, does not match it, is not a tail, holds a
  malformed frame or any flipped bit (its lengths' included) is refused with ``JournalError``,
  and so is a stale tail under a new journal.
- A failed or short write cuts the tail back: the call fails, nothing changes, the next call
  works. A failed fold fails no call and is tried again. A transaction that cannot start
  (BEGIN fails, or the tail is at its limit) gives no event number twice.
- Reads (``events``, ``events_of``) see the unfolded events exactly as they read after a fold;
  switching ``journal_sync`` folds; closing folds and removes the tail.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import sqlite3
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _children import acked_until_killed
from msroute.cli import main
from msroute.errors import InvalidValueError, JournalError
from msroute.router import Router
from msroute.router import journal as journal_module
from msroute.router import tail as tail_module
from msroute.router.journal import Journal
from msroute.router.tail import MAGIC, Tail, header, read_tail, tail_path

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 11,
    "journal_sync": "normal",
    "snapshot_every": 10**6,  # no snapshot: every event stays in the tail until a fold
    "contexts": ["x", "y"],
    "experts": {"a": [0.03], "b": [0.002], "c": [0.01]},
    "constraints": {"upper": {"usd": 0.04}},
}

#: Calls of the child and of its twin: route d<i> (context by parity, every fifth masked),
#: feedback on every other decision, an expert added halfway.
CALLS = 120


def play(router: Router, out: Any = None) -> None:
    """The calls (``out``: where to print each acknowledged one)."""
    for i in range(CALLS):
        eligible = ["a", "b"] if i % 5 == 0 else None
        d = router.route(context="xy"[i % 2], eligible=eligible, decision_id=f"d{i}")
        if out is not None:
            out.write(f"ack d{i}\n")
        if i % 2:
            router.feedback(d.decision_id, 0.25 * (i % 4), {"usd": 0.01})
            if out is not None:
                out.write(f"ack f{i}\n")
        if i == CALLS // 2:
            router.add_expert("e", [0.005])
        if out is not None:
            out.flush()


CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
from msroute.router import Router
from msroute.router import tail
from test_journal_tail import CONFIG, play
if sys.argv[3] == "no-empty":  # die as if between a fold's COMMIT and the tail's emptying
    tail.Tail.empty = lambda self: None
    from msroute.router import journal
    journal.TAIL_FOLD = 50
router = Router(CONFIG, journal=sys.argv[1])
play(router, sys.stdout)
sys.stdout.write("done\n")
sys.stdout.flush()
time.sleep(60)
"""


def killed(directory: Path, mode: str = "plain") -> tuple[Path, list[str]]:
    """A journal whose router was killed by SIGKILL after ``play``: its path and the
    acknowledged calls."""
    path = directory / "j.db"
    acked, _ = acked_until_killed(CHILD, [str(path), str(Path(__file__).parent), mode], "done", 60)
    return path, acked


@pytest.fixture(scope="module")
def dead(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """One killed router's files, copied by each test that changes them (``copy``)."""
    return killed(tmp_path_factory.mktemp("dead"))


def copy(dead: tuple[Path, list[str]], to: Path) -> Path:
    """A copy of the killed router's journal files (the database, SQLite's WAL, the tail)."""
    src = dead[0]
    for f in src.parent.iterdir():
        if f.name.startswith(src.name):
            shutil.copy(f, to / f.name)
    return to / src.name


def twin() -> Router:
    router = Router({k: v for k, v in CONFIG.items() if k != "journal_sync"})
    play(router)
    return router


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "seq"}


def run_id(path: Path) -> str:
    """The run id of a closed (or killed) router's journal."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return str(db.execute("SELECT value FROM meta WHERE key = 'run_id'").fetchone()[0])


def raw_events(path: Path) -> int:
    """How many events the SQLite file holds (read by a connection of its own)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT count(*) FROM events").fetchone()[0])


# ---------------------------------------------------------------------- a killed router
def test_a_killed_router_loses_nothing_acknowledged(
    dead: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path = copy(dead, tmp_path)
    acked = dead[1]
    assert len(acked) == CALLS + CALLS // 2
    rows, torn = read_tail(tail_path(path), run_id(path))
    assert torn == 0 and len(rows) == len(acked) + 1  # and the expert's addition
    assert raw_events(path) == 0  # no fold ran: every event is in the tail only
    reopened = Router.open(path)
    assert not tail_path(path).exists()
    live = twin()
    assert comparable(reopened.state()) == comparable(live.state())
    for i in range(CALLS, CALLS + 20):  # and it goes on as the twin does
        a = reopened.route(context="x", decision_id=f"d{i}")
        b = live.route(context="x", decision_id=f"d{i}")
        assert {**a.to_dict(), "deadline": 0} == {**b.to_dict(), "deadline": 0}
    reopened.close()
    assert raw_events(path) == len(acked) + 1 + 20


def test_the_command_line_reads_a_killed_routers_tail(
    dead: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy(dead, tmp_path)
    assert main(["journal", "export", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    decided = [r["decision_id"] for r in rows if r["kind"] == "decision"]
    assert decided == [a for a in dead[1] if a.startswith("d")]
    assert not tail_path(path).exists()  # folded into the file on the way
    assert main(["journal", "replay", str(path)]) == 0


def test_a_torn_last_frame_is_dropped_with_a_warning(
    dead: tuple[Path, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = copy(dead, tmp_path)
    tail = tail_path(path)
    rows, _ = read_tail(tail, run_id(path))
    with tail.open("r+b") as f:  # the last frame (the last feedback) loses its last 3 bytes
        f.truncate(tail.stat().st_size - 3)
    with caplog.at_level(logging.WARNING, logger="msroute.router"):
        reopened = Router.open(path)
    assert "unfinished write" in caplog.text
    assert reopened._journal.last_seq == rows[-1][0] - 1
    last = rows[-1]
    assert last[1] == "feedback"
    assert reopened.feedback(str(last[2]), 0.25 * 3, {"usd": 0.01}) == "applied"  # as if unsent
    reopened.close()


def test_a_tail_folded_before_the_kill_is_not_folded_twice(tmp_path: Path) -> None:
    path, acked = killed(tmp_path, "no-empty")
    rows, _ = read_tail(tail_path(path), run_id(path))
    folded = raw_events(path)
    assert folded > 0 and rows[0][0] <= folded  # the tail still holds folded events
    reopened = Router.open(path)
    assert comparable(reopened.state()) == comparable(twin().state())
    reopened.close()
    assert raw_events(path) == len(acked) + 1


def sealed(body: bytes) -> bytes:
    """A frame of format 3 holding ``body`` (its checksums computed)."""
    lengths = struct.pack("<II", len(body), zlib.crc32(body))
    return lengths + struct.pack("<I", zlib.crc32(lengths)) + body


def frame_starts(data: bytes, head: int) -> list[int]:
    """Where each frame of a format 3 tail starts (``head``: its header's length)."""
    starts, pos = [], head
    while pos < len(data):
        starts.append(pos)
        pos += 12 + int.from_bytes(data[pos : pos + 4], "little")
    return starts


def _write_tail(path: Path, rows: list[Any], run_id: str) -> None:
    path.unlink(missing_ok=True)
    t = Tail(path, run_id)
    t.append(rows)
    t.close(remove=False)


def test_a_tail_that_does_not_continue_or_match_the_journal_is_refused(
    dead: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path = copy(dead, tmp_path)
    tail = tail_path(path)
    rows, _ = read_tail(tail, run_id(path))
    _write_tail(tail, [(r[0] + 5, *r[1:]) for r in rows], run_id(path))
    with pytest.raises(JournalError, match="starts at event 6 but the journal ends at event 0"):
        Router.open(path)
    _write_tail(tail, rows[:10], run_id(path))
    Journal(path, create=False).close()  # fold the first ten events, then a tail that differs
    _write_tail(tail, [(r[0], r[1], "other", *r[3:]) for r in rows[:12]], run_id(path))
    with pytest.raises(JournalError, match="does not match the journal's events 1-10"):
        Router.open(path)
    assert tail.exists()  # refused, left for the operator


def test_what_is_not_a_tail_is_refused(dead: tuple[Path, list[str]], tmp_path: Path) -> None:
    path = copy(dead, tmp_path)
    tail = tail_path(path)
    good = tail.read_bytes()
    tail.write_bytes(b"SQLite format 3\x00")
    with pytest.raises(JournalError, match="not a journal tail"):
        Router.open(path)
    head = len(header(run_id(path)))
    size = int.from_bytes(good[head : head + 4], "little")
    body = bytearray(good[head + 12 : head + 12 + size])
    body[8 * 3 : 8 * 3 + 4] = (10**6).to_bytes(4, "little")  # kind's length
    tail.write_bytes(good[:head] + sealed(bytes(body)))  # its checksums hold: not unfinished
    with pytest.raises(JournalError, match="malformed frame"):
        Router.open(path)
    for cut in (5, len(MAGIC) + 1, head - 1):  # the process died creating it: nothing to fold
        tail.write_bytes(good[:cut])
        Router.open(path).close()
        assert raw_events(path) == 0 and not tail.exists()
    stale = tmp_path / "new.db"
    tail_path(stale).write_bytes(good)
    with pytest.raises(JournalError, match="tail of an earlier journal is in the way"):
        Router(CONFIG, journal=stale)


def test_the_tail_of_another_journal_is_refused(
    dead: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """A tail names its journal: one copied next to another journal whose events it would
    continue (both end at event 0 here) is refused, and both files stay as they are."""
    other = tmp_path / "other.db"
    Router(CONFIG, journal=other).close()
    shutil.copy(tail_path(dead[0]), tail_path(other))
    with pytest.raises(JournalError, match="the tail of another journal"):
        Router.open(other)
    assert main(["journal", "export", str(other)]) != 0
    assert tail_path(other).exists() and raw_events(other) == 0


def test_a_damaged_frame_is_refused_not_dropped(
    dead: tuple[Path, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a frame the file ends inside can be an unfinished write: a whole frame that fails
    its checksum is damage, the last one too, and opening refuses the tail (its acknowledged
    events are not dropped); zero bytes after the last whole frame (a size that reached the
    disk before its data) are dropped with a warning."""
    path = copy(dead, tmp_path)
    tail = tail_path(path)
    good = tail.read_bytes()
    for where in (len(header(run_id(path))) + 12 + 2, len(good) - 1):  # first frame, last one
        body = bytearray(good)
        body[where] ^= 1
        tail.write_bytes(bytes(body))
        with pytest.raises(JournalError, match=r"fails its checksum \(\d+ bytes follow it\)"):
            Router.open(path)
        assert tail.exists() and raw_events(path) == 0
    tail.write_bytes(good + bytes(100))
    with caplog.at_level(logging.WARNING, logger="msroute.router"):
        reopened = Router.open(path)
    assert "100 bytes of an unfinished write" in caplog.text
    assert reopened._journal.last_seq == len(dead[1]) + 1  # every acknowledged event
    reopened.close()


def _killed_in_process(path: Path, decisions: int) -> Path:
    """A journal at "normal" of ``decisions`` decisions (one frame each) whose router stopped
    as a killed process does; its tail."""
    router = Router(CONFIG, journal=path)
    for i in range(decisions):
        router.route(context="xy"[i % 2], decision_id=f"q{i}")
    _crash(router)
    return tail_path(path)


def test_a_flipped_bit_in_a_length_is_refused_not_read_as_an_unfinished_write(
    tmp_path: Path,
) -> None:
    """Issue 44: a flipped bit in the length of a frame (or of the header's run id) made the
    tail look cut short there: every later frame was dropped (40 acknowledged decisions came
    back as 13). Each bit of the header's and of every frame's lengths and checksums is
    flipped in turn: opening refuses the tail, and leaves both files as they were."""
    path = tmp_path / "j.db"
    tail = _killed_in_process(path, 40)
    good = tail.read_bytes()
    head = len(header(run_id(path)))
    starts = frame_starts(good, head)
    assert len(starts) == 40
    id_length = len(MAGIC)
    for pos in [id_length, id_length + 1, *range(head - 4, head), *starts[13:14]]:
        for byte in range(pos, pos + (12 if pos in starts else 1)):
            for bit in range(8):
                body = bytearray(good)
                body[byte] ^= 1 << bit
                tail.write_bytes(bytes(body))
                with pytest.raises(JournalError, match="the tail is damaged"):
                    Router.open(path)
                assert raw_events(path) == 0
    tail.write_bytes(good)
    reopened = Router.open(path)
    assert reopened.state()["decisions"] == 40
    reopened.close()


def test_every_flipped_bit_of_a_tail_is_refused(tmp_path: Path) -> None:
    """Every bit of the header and of the frames' lengths and checksums, and one bit of every
    other byte, flipped alone: the tail is refused (``read_tail`` raises), never read with
    fewer events."""
    path = tmp_path / "j.db"
    tail = _killed_in_process(path, 3)
    owner = run_id(path)
    good = tail.read_bytes()
    rows, torn = read_tail(tail, owner)
    assert len(rows) == 3 and torn == 0
    head = len(header(owner))
    lengths = {s + i for s in frame_starts(good, head) for i in range(12)}
    for byte in range(len(good)):
        for bit in range(8) if byte < head or byte in lengths else [byte % 8]:
            body = bytearray(good)
            body[byte] ^= 1 << bit
            tail.write_bytes(bytes(body))
            with pytest.raises(JournalError):
                read_tail(tail, owner)


def test_a_cut_short_tail_drops_only_its_unfinished_last_frame(tmp_path: Path) -> None:
    """Cut at every byte, a tail gives the frames that end before the cut: the header cut short
    gives none (the process died creating it), and a frame cut short, at its header or in its
    body, is the one write that was never acknowledged."""
    path = tmp_path / "j.db"
    tail = _killed_in_process(path, 3)
    owner = run_id(path)
    good = tail.read_bytes()
    head = len(header(owner))
    ends = [*frame_starts(good, head)[1:], len(good)]
    for cut in range(len(good) + 1):
        tail.write_bytes(good[:cut])
        rows, torn = read_tail(tail, owner)
        whole = [end for end in ends if end <= cut]
        assert [r[2] for r in rows] == [f"q{i}" for i in range(len(whole))], cut
        assert torn == (cut if cut < head else cut - max([head, *whole])), cut


def test_a_tail_of_format_2_is_still_read(tmp_path: Path) -> None:
    """A tail an earlier msroute left (format 2: no checksum of its header or lengths) is
    folded as before."""
    path = tmp_path / "j.db"
    tail = _killed_in_process(path, 5)
    owner = run_id(path)
    good = tail.read_bytes()
    ident = owner.encode()
    old = bytearray(tail_module.MAGIC_2 + struct.pack("<H", len(ident)) + ident)
    for start in frame_starts(good, len(header(owner))):
        size = int.from_bytes(good[start : start + 4], "little")
        old += good[start : start + 8] + good[start + 12 : start + 12 + size]
    tail.write_bytes(bytes(old))
    reopened = Router.open(path)
    assert [e["ref"] for e in reopened.decisions_since()] == [f"q{i}" for i in range(5)]
    reopened.close()
    assert not tail.exists()


# ---------------------------------------------------------------------- failures in process
@pytest.mark.parametrize("how", ["raises", "short"])
def test_a_failed_write_of_the_tail_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    for i in range(10):
        router.route(context="x", decision_id=f"q{i}")
    tail = tail_path(path)
    size, before = tail.stat().st_size, router.state()
    real = os.write

    def broken(fd: int, data: bytes) -> int:
        if how == "raises":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data[: len(data) // 2])  # half of it reaches the file

    monkeypatch.setattr(tail_module.os, "write", broken)
    with pytest.raises(JournalError, match=r"No space left|short write"):
        router.route(context="x", decision_id="lost")
    with pytest.raises(JournalError), router.group():
        router.route(context="y", decision_id="lost-too")
    assert tail.stat().st_size == size  # cut back to its last whole frame
    assert router.state() == before and not router.writable
    monkeypatch.setattr(tail_module.os, "write", real)
    assert router.route(context="x", decision_id="next").decision_id == "next"
    assert router.writable
    router._journal._tail.close(remove=False)  # type: ignore[union-attr]  # as if killed
    rows, torn = read_tail(tail, router._journal.run_id)
    assert torn == 0 and [r[2] for r in rows] == [*(f"q{i}" for i in range(10)), "next"]


def test_a_failed_fold_fails_no_call_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(journal_module, "TAIL_FOLD", 16)
    router = Router(CONFIG, journal=tmp_path / "j.db")
    journal = router._journal
    assert isinstance(journal, Journal)
    real = journal._db

    journal._db = _FoldFails(real)  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="msroute.router"):
        first = [router.route(context="x", decision_id=f"q{i}") for i in range(20)]
    assert "cannot fold the tail (retried later)" in caplog.text
    assert router.writable and journal._folded_seq == 0 and len(journal._unfolded) == 20
    assert router.route(context="x", decision_id="q3").to_dict() == first[3].to_dict()
    journal._db = real
    for i in range(20, 24):
        router.route(context="x", decision_id=f"q{i}")
    assert journal._folded_seq == 22 and len(journal._unfolded) == 2  # tried again at 16 + 2 + 4
    router.close()
    assert raw_events(tmp_path / "j.db") == 24


# ---------------------------------------------------------------------- reads and switches
@pytest.fixture
def small_folds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(journal_module, "TAIL_FOLD", 40)
    yield


def test_reads_of_unfolded_events_are_those_after_the_fold(
    tmp_path: Path, small_folds: None
) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    play(router)
    journal = router._journal
    assert isinstance(journal, Journal)
    assert 0 < journal._folded_seq < journal.last_seq  # some events folded, some not
    live = list(journal.events())
    windows = [
        list(journal.events(after, limit))
        for after in (0, 30, 39, 40, 41, 170)
        for limit in (1, 7, None)
    ]
    ids = {f"d{i}": journal.events_of(f"d{i}") for i in range(0, CALLS, 7)}
    assert any(e[5] is not None for e in live[journal._folded_seq :])  # distributions resolved
    router.close()
    closed = Journal(path, create=False)
    assert list(closed.events()) == live
    assert windows == [
        list(closed.events(after, limit))
        for after in (0, 30, 39, 40, 41, 170)
        for limit in (1, 7, None)
    ]
    assert ids == {ref: closed.events_of(ref) for ref in ids}
    closed.close()


def test_switching_journal_sync_folds_and_closing_removes_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    for i in range(5):
        router.route(context="x", decision_id=f"q{i}")
    journal = router._journal
    assert isinstance(journal, Journal) and len(journal._unfolded) == 5
    router.reconfigure({**CONFIG, "journal_sync": "full"})
    # The change records the configuration it applied (a meta entry): a SQLite transaction.
    assert journal._unfolded == [] and not journal._tail.holds_rows
    router.route(context="x", decision_id="q5")
    assert journal._unfolded == [] and not journal._tail.holds_rows  # folded, SQLite from now on
    router.reconfigure({**CONFIG, "journal_sync": "normal"})
    router.route(context="x", decision_id="q6")
    assert len(journal._unfolded) == 1 and journal._tail.holds_rows
    router.close()
    assert not tail_path(path).exists()
    assert raw_events(path) == journal.last_seq


@pytest.mark.parametrize("to", ["full", "normal"])
def test_a_reopened_router_keeps_the_journal_sync_it_was_switched_to(
    tmp_path: Path, to: str
) -> None:
    """A switch of ``journal_sync`` held in a snapshot (not in the events replayed after it)
    is the durability of the reopened router, by ``Router.open`` and by ``reopen()``."""
    path = tmp_path / "j.db"
    start = "normal" if to == "full" else "full"
    router = Router({**CONFIG, "journal_sync": start}, journal=path)
    router.reconfigure({**CONFIG, "journal_sync": to})
    router.route(context="x", decision_id="q0")
    router.snapshot()
    router.close()
    router = Router.open(path)
    journal = router._journal
    assert isinstance(journal, Journal)
    for again in range(2):
        assert router.config.journal_sync == journal._sync == to
        router.route(context="x", decision_id=f"q{again + 1}")
        assert journal._tail.holds_rows == (to == "normal")  # at "full" nothing waits in it
        router.reopen()
        journal = router._journal
        assert isinstance(journal, Journal)
    router.close()


def test_the_tail_folds_by_bytes_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large distributions (a large K, masked decisions) fold before TAIL_FOLD events, and a
    failed write takes its rows' bytes back off the count."""
    monkeypatch.setattr(journal_module, "TAIL_FOLD_BYTES", 4000)
    router = Router(CONFIG, journal=tmp_path / "j.db")
    journal = router._journal
    assert isinstance(journal, Journal)

    def held() -> int:
        return sum(len(r[4]) + len(r[5] or b"") for r in journal._unfolded)

    sizes = []
    for i in range(40):
        router.route(context="x", eligible=["a", "b"], decision_id=f"q{i}")  # no shared rows
        sizes.append(journal._unfolded_bytes)
        assert journal._unfolded_bytes == held()
    assert journal._folded_seq > 0 and max(sizes) < 4000 + 400  # folded by bytes, often
    assert journal.last_seq - journal._folded_seq < 40

    def failing(fd: int, data: bytes) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(tail_module.os, "write", failing)
    before = journal._unfolded_bytes
    with pytest.raises(JournalError):
        router.route(context="x", eligible=["a", "b"], decision_id="lost")
    assert journal._unfolded_bytes == before == held()
    monkeypatch.undo()
    router.close()


# ---------------------------------------------------------------------- random faults
class _FoldFails:
    """The journal's connection with every write of events failing (a fold cannot write)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("INSERT INTO events"):
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def _crash(router: Router) -> None:
    """Stop a router as a killed process would: nothing folded, nothing flushed by msroute."""
    journal = router._journal
    assert isinstance(journal, Journal)
    journal._tail.close(remove=False)
    journal._db.close()
    journal._closed = router._closed = True


@pytest.mark.parametrize("seed", range(4))
def test_random_calls_and_faults_lose_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Routes, feedbacks and groups at "normal", with failed tail writes, failed folds,
    crashes, clean reopens and switches to "full" and back drawn at random: the journal's
    router always has the state of a twin in memory that saw only the acknowledged calls, and
    routes as it does."""
    import numpy as np

    monkeypatch.setattr(journal_module, "TAIL_FOLD", 24)  # many folds
    rng = np.random.default_rng(seed)
    path = tmp_path / "j.db"
    config = {**CONFIG, "snapshot_every": 37}
    router, twin = Router(config, journal=path), Router(config)
    pending: list[str] = []
    n = 0
    real_write = os.write

    def failing(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def calls(k: int) -> list[tuple[str, Any]]:
        nonlocal n
        out: list[tuple[str, Any]] = []
        open_ = list(pending)
        for _ in range(k):
            if open_ and rng.random() < 0.45:
                out.append(("feedback", open_.pop(int(rng.integers(len(open_))))))
            else:
                out.append(("route", (f"d{n}", "xy"[int(rng.integers(2))])))
                n += 1
        return out

    def apply(r: Router, call: tuple[str, Any]) -> None:
        kind, arg = call
        if kind == "route":
            r.route(context=arg[1], decision_id=arg[0])
        else:
            r.feedback(arg, 0.5, {"usd": 0.01})

    def acknowledged(batch: list[tuple[str, Any]]) -> None:
        for call in batch:
            apply(twin, call)
            if call[0] == "route":
                pending.append(call[1][0])
            else:
                pending.remove(call[1])

    for _ in range(160):
        event = rng.random()
        if event < 0.09 and router.config.journal_sync == "full":
            event = 1.0  # the faults below are the tail's: a plain call instead
        if event < 0.05:  # a write of the tail fails: the call changes nothing
            monkeypatch.setattr(tail_module.os, "write", failing)
            with pytest.raises(JournalError):
                apply(router, calls(1)[0])
            monkeypatch.setattr(tail_module.os, "write", real_write)
        elif event < 0.09:  # folds fail for a while: no call fails
            journal = router._journal
            assert isinstance(journal, Journal)
            real_db = journal._db
            journal._db = _FoldFails(real_db)  # type: ignore[assignment]
            try:
                for call in calls(int(rng.integers(5, 30))):
                    try:
                        apply(router, call)
                    except JournalError:  # a snapshot's transaction is a fold too
                        raise AssertionError("a call failed while only folds fail") from None
                    acknowledged([call])
            finally:
                journal._db = real_db
        elif event < 0.12:
            _crash(router)
            router = Router.open(path)
        elif event < 0.14:
            router.close()
            router = Router.open(path)
        elif event < 0.16:
            sync = "full" if router.config.journal_sync == "normal" else "normal"
            for r in (router, twin):
                r.reconfigure({**config, "journal_sync": sync})
        elif event < 0.4:
            batch = calls(int(rng.integers(2, 6)))
            with router.group():
                for call in batch:
                    apply(router, call)
            acknowledged(batch)
        else:
            batch = calls(1)
            apply(router, batch[0])
            acknowledged(batch)
        assert comparable(router.state()) == comparable(twin.state())
    _crash(router)
    reopened = Router.open(path)
    assert comparable(reopened.state()) == comparable(twin.state())
    for i in range(5):
        a = reopened.route(context="x", decision_id=f"end{i}")
        b = twin.route(context="x", decision_id=f"end{i}")
        assert {**a.to_dict(), "deadline": 0} == {**b.to_dict(), "deadline": 0}
    reopened.close()


def test_a_tail_whose_folds_keep_failing_stops_at_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``TAIL_LIMIT`` folds' worth of unfolded events a call commits in SQLite or fails
    like a write to a full disk (nothing changes), so the events held in memory stay bounded;
    once SQLite takes writes again the next call folds everything."""
    monkeypatch.setattr(journal_module, "TAIL_FOLD", 4)
    limit = journal_module.TAIL_LIMIT * 4
    router = Router(CONFIG, journal=tmp_path / "j.db")
    journal = router._journal
    assert isinstance(journal, Journal)
    real = journal._db
    journal._db = _FoldFails(real)  # type: ignore[assignment]
    for i in range(limit):
        router.route(context="x", decision_id=f"q{i}")
    assert len(journal._unfolded) == limit and router.writable
    before = router.state()
    with pytest.raises(JournalError, match="disk is full"):
        router.route(context="x", decision_id="over")
    assert router.state() == before and not router.writable
    assert len(journal._unfolded) == limit
    journal._db = real
    router.route(context="x", decision_id="over")
    assert journal._unfolded == [] and journal._folded_seq == journal.last_seq
    assert router.writable
    router.close()
    assert raw_events(tmp_path / "j.db") == limit + 1


class _BeginFails:
    """The journal's connection with ``BEGIN IMMEDIATE`` failing (a transaction cannot start)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "BEGIN IMMEDIATE":
            raise sqlite3.OperationalError("disk I/O error")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_a_transaction_that_cannot_start_gives_no_event_number_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: str
) -> None:
    """A probe or a snapshot whose transaction cannot start (at "full" BEGIN fails; at
    "normal" the tail is at its limit and folds fail) leaves the journal's last event where it
    was: the calls acknowledged after it get new numbers, and a killed router reopens with
    every acknowledged call, in order."""
    monkeypatch.setattr(journal_module, "TAIL_FOLD", 4)
    path = tmp_path / "j.db"
    router = Router({**CONFIG, "journal_sync": sync}, journal=path)
    journal = router._journal
    assert isinstance(journal, Journal)
    real = journal._db
    acked = [router.route(context="x", decision_id=f"q{i}").decision_id for i in range(3)]
    if sync == "normal":
        journal._db = _FoldFails(real)  # type: ignore[assignment]
        for i in range(journal_module.TAIL_LIMIT * 4 - 3):
            acked.append(router.route(context="x", decision_id=f"t{i}").decision_id)
    else:
        journal._db = _BeginFails(real)  # type: ignore[assignment]
    last = journal.last_seq
    with pytest.raises(JournalError, match="cannot store a snapshot"):
        router.snapshot()
    with pytest.raises(JournalError):
        router.route(context="x", decision_id="over")  # the router is unwritable now
    assert not router.probe()
    assert journal.last_seq == last
    journal._db = real
    assert router.probe()
    for i in range(3):
        acked.append(router.route(context="y", decision_id=f"after{i}").decision_id)
    _crash(router)
    reopened = Router.open(path)
    logged = [e["ref"] for e in reopened.decisions_since(0, 10**6) if e["kind"] == "decision"]
    reopened.close()
    assert logged == acked


@pytest.mark.parametrize("n", [0, 1, 127, 128, 129, 300])
def test_multi_row_inserts_store_what_one_insert_a_row_stores(tmp_path: Path, n: int) -> None:
    """``insert_rows`` and ``insert_refs`` (statements of many rows) store exactly what one
    statement a row stores, NULLs, blobs and the statements' boundaries included."""
    rows = [
        (
            i + 1,
            "decision" if i % 2 else "feedback",
            None if i % 7 == 0 else f"d{i}",
            0.1 * i,
            json.dumps({"i": i}),
            None if i % 3 else struct.pack("<2d", i, -i),
            None if i % 3 != 1 else i,
        )
        for i in range(n)
    ]
    refs = [(r[2], r[0]) for r in rows if r[2] is not None]
    got = []
    for name, many in (("many", True), ("rows", False)):
        db = sqlite3.connect(tmp_path / f"{name}.db", isolation_level=None)
        db.execute(
            "CREATE TABLE events(seq INTEGER PRIMARY KEY, kind TEXT, ref TEXT, time REAL, "
            "payload TEXT, probs BLOB, probs_seq INTEGER)"
        )
        db.execute("CREATE TABLE refs(ref TEXT, seq INTEGER, PRIMARY KEY (ref, seq))")
        if many:
            db.executemany(tail_module.INSERT_EVENT, rows)
            db.executemany("INSERT INTO refs(ref, seq) VALUES (?, ?)", refs)
        else:
            tail_module.insert_rows(db, rows)
            tail_module.insert_refs(db, refs)
        got.append(
            (
                db.execute("SELECT * FROM events ORDER BY seq").fetchall(),
                db.execute("SELECT * FROM refs ORDER BY ref, seq").fetchall(),
            )
        )
        db.close()
    assert got[0] == got[1] and len(got[1][0]) == n


class _Statements:
    """The journal's connection, recording the statements it executes."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.seen: list[str] = []

    def execute(self, sql: str, *args: Any) -> Any:
        self.seen.append(sql)
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_folds_commit_at_normal_and_the_tail_empties_only_after_a_commit_at_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold in batches commits without an fsync and the tail keeps its frames; the fold that
    finds ``TAIL_SYNC`` folds' worth in the tail commits at FULL and empties it."""
    monkeypatch.setattr(journal_module, "TAIL_FOLD", 10)
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    journal = router._journal
    assert isinstance(journal, Journal)
    spy = _Statements(journal._db)
    journal._db = spy  # type: ignore[assignment]
    tail = tail_path(path)
    folds: list[tuple[int, bool, int]] = []
    for i in range(100):
        spy.seen.clear()
        router.route(context="x", decision_id=f"q{i}")
        if "COMMIT" in spy.seen:  # a fold
            full = "PRAGMA synchronous = FULL" in spy.seen
            folds.append((journal._folded_seq, full, len(read_tail(tail, journal.run_id)[0])))
    assert [f[0] for f in folds] == list(range(10, 101, 10))
    # Every fourth fold at FULL, which empties the tail; the others keep its frames.
    assert [f[1] for f in folds] == [False, False, False, True] * 2 + [False, False]
    assert [f[2] for f in folds] == [10, 20, 30, 0, 10, 20, 30, 0, 10, 20]
    spy.seen.clear()
    router.close()  # the last fold was at NORMAL: a checkpoint syncs it before the tail goes
    assert "PRAGMA wal_checkpoint(FULL)" in spy.seen
    assert not tail.exists() and raw_events(path) == 100


def test_a_tail_of_large_events_is_synced_by_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folds due to their bytes (large distributions) sync the tail once it holds
    ``TAIL_SYNC`` folds' worth of bytes, however few events that is."""
    monkeypatch.setattr(journal_module, "TAIL_FOLD_BYTES", 2_000)
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    journal = router._journal
    assert isinstance(journal, Journal)
    largest = 0
    for i in range(200):  # masked decisions carry their whole distribution
        router.route(context="x", eligible=["a", "b"], decision_id=f"q{i}")
        largest = max(largest, tail_path(path).stat().st_size)
    assert journal._folded_seq > 0
    assert largest < journal_module.TAIL_SYNC * 2_000 + 1_000  # emptied past 8,000 bytes
    router.close()


def test_a_router_folding_smaller_batches_syncs_the_tail_as_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Router.set_fold_every``: folds of that many events, their ids into ``refs`` with each
    fold, the tail synced and emptied every ``TAIL_SYNC * TAIL_FOLD`` events as with the default
    folds; a reopened journal folds the same; the events read back are those of a router
    folding ``TAIL_FOLD``."""
    monkeypatch.setattr(journal_module, "TAIL_FOLD", 20)
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    router.set_fold_every(5)
    journal = router._journal
    assert isinstance(journal, Journal) and journal.fold_every == 5
    spy = _Statements(journal._db)
    journal._db = spy  # type: ignore[assignment]
    tail = tail_path(path)
    folds: list[tuple[int, bool, int, int]] = []
    for i in range(100):
        spy.seen.clear()
        router.route(context="x", decision_id=f"q{i}")
        if "COMMIT" in spy.seen:
            full = "PRAGMA synchronous = FULL" in spy.seen
            held = len(read_tail(tail, journal.run_id)[0])
            folds.append((journal._folded_seq, full, held, len(journal._recent_rows)))
    assert [f[0] for f in folds] == list(range(5, 101, 5))
    # The fold that finds 4 x 20 events in the tail commits at FULL and empties it.
    assert [f[1] for f in folds] == [False] * 15 + [True] + [False] * 4
    assert [f[2] for f in folds] == [*range(5, 80, 5), 0, 5, 10, 15, 20]
    assert all(f[3] == 0 for f in folds)  # every id in refs once its fold committed
    router.reopen()  # as a service does after a failure: the new journal folds the same
    assert isinstance(router._journal, Journal) and router._journal.fold_every == 5
    router.close()
    other = Router(CONFIG, journal=tmp_path / "k.db")
    for i in range(100):
        other.route(context="x", decision_id=f"q{i}")
    other.close()
    mine, theirs = Router.open(path), Router.open(tmp_path / "k.db")
    assert [e[1:3] for e in mine._journal.events()] == [e[1:3] for e in theirs._journal.events()]
    assert comparable(mine.state()) == comparable(theirs.state())
    mine.close()
    theirs.close()


@pytest.mark.parametrize("events", [0, -1, True, 2.5, "8"])
def test_fold_every_refuses_what_is_not_a_positive_int(tmp_path: Path, events: Any) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    with pytest.raises(InvalidValueError, match="fold_every"):
        router.set_fold_every(events)
    assert isinstance(router._journal, Journal)
    assert router._journal.fold_every == journal_module.TAIL_FOLD
    router.close()
