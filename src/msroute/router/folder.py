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
"""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from msroute.router.tail import Row, insert_refs, insert_rows, transaction

__all__ = ["FoldJob", "old_tail_path", "run_job"]


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
