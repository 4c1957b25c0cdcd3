"""The router's journal: an append-only SQLite file (stdlib ``sqlite3``, WAL mode).

Every decision, feedback, expiry, change of the expert set, of the bounds and of the
configuration is one row of ``events``, committed before the router's call returns (or at the
end of a ``Router.group()`` block), so an acknowledged event is never lost. Every
``snapshot_every`` events the router stores a snapshot: the policy in the versioned policy zip of
``msroute.policies.persist`` and the router's own state as JSON (``msroute.router.snapshots``:
state, not history, so its size does not grow with the traffic); the last two are kept. Opening
a journal = last snapshot + replay of the events after it. ``meta["config"]`` is the
configuration the journal was created with; the changes since are events, so a replay from the
start re-derives the configuration of every moment (docs/operations.md).

Schema (``PRAGMA user_version`` = ``SCHEMA_VERSION``):

    meta(key TEXT PRIMARY KEY, value TEXT)             -- "config", "policy_kwargs" (JSON),
                                                       -- "applied_config" (JSON), "run_id",
                                                       -- "created", "refs_upto",
                                                       -- "snapshot_key" (snapshots.py)
    events(seq INTEGER PRIMARY KEY, kind TEXT, ref TEXT, time REAL, payload TEXT, probs BLOB,
           probs_seq INTEGER)
    refs(ref TEXT, seq INTEGER, PRIMARY KEY (ref, seq)) WITHOUT ROWID
    snapshots(seq INTEGER PRIMARY KEY, policy BLOB, router TEXT)

``kind`` is ``decision``, ``feedback``, ``expire``, ``add_expert``, ``remove_expert``,
``set_cost``, ``set_bounds`` or ``configure``; ``ref`` the decision id (or the expert id; NULL
for the last two); ``payload`` a JSON object (floats at full precision; docs/operations.md lists
each kind's); ``probs`` the decision's full sampling distribution as little-endian float64 (or
NULL). A distribution changes only when the policy learns (OMD: once per batch of feedbacks), so a
decision whose distribution is byte for byte the last one stored for its context (without a
mask) stores none and points at that row instead: ``probs_seq`` (NULL otherwise). At K = 10,000
that saves writing 80 KB for most decisions; reads resolve the pointer, so every reader sees
each decision's full distribution. A version 1 journal (no ``probs_seq``) gains the column when
it is opened.

``refs`` finds the events of a decision (or expert) id, the lookup of a retried request, a
duplicate or a late feedback. It is written in batches, not with every event: an index on
``events.ref`` would add a second B-tree page to every commit, and in WAL mode each page of a
commit is one more write to the log (docs/benchmarks.md, "Against the peers", measures what it
costs). The refs of the events after ``meta["refs_upto"]`` are kept in memory (at most
``REFS_BATCH`` and one transaction's worth, or one fold's at ``"normal"``) and written, with the
new ``refs_upto``, in the transaction whose commit reaches ``REFS_BATCH`` of them; opening a
journal reads them back from the events after ``refs_upto``. So ``refs`` plus those events
always hold every id, and ``events_of`` sees both. A version 2 journal (an index on
``events.ref`` instead) is converted when it is opened, and so is a version 1 journal (which has
no ``probs_seq`` either).

The connection runs in autocommit mode (``isolation_level=None``) with explicit
``BEGIN IMMEDIATE`` / ``COMMIT``, ``synchronous=FULL`` by default. At ``"normal"`` (on request:
faster, and a power loss may lose the last commits but never corrupts) a transaction of events is
a frame of the journal's tail instead (``msroute.router.tail``), folded into SQLite every
``TAIL_FOLD`` events (``Journal.fold_every``: a served router folds ``SERVED_FOLD``) or
``TAIL_FOLD_BYTES`` of payloads and distributions, whichever comes first; at
``synchronous = NORMAL``, except the fold that finds ``TAIL_SYNC * TAIL_FOLD`` events in the
tail, which commits at FULL and empties it) and by any transaction that writes a snapshot or a
meta entry; the events
after ``_folded_seq`` are kept in memory too (``_unfolded``), and the reads serve them from
there. Opening a journal folds a tail its router left. The folds may run on a thread of their
own (``Journal.fold_in_background``): both halves of that, the journal's and the thread's, are
``msroute.router.folder``'s; this module decides when a fold is due and when it syncs.

One router owns a journal at a time, and SQLite enforces it: the connection runs in
``locking_mode = EXCLUSIVE`` (set before WAL mode, so the WAL index lives in the process's
memory, not in a shared ``-shm`` file), and keeps the file locked from its first access until
it closes. A commit then takes no lock and touches no shared memory, which makes it cheaper
(docs/benchmarks.md, "Live router"). Any other connection to the file, in this process or another (a
second router, ``msroute journal export``, the sqlite3 shell), is refused while it is open:
opening fails within ``BUSY_TIMEOUT_MS`` with ``JournalError`` "in use by another
router". Read a live router's journal through the router (``Router.decisions_since``,
``msroute.evaluate(router, ...)``), or close it first. A process that dies releases its lock.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from msroute.errors import InvalidValueError, JournalError
from msroute.router.eventlog import Event, EventLog, MemoryJournal
from msroute.router.folder import BackgroundFolds, old_tail_path
from msroute.router.schema import (
    BUSY_TIMEOUT_MS,
    SCHEMA_VERSION,
    check_one_name,
    file_path,
    setup,
)
from msroute.router.snapshots import bind
from msroute.router.tail import (
    INSERT_EVENT,
    Row,
    Tail,
    encode_json,
    fold_leftover,
    insert_refs,
    insert_rows,
    tail_path,
    transaction,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "REFS_BATCH",
    "SCHEMA_VERSION",
    "SERVED_FOLD",
    "TAIL_FOLD",
    "TAIL_FOLD_BYTES",
    "TAIL_LIMIT",
    "TAIL_SYNC",
    "Event",
    "Journal",
    "MemoryJournal",
    "check_fold_every",
    "open_journal",
]


#: How many events' ids a journal holds in memory before it writes them to ``refs`` (module
#: docstring): the batch costs one commit a few milliseconds in a thousand.
REFS_BATCH = 1024

#: How many events of the tail (``msroute.router.tail``) a journal at ``"normal"`` holds before
#: it folds them into SQLite (sooner when a transaction writes a snapshot or a meta entry), by
#: default (``Journal.fold_every``).
TAIL_FOLD = 1024

#: ``Journal.fold_every`` of a router the service owns (``msroute.service.owner``): a fold holds
#: up the router's next calls, all the requests in flight wait for it, and a fold of
#: ``TAIL_FOLD`` events (several milliseconds) made the slowest percent of a loaded gateway's
#: calls that much slower. Eight times as many folds of an eighth cost a little more work per
#: event (docs/benchmarks.md, "The gateway") and the same fsyncs: the tail is synced every
#: ``TAIL_SYNC * TAIL_FOLD`` events whatever the folds' size.
SERVED_FOLD = 128

#: The same bound in bytes (payloads and distributions), so that the unfolded events a journal
#: holds in memory stay small at any K: at K = 10,000 a masked decision carries 80 KB.
TAIL_FOLD_BYTES = 8 << 20

#: How many folds' worth of events (``TAIL_FOLD``, or of bytes, ``TAIL_FOLD_BYTES``) the tail
#: keeps after they were folded at ``synchronous = NORMAL``: the fold that reaches it commits at
#: FULL and empties the tail (so does any transaction that writes a snapshot or a meta entry,
#: and closing the journal).
TAIL_SYNC = 4

#: How many folds' worth (``TAIL_FOLD`` events or ``TAIL_FOLD_BYTES``) the tail may hold when
#: its folds keep failing (each failure is logged and retried): past that, a transaction commits
#: in SQLite with the tail's events or fails like a write to a full disk, so that the events
#: held in memory stay bounded.
TAIL_LIMIT = 16

_log = logging.getLogger("msroute.router")


_SELECT_REFS = "SELECT seq FROM refs WHERE ref = ? ORDER BY seq"

#: The columns of an event as read: the distribution resolved through ``probs_seq``.
_EVENT_COLUMNS = (
    "seq, kind, ref, time, payload, "
    "coalesce(probs, (SELECT e.probs FROM events AS e WHERE e.seq = events.probs_seq))"
)


def _size(row: Row) -> int:
    """What an unfolded row holds in memory, roughly: its payload and distribution."""
    return len(row[4]) + (0 if row[5] is None else len(row[5]))


def open_journal(
    path: str | os.PathLike[str] | None, sync: str = "full", *, create: bool
) -> Journal | MemoryJournal:
    """The journal at ``path`` (``Journal``), or a ``MemoryJournal`` for None."""
    return MemoryJournal() if path is None else Journal(path, sync, create=create)


def check_fold_every(events: object) -> int:
    """``events`` if it is a number of events to fold at a time (an int >= 1; the
    ``fold_every`` of a journal and of ``Router.set_fold_every``), else InvalidValueError."""
    if isinstance(events, bool) or not isinstance(events, int) or events < 1:
        raise InvalidValueError(f"fold_every == {events!r:.80}, must be an int >= 1")
    return events


class Journal(EventLog, BackgroundFolds):
    """One SQLite journal file; its folds in the background: ``BackgroundFolds``.

    Parameters
    ----------
    path : str or path-like
        The file.
    sync : {"full", "normal"}
        SQLite's ``synchronous`` setting.
    create : bool
        Create a new journal (the file must not hold one) or open an existing one (it must).
    """

    def __init__(self, path: str | os.PathLike[str], sync: str = "full", *, create: bool) -> None:
        given = file_path(path)
        label = str(given)
        self.label = label
        #: The file itself, symbolic links resolved: its side files (the tail, SQLite's WAL)
        #: are found next to it by name, whatever name the journal is opened by.
        self.path: Path | None = Path(os.path.realpath(given))
        if not create:
            check_one_name(self.path, label)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise JournalError(f"{label}: cannot open the journal: {exc}") from exc
        try:
            setup(self._db, label, create)
            self.set_sync(sync)
            self.run_id = self.meta("run_id")
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY:
                raise JournalError(
                    f"{label}: journal is in use by another router (a journal is locked while "
                    "a router, or another connection, has it open; close that one first, or "
                    "read a live journal through its router)"
                ) from exc
            raise JournalError(f"{label}: not a usable journal: {exc}") from exc
        except JournalError:
            self._db.close()
            raise
        row = self._db.execute("SELECT max(seq) FROM events").fetchone()
        self.last_seq: int = 0 if row[0] is None else int(row[0])
        self._tail = Tail(tail_path(self.path), self.run_id)
        try:
            self.last_seq = fold_leftover(
                self._db, self._tail.path, self.last_seq, self.run_id, create
            )
        except (sqlite3.Error, OSError) as exc:
            self._db.close()
            raise JournalError(f"{label}: cannot fold the journal's tail: {exc}") from exc
        except JournalError:
            self._db.close()
            raise
        self.set_sync(sync)  # back from the fold's FULL
        #: The events after ``_folded_seq`` (the last in SQLite), in order: those of the tail,
        #: then the open transaction's (module docstring of ``msroute.router.tail``).
        self._unfolded: list[Row] = []
        self._folded_seq = self.last_seq
        self._txn_from = 0  # where the open transaction's rows start in _unfolded
        self._txn_open = False  # a transaction of the tail is open (no SQLite transaction)
        self._fold_every = TAIL_FOLD
        self._fold_at = TAIL_FOLD
        self._refs_at = REFS_BATCH  # ids held before they go to refs (at most one fold's)
        self._unfolded_bytes = 0  # the payloads' and distributions' bytes in _unfolded
        self._fold_bytes_at = TAIL_FOLD_BYTES
        self._tail_rows = 0  # events in the tail since it was last emptied
        self._empties = False  # the open SQLite transaction commits at FULL, then empties the tail
        self._committed_seq = self.last_seq
        self._shared = {}
        self._closed = False
        #: The ids of the events after ``_refs_upto``, not yet in ``refs``: by id, and in order.
        self._recent: dict[str, list[int]] = {}
        self._recent_rows: list[tuple[str, int]] = []
        try:
            self._refs_upto = int(self.meta("refs_upto"))
            for ref, seq in self._db.execute(
                "SELECT ref, seq FROM events WHERE seq > ? AND ref IS NOT NULL ORDER BY seq",
                (self._refs_upto,),
            ):
                self._remember(str(ref), int(seq))
        except (JournalError, ValueError, sqlite3.Error) as exc:
            self._db.close()
            raise JournalError(f"{label}: not a usable journal: {exc}") from exc
        try:
            self.snapshot_key = self._snapshot_key()
        except (sqlite3.Error, OSError, ValueError) as exc:
            self._db.close()
            raise JournalError(f"{label}: cannot bind the journal's snapshots: {exc}") from exc

    def _snapshot_key(self) -> bytes:
        """The key that binds this journal's snapshots to it (``msroute.router.snapshots``),
        made with the journal. A journal made before snapshots were bound gets one now, and
        the snapshots it accepted until now are bound with it in the same transaction."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'snapshot_key'").fetchone()
        if row is not None:
            return bytes.fromhex(str(row[0]))
        key = secrets.token_bytes(32)
        bound = bind(self.snapshots(), key, self.run_id)
        with transaction(self._db):
            self._db.execute(
                "INSERT INTO meta(key, value) VALUES ('snapshot_key', ?)", (key.hex(),)
            )
            self._db.executemany(
                "UPDATE snapshots SET router = ? WHERE seq = ?",
                [(encode_json(state), seq) for seq, state in bound],
            )
        _log.info("%s: %d snapshots bound to the journal", self.label, len(bound))
        return key

    # ------------------------------------------------------------------ transactions
    def begin(self) -> None:
        """Start a write transaction: at ``"full"`` a SQLite one (``BEGIN IMMEDIATE``: takes
        the write lock now), at ``"normal"`` one of the tail (nothing to start). Where it
        begins is set first, so a ``rollback()`` after a start that failed undoes nothing."""
        if self._job is not None:
            self._collect()
        self._txn_from = len(self._unfolded)
        self._committed_seq = self.last_seq
        if self._sync == "normal" and not (
            len(self._unfolded) >= TAIL_LIMIT * TAIL_FOLD
            or self._unfolded_bytes >= TAIL_LIMIT * TAIL_FOLD_BYTES
        ):
            self._txn_open = True
        else:  # "full", or a tail whose folds kept failing: a SQLite transaction, or an error
            self._to_sqlite()

    def commit(self) -> None:
        """Commit: durable once this returns (at ``"full"``; at ``"normal"``, against a crash of
        the process: one frame of the tail, folded into SQLite every ``TAIL_FOLD`` events)."""
        if self._own_sqlite:
            self._commit_sqlite()
            return
        if self._txn_open:
            rows = self._unfolded[self._txn_from :]
            if rows:
                self._tail.append(rows)
                self._tail_rows += len(rows)
            self._txn_open = False
            if len(self._unfolded) >= self._fold_at or self._unfolded_bytes >= self._fold_bytes_at:
                if self._folder is None:
                    self._fold()
                else:
                    self._fold_later()

    def _to_sqlite(self, fold: bool = False) -> None:
        """Make the open transaction a SQLite one (if it is not yet), holding every unfolded
        event. Its commit empties the tail, and so commits at ``synchronous = FULL`` (module
        docstring of ``msroute.router.tail``), unless it is a ``fold`` in batches while the tail
        holds fewer than ``TAIL_SYNC`` folds' worth of events: that one commits at NORMAL and
        the tail keeps its frames until a later commit at FULL has made them durable."""
        self._txn_open = False
        self._drain()  # the journal writes to SQLite only while no job is in flight
        if self._db.in_transaction:
            return
        self._empties = not fold or self._sync_due()
        try:
            if self._empties and self._tail.holds_rows and self._sync == "normal":
                self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute("BEGIN IMMEDIATE")
            if self._unfolded:
                insert_rows(self._db, self._unfolded)
        except BaseException:
            self._rollback_sqlite()  # no transaction is left open by a failed start
            raise

    def _commit_sqlite(self) -> None:
        """COMMIT the SQLite transaction; with ``REFS_BATCH`` ids held in memory, they go to
        ``refs`` in it (module docstring). Every event is in SQLite then: the tail empties."""
        batch = len(self._recent_rows) >= self._refs_at
        if batch:
            insert_refs(self._db, self._recent_rows)
            self.put_meta("refs_upto", str(self.last_seq))
        self._db.execute("COMMIT")
        self._after_sqlite()
        if batch:
            self._refs_upto = self.last_seq
            self._recent.clear()
            self._recent_rows.clear()
        self._folded_seq = self.last_seq
        self._unfolded.clear()
        self._unfolded_bytes = 0
        self._schedule_fold()
        if self._empties:
            self._tail.empty()
            self._tail_rows = 0
            if self._old_held and self.path is not None:
                old_tail_path(self.path).unlink(missing_ok=True)
                self._old_held = False

    def _after_sqlite(self) -> None:
        """Back to the configured ``synchronous`` after a fold committed or rolled back."""
        if self._sync == "normal":
            self._db.execute("PRAGMA synchronous = NORMAL")

    def _fold(self) -> None:
        """Fold the tail into SQLite now. Its events are durable already, so a failure fails
        no call: it is logged, and tried again some events later."""
        try:
            self._to_sqlite(fold=True)
            self._commit_sqlite()
        except (sqlite3.Error, OSError) as exc:
            self._rollback_sqlite()
            self._schedule_fold(retry=True)
            _log.warning("%s: cannot fold the tail (retried later): %s", self.label, exc)

    def _sync_due(self) -> bool:
        """Whether the tail holds ``TAIL_SYNC`` folds' worth of events (or of bytes): the fold
        that finds it so commits at FULL (in the background: syncs) and empties it."""
        return (
            self._tail_rows >= TAIL_SYNC * TAIL_FOLD
            or self._tail.size >= TAIL_SYNC * TAIL_FOLD_BYTES
        )

    def _schedule_fold(self, retry: bool = False) -> None:
        """The next fold is due after ``fold_every`` events or ``TAIL_FOLD_BYTES``; after one
        that failed (``retry``), an eighth of that later than now."""
        if retry:
            self._fold_at = len(self._unfolded) + max(self._fold_every // 8, 1)
            self._fold_bytes_at = self._unfolded_bytes + TAIL_FOLD_BYTES // 8
        else:
            self._fold_at, self._fold_bytes_at = self._fold_every, TAIL_FOLD_BYTES

    def rollback(self) -> None:
        """Roll back the open transaction, if any (errors ignored: the connection may be gone);
        the events it appended are forgotten (their numbers will be given again), and so are
        the distributions and the ids they stored."""
        self.last_seq = self._committed_seq
        self._unfolded_bytes -= sum(_size(row) for row in self._unfolded[self._txn_from :])
        del self._unfolded[self._txn_from :]
        self._txn_open = False
        self._shared.clear()
        rows = self._recent_rows
        while rows and rows[-1][1] > self._committed_seq:
            ref, _ = rows.pop()
            seqs = self._recent[ref]
            seqs.pop()
            if not seqs:
                del self._recent[ref]
        self._rollback_sqlite()

    def _rollback_sqlite(self) -> None:
        """Roll back the SQLite transaction, if any (errors ignored: the connection may be
        gone), and return to the configured ``synchronous``; nothing while a job is in flight
        (the transaction is the folder thread's)."""
        if self._job is not None:
            return
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._after_sqlite()
        except sqlite3.Error:
            pass

    def set_sync(self, sync: str) -> None:
        """Set the durability ("full" or "normal"; outside a transaction). From "normal" to
        "full", the tail's events go to SQLite in the next transaction."""
        self._drain()
        self._sync = sync
        self._db.execute(f"PRAGMA synchronous = {'FULL' if sync == 'full' else 'NORMAL'}")

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return self._txn_open or self._own_sqlite

    @property
    def _own_sqlite(self) -> bool:
        """Whether the journal has a SQLite transaction open (not the folder thread's)."""
        return self._job is None and self._db.in_transaction

    @property
    def fold_every(self) -> int:
        """How many events a journal at ``"normal"`` holds in its tail before it folds them into
        SQLite (``TAIL_FOLD`` by default): fewer is a shorter pause at each fold, more is a
        little less work per event. Their ids go to ``refs`` at most one fold's worth at a time.
        What a crash may take and when the tail is synced do not depend on it."""
        return self._fold_every

    @fold_every.setter
    def fold_every(self, events: int) -> None:
        self._fold_every = check_fold_every(events)
        self._fold_at = min(self._fold_at, events)
        self._refs_at = min(REFS_BATCH, events)

    @property
    def quick_commit(self) -> bool:
        """Whether committing now appends one frame to the tail and nothing else (no SQLite
        transaction, no fold due): a ``write``, never an fsync."""
        n, size = len(self._unfolded), self._unfolded_bytes
        return self._txn_open and (
            self._folder is not None or (n < self._fold_at and size < self._fold_bytes_at)
        )

    # ------------------------------------------------------------------ writes
    def _store(self, event: Event, probs_seq: int | None) -> None:
        seq, kind, ref, time, payload, probs = event
        if probs_seq is not None:
            probs = None  # the row at probs_seq holds it
        row = (seq, kind, ref, time, encode_json(payload), probs, probs_seq)
        if self._own_sqlite:
            self._db.execute(INSERT_EVENT, row)
        self._unfolded.append(row)
        self._unfolded_bytes += _size(row)
        if ref is not None:
            self._remember(ref, seq)

    def _remember(self, ref: str, seq: int) -> None:
        """Hold the id of event ``seq`` until it is written to ``refs``."""
        self._recent.setdefault(ref, []).append(seq)
        self._recent_rows.append((ref, seq))

    def put_meta(self, key: str, value: str) -> None:
        """Set one meta entry (inside a transaction: it becomes a SQLite one)."""
        self._to_sqlite()
        self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def put_snapshot(
        self, seq: int, policy: bytes, router: dict[str, Any], keep: int | None = None
    ) -> None:
        """Store the snapshot taken after event ``seq``; with ``keep``, delete all but the
        newest ``keep`` snapshots (in the same transaction, which becomes a SQLite one)."""
        self._to_sqlite()
        self._db.execute(
            "INSERT OR REPLACE INTO snapshots(seq, policy, router) VALUES (?, ?, ?)",
            (seq, policy, encode_json(router)),
        )
        if keep is not None:
            self._db.execute(
                "DELETE FROM snapshots WHERE seq NOT IN "
                "(SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?)",
                (keep,),
            )

    # ------------------------------------------------------------------ reads
    def meta(self, key: str) -> str:
        """One meta entry (JournalError when absent)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise JournalError(f"{self.label}: the journal has no {key!r} entry")
        return str(row[0])

    def last_snapshot(self) -> tuple[int, bytes, dict[str, Any]] | None:
        """The latest snapshot: (seq, policy zip bytes, router state), or None."""
        return next(self.snapshots(), None)

    def snapshots(self) -> Iterator[tuple[int, bytes, Any]]:
        """The stored snapshots, newest first: (seq, policy zip bytes, router state as decoded
        JSON, unchecked)."""
        rows = self._db.execute(
            "SELECT seq, policy, router FROM snapshots ORDER BY seq DESC"
        ).fetchall()
        for seq, policy, router in rows:
            try:
                state = json.loads(router)
            except (ValueError, TypeError):
                state = None
            yield int(seq), policy if isinstance(policy, bytes) else b"", state

    def events(self, after: int = 0, limit: int | None = None) -> Iterator[Event]:
        """The events with ``seq > after``, in order (at most ``limit``): SQLite's, then the
        unfolded ones (the tail's and the open transaction's)."""
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq"
        if after >= self.last_seq:  # none (SQLite's integers end at 2**63 - 1; Python's do not)
            return
        if limit is not None and limit >= self.last_seq:
            limit = None  # all of them
        # A copy: the generator may be read on while the router appends (a fold clears the list).
        folded, unfolded = self._folded_seq, tuple(self._unfolded)
        args: tuple[int, ...] = (after, folded)
        if limit is not None:
            sql += " LIMIT ?"
            args = (after, folded, limit)
        left = limit
        try:
            for seq, kind, ref, time, payload, probs in self._db.execute(sql, args):
                yield self._stored_event(seq, kind, ref, time, payload, probs)
                left = None if left is None else left - 1
            for row in unfolded[max(after - folded, 0) :]:
                if left is not None and left <= 0:
                    return
                yield self._unfolded_event(row, folded, unfolded)
                left = None if left is None else left - 1
        except sqlite3.Error as exc:  # an I/O error while reading
            raise JournalError(f"{self.label}: cannot read the journal: {exc}") from exc

    def events_of(self, ref: str) -> list[Event]:
        """Every event about one decision (or expert) id, in order: those ``refs`` holds, then
        those whose ids are still in memory (all later). None for an id that cannot be stored
        (a lone surrogate: not UTF-8)."""
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq = ?"
        folded, unfolded = self._folded_seq, self._unfolded  # read at once: no copy
        try:
            # The ids a fold in flight is writing are in memory still: those of refs_upto only.
            upto = self._refs_upto
            seqs = [s for (s,) in self._db.execute(_SELECT_REFS, (ref,)) if s <= upto]
        except UnicodeEncodeError:
            return []
        except sqlite3.Error as exc:  # an I/O error while reading
            raise JournalError(f"{self.label}: cannot read the journal: {exc}") from exc
        try:
            seqs += self._recent.get(ref, ())
            events: list[Event] = []
            for seq in seqs:
                if seq > folded:
                    events.append(
                        self._unfolded_event(unfolded[seq - folded - 1], folded, unfolded)
                    )
                    continue
                s, k, r, t, p, b = self._db.execute(sql, (seq,)).fetchone()
                events.append(self._stored_event(s, k, r, t, p, b))
        except sqlite3.Error as exc:  # an I/O error while reading
            raise JournalError(f"{self.label}: cannot read the journal: {exc}") from exc
        return events

    def _stored_event(
        self, seq: int, kind: object, ref: object, time: object, payload: object, probs: object
    ) -> Event:
        """A row of SQLite's ``events`` as ``events`` yields it, its payload decoded; one the
        journal cannot have written (edited by hand) is a JournalError naming the event."""
        try:
            decoded = json.loads(payload)  # type: ignore[arg-type]
            at = float(time)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            wrong = str(exc)
        else:
            if isinstance(decoded, dict) and isinstance(kind, str):
                if isinstance(ref, str | None) and isinstance(probs, bytes | None):
                    return int(seq), kind, ref, at, decoded, probs
                wrong = "its id is not text, or its distribution not bytes"
            else:
                wrong = "its kind is not text, or its payload not a JSON object"
        raise JournalError(f"{self.label}: event {seq}: not an event the journal wrote ({wrong})")

    def _unfolded_event(self, row: Row, folded: int, unfolded: Sequence[Row]) -> Event:
        """An unfolded row as ``events`` yields it: the payload decoded, the distribution
        resolved through ``probs_seq`` (an unfolded row or one of SQLite)."""
        seq, kind, ref, time, payload, probs, probs_seq = row
        if probs is None and probs_seq is not None:
            if probs_seq > folded:
                probs = unfolded[probs_seq - folded - 1][5]
            else:
                held = self._db.execute(
                    "SELECT probs FROM events WHERE seq = ?", (probs_seq,)
                ).fetchone()
                probs = None if held is None else held[0]
        return seq, kind, ref, time, json.loads(payload), probs

    def close(self) -> None:
        """Close the connection (idempotent); an open transaction is rolled back. The tail is
        folded into SQLite and removed (if that fails, it stays: the next open folds it)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._drain()
            if self.in_transaction:
                self.rollback()
            if self._unfolded:
                self._to_sqlite()
                self._commit_sqlite()
            elif self._tail_rows or self._old_held:  # folded at NORMAL: a checkpoint syncs them
                self._db.execute("PRAGMA wal_checkpoint(FULL)")
            self._tail.close(remove=True)
            if self._old_held and self.path is not None:
                old_tail_path(self.path).unlink(missing_ok=True)
        except (sqlite3.Error, OSError) as exc:
            self._tail.close(remove=False)
            _log.warning(
                "%s: the tail stays (folded when the journal is opened): %s", self.label, exc
            )
        finally:
            if self._folder is not None:
                self._folder.shutdown(wait=True)
            self._db.close()
