"""The transactions of a live router: every call, or every ``group`` of calls, is one
journal transaction that commits, or rolls back in the journal and in memory alike.

``Transactional`` is the base of ``msroute.router.core.Router``: it owns the journal's
transactions and the router's failure states (a failed write, a router that must reopen), and
leaves to the router what its state is (``_rebuild``: the state of the committed events) and
when a snapshot is due (``_maybe_snapshot``). docs/operations.md states each guarantee.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

from msroute.errors import InvalidTypeError, JournalError, MSRouteError
from msroute.router.config import RouterConfig
from msroute.router.journal import Journal, MemoryJournal, check_fold_every

__all__ = ["Transactional"]

_log = logging.getLogger("msroute.router")


class _Write:
    """The context manager of ``Transactional._write`` (a class: a generator-based one costs a few
    microseconds a call, a noticeable share of a route + feedback pair)."""

    __slots__ = ("owns", "router")

    def __init__(self, router: Transactional) -> None:
        self.router = router
        self.owns = False

    def __enter__(self) -> None:
        router = self.router
        router._check_usable()
        if not router._depth:
            router._begin()
            self.owns = True

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: object
    ) -> None:
        if self.owns:
            if error is None:
                self.router._finish()
                self.router._maybe_snapshot()
            else:
                self.router._abandon(error)  # never hides the call's own error


class Transactional:
    """A router's journal transactions and failure states (see the module docstring)."""

    _journal: Journal | MemoryJournal
    _base_config: RouterConfig
    _depth: int  # group() nesting
    _failed: BaseException | None  # state unknown: reopen() needed
    _txn_error: BaseException | None  # a write of the open transaction failed
    _write_error: BaseException | None  # the last transaction failed
    _txn_start: int
    _closed: bool
    _fold_every: int | None = None  # set_fold_every's, kept for a reopened journal
    _fold_background = False  # set_fold_every's too

    def _reset_transactions(self) -> None:
        """No transaction open, no failure (a router fresh from its configuration)."""
        self._depth = 0
        self._failed = None
        self._txn_error = None
        self._write_error = None
        self._txn_start = 0
        self._closed = False

    def _attach(self, journal: Journal | MemoryJournal) -> None:
        """Use this journal (a file journal folds every ``fold_every`` events, in the
        background if so set)."""
        self._journal = journal
        if isinstance(journal, Journal) and self._fold_every is not None:
            journal.fold_every = self._fold_every
            journal.fold_in_background = self._fold_background

    def set_fold_every(self, events: int, *, background: bool = False) -> None:
        """Fold the journal's tail into SQLite every ``events`` events from now on, also after
        a reopen (``Journal.fold_every``; ``journal_sync = "normal"``), on a thread of its own
        with ``background`` (``Journal.fold_in_background``: the folds, the syncs of the tail
        and the periodic snapshot's transaction then never hold the calls up): a service
        owning the router folds smaller batches in the background, so that no fold holds its
        requests up. Nothing changes for a router in memory or at ``"full"``, and no decision
        depends on it."""
        check_fold_every(events)  # here too: a router in memory has no journal to check it
        if not isinstance(background, bool):
            raise InvalidTypeError(f"background == {background!r}, must be a bool")
        if isinstance(self._journal, Journal):
            self._journal.fold_every = events  # checked there
            self._journal.fold_in_background = background
        self._fold_every = events
        self._fold_background = background

    def _rebuild(self) -> None:
        """The in-memory state of the journal's committed events (the router's)."""
        raise NotImplementedError

    def _maybe_snapshot(self) -> None:
        """Take the periodic snapshot when it is due (the router's)."""
        raise NotImplementedError

    def _snapshot_due(self) -> bool:
        """Whether the periodic snapshot is due (the router's)."""
        raise NotImplementedError

    @property
    def quick_commit(self) -> bool:
        """Whether ending the open group now is quick: its commit appends one frame to the
        journal's tail (``journal_sync = "normal"``; no fold into SQLite due) and no snapshot
        is due, so it never waits for an fsync. A server may then end the group on its event
        loop's thread rather than hand it to a thread of its own."""
        journal = self._journal
        background = isinstance(journal, Journal) and journal.fold_in_background
        return journal.quick_commit and (background or not self._snapshot_due())

    @property
    def writable(self) -> bool:
        """Whether the router's last write reached the journal: False from a failed write or
        commit until a later transaction commits (or ``reopen`` succeeds), and for a closed
        router. A service reports a router that is not writable as unhealthy."""
        return not self._closed and self._failed is None and self._write_error is None

    @property
    def needs_reopen(self) -> bool:
        """Whether the router refuses calls until ``reopen`` succeeds: a write failed and
        the journal could not be read back either, so the in-memory state is unknown."""
        return not self._closed and self._failed is not None

    @property
    def failure(self) -> str | None:
        """Why the router is not writable (the last journal error), or None."""
        if self._closed:
            return "the router is closed"
        error = self._failed if self._failed is not None else self._write_error
        return None if error is None else str(error)

    def _check_usable(self) -> None:
        if self._closed:
            raise MSRouteError("the router is closed")
        if self._failed is not None:
            raise JournalError(
                f"the router failed to write its journal and could not read it back "
                f"({self._failed}); call Router.reopen() once the disk is writable again "
                "(or close it, then reopen the journal with Router.open())"
            )
        if self._txn_error is not None:
            raise JournalError(
                f"{self._journal.label}: an earlier write of this group failed "
                f"({self._txn_error}); the group is rolled back when it ends"
            )

    def _begin(self) -> None:
        try:
            self._journal.begin()
        except (sqlite3.Error, OSError) as exc:  # the journal takes no write: not writable
            error = JournalError(f"{self._journal.label}: cannot start a transaction: {exc}")
            self._write_error = error
            raise error from exc
        self._txn_start = self._journal.last_seq

    def _write(self) -> _Write:
        """One transaction around a call, unless inside ``group`` (which owns it)."""
        return _Write(self)

    def _finish(self, *, reload: bool = True, raising: bool = True) -> None:
        """Commit the open transaction; on failure roll everything of it back and raise.

        A transaction fails when its COMMIT fails or when one of its writes failed earlier
        (SQLite may already have rolled it back then). Either way it is rolled back and, unless
        ``reload`` is False (a caller that undoes its own changes), the in-memory state is
        rebuilt from the journal's committed events: the calls of the failed transaction change
        nothing, in the journal or in memory, and ``JournalError`` is raised (unless
        ``raising`` is False: the caller's own error is already on its way). The router stays
        usable: the next call tries the disk again, and ``writable`` is False until a
        transaction commits.
        """
        error: BaseException
        if self._txn_error is None:
            try:
                self._journal.commit()
            except (sqlite3.Error, OSError) as exc:
                error = JournalError(f"{self._journal.label}: cannot commit the journal: {exc}")
                error.__cause__ = exc
            except BaseException:  # an interrupt during COMMIT: the outcome is unknown
                self._roll_back(reload)
                raise
            else:
                if self._journal.last_seq != self._txn_start:  # something reached the disk
                    self._write_error = None
                return
        else:
            error = JournalError(
                f"{self._journal.label}: the transaction is rolled back: a write failed "
                f"({self._txn_error})"
            )
            error.__cause__ = self._txn_error
        self._txn_error = None
        self._write_error = error
        _log.error("%s", error)
        self._roll_back(reload)
        if raising:
            raise error

    def _abandon(self, error: BaseException) -> None:
        """Roll back the open transaction that ``error`` leaves (a call's own error, an
        interrupt, the caller's code inside a group): nothing of it is committed, and memory is
        rebuilt from the committed events unless nothing can have changed (a validation error
        of the router's before any write). After a failed write, as ``_finish``."""
        if self._txn_error is not None:
            self._finish(raising=False)
            return
        wrote = self._journal.last_seq != self._txn_start
        self._roll_back(reload=wrote or not isinstance(error, MSRouteError))

    def _roll_back(self, reload: bool) -> None:
        self._journal.rollback()
        if reload:
            self._reload_committed()

    def _reload_committed(self) -> None:
        """The in-memory state of the committed events, after a failed transaction. If the
        journal cannot be read either, the router is failed (calls raise until
        ``reopen`` succeeds)."""
        write_error = self._write_error
        try:
            self._rebuild()
        except (MSRouteError, sqlite3.Error, OSError, ValueError, KeyError, TypeError) as exc:
            self._failed = exc
        self._write_error = write_error

    def probe(self) -> bool:
        """Check now that the journal takes a write, and return ``writable``.

        A router whose last write failed learns this way that the disk recovered without
        waiting for traffic (one small write: the ``checked`` meta entry); one that needs
        reopening is reopened. Outside a group only. On a nearly full disk a small write may
        pass where a larger one fails: the next failing call makes the router unwritable again.
        """
        if self._closed:
            return False
        if self._depth:
            raise MSRouteError("probe() inside a group(): call it between groups")
        if self._failed is not None:
            try:
                self.reopen()
            except MSRouteError:
                return False
            return True
        if self._write_error is None:
            return True
        journal = self._journal
        try:
            journal.begin()
            journal.put_meta("checked", repr(time.time()))
            journal.commit()
        except (sqlite3.Error, OSError) as exc:
            journal.rollback()
            self._write_error = JournalError(f"{journal.label}: cannot write the journal: {exc}")
            return False
        self._write_error = None
        return True

    def reopen(self) -> None:
        """Reopen the journal in place and rebuild the state from it, then check that it can
        be written (one small write): how a router that failed to write recovers once the
        disk is writable again.

        Raises
        ------
        JournalError
            The journal still cannot be opened, read or written (the router stays failed).
        """
        if self._closed:
            raise MSRouteError("the router is closed")
        journal = self._journal
        if journal.path is None:  # a memory journal never fails to write
            self._failed = self._write_error = None
            return
        journal.close()
        try:
            fresh = Journal(journal.path, self._base_config.journal_sync, create=False)
        except JournalError as exc:
            self._failed = exc
            raise
        try:
            self._attach(fresh)
            self._rebuild()
            self._begin()
            fresh.put_meta("checked", repr(time.time()))
            fresh.commit()
        except (MSRouteError, sqlite3.Error, OSError, ValueError, KeyError, TypeError) as exc:
            fresh.rollback()
            error = exc if isinstance(exc, JournalError) else JournalError(f"{fresh.label}: {exc}")
            self._failed = error
            raise error from exc
        _log.info("%s: reopened, %d events", fresh.label, fresh.last_seq)

    @contextmanager
    def group(self) -> Iterator[Self]:
        """Commit every call inside the block in one transaction (group commit); re-entrant.

        Each call validates first: one that raises changed no state and wrote no row, and the
        others proceed. On exit one COMMIT makes them all durable; only then may they be
        acknowledged. If that COMMIT fails, or a write inside the block failed (later calls
        of the block then raise ``JournalError``), the whole block is rolled back, in the
        journal and in memory, and the block raises ``JournalError``: none of its calls
        may be acknowledged. So is a block that an exception leaves (an error not caught
        inside it, an interrupt): it is rolled back and the exception goes on.
        """
        self._check_usable()
        if self._depth == 0:
            self._begin()
        self._depth += 1
        try:
            yield self
        except BaseException as error:
            self._depth -= 1
            if self._depth == 0:
                self._abandon(error)
            raise
        self._depth -= 1
        if self._depth == 0:
            self._finish()
            self._maybe_snapshot()

    def _append(
        self,
        kind: str,
        ref: str | None,
        now: float,
        payload: dict[str, Any],
        blob: bytes | None,
        share: tuple[int | None] | None = None,
    ) -> int:
        try:
            return self._journal.append(kind, ref, now, payload, blob, share)
        except (sqlite3.Error, OSError) as exc:
            self._txn_error = exc
            raise JournalError(f"{self._journal.label}: cannot write the journal: {exc}") from exc

    def close(self) -> None:
        """Close the journal (idempotent); an unfinished group's writes are rolled back."""
        if not self._closed:
            self._closed = True
            self._journal.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
