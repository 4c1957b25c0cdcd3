"""The journal's folds on a thread of their own (``Journal.fold_in_background``).

A served router's calls wait for whatever its journal does on their path: a fold of the tail
into SQLite holds the next calls up for about a millisecond, and the fold that syncs the tail
(every ``TAIL_SYNC`` folds' worth) or stores the periodic snapshot for several, an fsync
included. With folds in the background the journal hands each fold to one folder thread as a
``FoldJob`` and goes on appending later transactions to the tail meanwhile; the job's rows stay
in the journal's memory (``_unfolded``), where reads find them, until the journal has seen the
job commit.

Nothing about durability changes: an event is acknowledged once its frame is in the tail, as
before, and the tail keeps every frame until its rows are durable in SQLite (a commit at
``synchronous = FULL``, or here a commit followed by an fsync of SQLite's WAL).
A job that syncs (``sync``: it empties the tail, or stores a snapshot) cannot empty a tail
that is still being appended to, so the journal first renames the tail to
``<journal>-tail-old`` (``old_tail_path``) and appends later frames to a new one; the job removes
the old one once its commit is durable (``run_job``: committed, then SQLite's WAL fsynced).
Opening a journal folds both (the old one first), so a crash
at any point between the rename and the removal loses nothing. A job that fails is logged and
leaves everything as it was: its rows stay in memory and in the tail(s), and the journal tries
again later; one that committed and then failed to sync (or to remove the old tail) has
folded its rows, and leaves only the old tail, which a later job that syncs removes.

The thread shares the journal's SQLite connection (the file is locked to it: no second
connection can open it), so the journal itself writes to SQLite only when no job is in flight,
and a read of SQLite waits at most for the job's statement under way, not for its transaction.

Both halves live here: ``run_job`` is the thread's, ``BackgroundFolds`` the journal's (a base of
``msroute.router.journal.Journal``: it starts the thread, hands it jobs, and takes their outcomes
back into the journal's memory).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msroute.errors import InvalidTypeError
from msroute.router.tail import Row, Tail, encode_json, insert_refs, insert_rows, transaction

__all__ = ["BackgroundFolds", "FoldJob", "old_tail_path", "run_job"]

_log = logging.getLogger("msroute.router")


def old_tail_path(journal: Path) -> Path:
    """Where the tail of the journal at ``journal`` is moved while a job syncs it."""
    return journal.with_name(journal.name + "-tail-old")


@dataclass(slots=True)
class FoldJob:
    """One transaction for the folder thread: the journal's unfolded ``rows`` (the first of
    its ``_unfolded``, all committed), the ids ``refs`` to write with ``refs_upto`` (or none),
    a snapshot ``(seq, policy zip, router state JSON)`` to store, keeping ``keep`` (or none),
    and whether it makes its commit durable (fsyncs ``wal``) and then removes the tail moved to
    ``old_tail`` (``sync``).
    ``future``: the folder thread's run of it (``run_job``), done once it committed or
    failed. ``committed``: its transaction committed (set by ``run_job``), so that a job whose
    sync or removal of the old tail failed after the COMMIT is not taken for one whose rows
    are still to be folded: they are in SQLite, and folding them again would fail on every
    later job."""

    rows: list[Row]
    size: int  # the rows' bytes, as the journal counts them
    refs: list[tuple[str, int]] | None
    refs_upto: int
    snapshot: tuple[int, bytes, str] | None
    keep: int | None
    old_tail: Path | None  # set for a job that syncs
    wal: Path  # SQLite's WAL file, which a job that syncs fsyncs after its COMMIT
    future: Future[None] | None = None
    committed: bool = False

    @property
    def sync(self) -> bool:
        """Whether the job makes its commit durable and removes the tail moved aside."""
        return self.old_tail is not None


def run_job(db: sqlite3.Connection, job: FoldJob) -> None:
    """Run ``job`` on ``db`` (on the folder thread): one transaction, and if the job syncs,
    SQLite's WAL fsynced after its COMMIT, then the old tail removed. Raises what SQLite or
    the file system raised; the transaction is then rolled back and the old tail kept (an
    error after the COMMIT, in the sync or the removal, leaves ``job.committed`` set and the
    old tail in place)."""
    with transaction(db):
        if job.rows:
            insert_rows(db, job.rows)
        if job.refs:
            insert_refs(db, job.refs)
            db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('refs_upto', ?)",
                (str(job.refs_upto),),
            )
        if job.snapshot is not None:
            db.execute(
                "INSERT OR REPLACE INTO snapshots(seq, policy, router) VALUES (?, ?, ?)",
                job.snapshot,
            )
            if job.keep is not None:
                db.execute(
                    "DELETE FROM snapshots WHERE seq NOT IN "
                    "(SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?)",
                    (job.keep,),
                )
    job.committed = True
    if job.old_tail is not None:
        _sync_wal(job.wal)
        job.old_tail.unlink(missing_ok=True)


def _sync_wal(wal: Path) -> None:
    """fsync SQLite's WAL file: every transaction committed in it so far (at NORMAL: written,
    not synced) is then durable, as a COMMIT at FULL would have made it; SQLite's own
    checkpoints (an automatic one may run in any COMMIT) sync the WAL before they copy it and
    the database after, so a commit no longer in the WAL is durable already. Done here rather
    than by a COMMIT at FULL because SQLite holds the connection's mutex through that COMMIT's
    fsync, and the calls' reads on the journal's one connection waited for it. (The WAL has no
    lock of SQLite's on it, so opening and closing it here releases none.)"""
    fd = os.open(wal, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BackgroundFolds:
    """The journal's half of the folds in the background: it starts the folder thread, hands
    it ``FoldJob``s (the tail's unfolded events, or a snapshot), and takes each job's outcome
    back into the journal's memory (module docstring).

    ``msroute.router.journal.Journal`` is built on it and sets what the two share, declared
    here: the unfolded events and their bytes, the ids not yet in ``refs``, the tail, the
    connection. The journal decides when a fold is due and when it syncs (``_sync_due``,
    ``_schedule_fold``: its tuning constants), and tells whether a transaction is open.
    """

    label: str
    path: Path | None
    last_seq: int
    _db: sqlite3.Connection
    _tail: Tail
    _tail_rows: int  # events in the tail since it was last emptied
    _unfolded: list[Row]  # the events after _folded_seq, in order
    _unfolded_bytes: int
    _folded_seq: int
    _txn_from: int  # where the open transaction's rows start in _unfolded
    _recent: dict[str, list[int]]  # the ids of the events after _refs_upto, by id
    _recent_rows: list[tuple[str, int]]  # the same, in order
    _refs_upto: int
    _refs_at: int  # ids held before they go to refs
    #: The folder thread (None: folds on the caller's), its job in flight, whether a failed
    #: job left the tail moved aside (the next sync removes it), and the event of a snapshot
    #: whose job failed (``snapshot_failure``).
    _folder: ThreadPoolExecutor | None = None
    _job: FoldJob | None = None
    _old_held = False
    _failed_snapshot: int | None = None

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (the journal's)."""
        raise NotImplementedError

    def _sync_due(self) -> bool:
        """Whether the next fold syncs and empties the tail (the journal's)."""
        raise NotImplementedError

    def _schedule_fold(self, retry: bool = False) -> None:
        """Set when the next fold is due, after one done or (``retry``) failed (the journal's)."""
        raise NotImplementedError

    @property
    def fold_in_background(self) -> bool:
        """Whether the folds into SQLite run on a thread of their own (``msroute.router.folder``;
        at ``"normal"``): the fold that syncs the tail and the periodic snapshot's transaction
        then never hold up the calls, which go on appending to the tail meanwhile. Off by
        default: in one process, a thread folding beside the calls costs them more CPU than the
        folds it takes off their path; a service's calls wait for each other instead."""
        return self._folder is not None

    @fold_in_background.setter
    def fold_in_background(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise InvalidTypeError(f"fold_in_background == {on!r}, must be a bool")
        if on and self._folder is None:
            self._folder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="msroute-fold")
        elif not on and self._folder is not None:
            self._drain()
            self._folder.shutdown(wait=True)
            self._folder = None

    def _fold_later(self) -> None:
        """Hand the unfolded events to the folder thread (between transactions), unless its
        last job is still in flight: then a later commit does. The fold syncs the tail once it
        holds ``TAIL_SYNC`` folds' worth, as ``_to_sqlite`` does."""
        self._collect()
        if self._job is None:
            self._submit(self._sync_due())

    def _submit(
        self, sync: bool, snapshot: tuple[int, bytes, str] | None = None, keep: int | None = None
    ) -> None:
        """Start a job folding every unfolded event (all committed: no transaction is open),
        with the ids held once ``fold_every``'s worth are, and ``snapshot``. One that ``sync``s
        moves the tail aside first (a job that failed may have left it there already: this one
        removes that one), and makes its commit durable (``folder.run_job``); if the tail
        cannot be moved, the job does not
        sync (it is tried again at a later fold)."""
        assert self._folder is not None and self.path is not None and not self.in_transaction
        old = old_tail_path(self.path) if sync else None
        if old is not None and not self._old_held:
            try:
                self._tail.move_to(old)
            except OSError as exc:
                _log.warning("%s: cannot move the tail aside (synced later): %s", self.label, exc)
                old = None
            else:
                self._tail_rows = 0
        refs = self._recent_rows[:] if len(self._recent_rows) >= self._refs_at else None
        job = FoldJob(
            self._unfolded[:],
            self._unfolded_bytes,
            refs,
            self.last_seq,
            snapshot,
            keep,
            old,
            self.path.with_name(self.path.name + "-wal"),
        )
        job.future = self._folder.submit(run_job, self._db, job)
        self._job = job
        if old is not None:
            self._old_held = True  # until the job has removed it

    def _collect(self) -> None:
        """Take the outcome of the job in flight, if it is done: its events and ids are in
        SQLite now (forgotten in memory), or it failed (logged; everything stays, and the fold
        is tried again some events later). A job that committed and then failed to sync or to
        remove the old tail folded its rows all the same: only the old tail stays, for a later
        job that syncs to remove."""
        job = self._job
        if job is None or job.future is None or not job.future.done():
            return
        self._job = None
        error = job.future.exception()
        if error is not None and not job.committed:
            self._schedule_fold(retry=True)
            if job.snapshot is not None:
                self._failed_snapshot = job.snapshot[0]
            _log.warning("%s: cannot fold the tail (retried later): %s", self.label, error)
            return
        n = len(job.rows)
        if n:
            del self._unfolded[:n]
            self._txn_from = max(self._txn_from - n, 0)
            self._unfolded_bytes -= job.size
            self._folded_seq = job.rows[-1][0]
        if job.refs is not None:
            self._refs_upto = job.refs_upto
            for ref, _ in job.refs:
                seqs = self._recent[ref]
                del seqs[0]
                if not seqs:
                    del self._recent[ref]
            del self._recent_rows[: len(job.refs)]
        self._schedule_fold()
        if error is not None:  # committed, not synced: a later job syncs and removes the tail
            _log.warning("%s: cannot sync the fold (synced later): %s", self.label, error)
        elif job.sync:
            self._old_held = False

    def _drain(self) -> None:
        """Wait for the job in flight, if any, and take its outcome."""
        job = self._job
        if job is not None and job.future is not None:
            futures_wait([job.future])
            self._collect()

    def queue_snapshot(
        self, seq: int, policy: bytes, router: dict[str, Any], keep: int | None = None
    ) -> bool:
        """With folds in the background, hand the snapshot taken after event ``seq`` (the last:
        between transactions) to the folder thread, in a job that folds and syncs the tail as
        ``put_snapshot``'s transaction does; False (nothing done) while a job is in flight or
        without folds in the background. Its failure is reported by ``snapshot_failure``."""
        if self._folder is None or self.in_transaction or seq != self.last_seq:
            return False
        self._collect()
        if self._job is not None:
            return False
        self._submit(True, (seq, policy, encode_json(router)), keep)
        return True

    def snapshot_failure(self) -> int | None:
        """The event of a snapshot handed to the folder thread whose job failed since the last
        call (the failure was logged), or None."""
        self._collect()
        failed, self._failed_snapshot = self._failed_snapshot, None
        return failed
