"""The events of a router's journal, numbered 1, 2, ... as they are appended: what the SQLite
journal (``msroute.router.journal``) and the journal of a router without a file
(``MemoryJournal``) share.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["Event", "EventLog", "MemoryJournal"]

#: One row of ``events``: seq, kind, ref, time, payload (decoded), probs (raw bytes or None).
Event = tuple[int, str, str | None, float, dict[str, Any], bytes | None]


class EventLog:
    """What both journals share: events numbered 1, 2, ... in the order they are appended."""

    last_seq: int
    #: The journal's identity: the prefix of its router's own decision ids, named by its tail.
    run_id: str
    #: The key that binds its snapshots to it (``msroute.router.snapshots``).
    snapshot_key: bytes
    #: The last distribution stored under each sharing key, and the event holding it.
    _shared: dict[Hashable, tuple[bytes, int]]

    def append(
        self,
        kind: str,
        ref: str | None,
        time: float,
        payload: dict[str, Any],
        probs: bytes | None = None,
        share: Hashable | None = None,
    ) -> int:
        """Append one event; returns its sequence number.

        ``share``: a key (a decision's context) under which ``probs`` may point at the last
        distribution stored with the same key when the two are equal byte for byte.
        """
        seq = self.last_seq + 1
        probs_seq = None
        if probs is not None and share is not None:
            last = self._shared.get(share)
            if last is not None and last[0] == probs:
                probs, probs_seq = last
            else:
                self._shared[share] = (probs, seq)
        self._store((seq, kind, ref, time, payload, probs), probs_seq)
        self.last_seq = seq
        return seq

    def _store(self, event: Event, probs_seq: int | None) -> None:
        """Keep one event (numbered by ``append``); ``probs_seq``: the earlier event that
        holds its distribution (the same bytes), if any."""
        raise NotImplementedError


class MemoryJournal(EventLog):
    """The journal of a router without a file: the same interface, events kept in a list.

    Nothing is durable and nothing needs to be: a transaction is a no-op. Snapshots are not
    kept (there is nothing to recover from).
    """

    path: Path | None = None
    label = ":memory:"

    def __init__(self) -> None:
        self.last_seq = 0
        self.run_id = uuid.uuid4().hex[:12]
        self.snapshot_key = secrets.token_bytes(32)
        self._shared = {}
        self._events: list[Event] = []
        self._by_ref: dict[str, list[int]] = {}
        self._meta: dict[str, str] = {}
        self._txn_from = 0

    def begin(self) -> None:
        """Mark where the transaction's events start."""
        self._txn_from = len(self._events)

    def commit(self) -> None:
        """Nothing to do."""

    def rollback(self) -> None:
        """Drop the open transaction's events (a memory journal never fails to write: this
        undoes a call or group that an exception left)."""
        for event in self._events[self._txn_from :]:
            ref = event[2]
            if ref is not None:
                seqs = self._by_ref[ref]
                seqs.pop()
                if not seqs:
                    del self._by_ref[ref]
        del self._events[self._txn_from :]
        self.last_seq = len(self._events)
        self._shared.clear()

    def set_sync(self, sync: str) -> None:
        """Nothing to do."""

    @property
    def in_transaction(self) -> bool:
        """Never: a memory journal has no transactions."""
        return False

    @property
    def quick_commit(self) -> bool:
        """Always: a commit does nothing."""
        return True

    def _store(self, event: Event, probs_seq: int | None) -> None:
        ref = event[2]
        if ref is not None:
            self._by_ref.setdefault(ref, []).append(len(self._events))
        self._events.append(event)

    def put_meta(self, key: str, value: str) -> None:
        """Set one meta entry."""
        self._meta[key] = value

    def put_snapshot(
        self, seq: int, policy: bytes, router: dict[str, Any], keep: int | None = None
    ) -> None:
        """Snapshots of a memory journal are not kept."""

    def meta(self, key: str) -> str:
        """One meta entry."""
        return self._meta[key]

    def last_snapshot(self) -> tuple[int, bytes, dict[str, Any]] | None:
        """There is none."""
        return None

    def snapshots(self) -> Iterator[tuple[int, bytes, Any]]:
        """There are none."""
        yield from ()

    def events(self, after: int = 0, limit: int | None = None) -> Iterator[Event]:
        """The events with ``seq > after``, in order (at most ``limit``)."""
        stop = None if limit is None else after + limit
        yield from self._events[max(after, 0) : stop]

    def events_of(self, ref: str) -> list[Event]:
        """Every event about one id, in order."""
        return [self._events[i] for i in self._by_ref.get(ref, ())]

    def close(self) -> None:
        """Nothing to release."""
