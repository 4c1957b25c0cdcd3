"""The events of a router's journal, numbered 1, 2, ... as they are appended: what the SQLite
journal (``msroute.router.journal``) and the journal of a router without a file
(``MemoryJournal``) share.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["Event", "EventLog", "MemoryJournal", "read_back"]

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


#: An event as a ``MemoryJournal`` keeps it, one flat tuple: seq, kind, ref, time, its
#: payload's keys (a tuple), its distribution, then the payload's values.
_Kept = tuple[Any, ...]


def read_back(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A payload the router made (its sequences tuples) as a journal gives it back: a dict of
    its own, its sequences lists (JSON's arrays) and its tables (a change's bounds or settings)
    dicts of their own."""
    return {
        k: list(v) if type(v) in (tuple, list) else dict(v) if type(v) is dict else v
        for k, v in items
    }


def _thawed(kept: _Kept) -> Event:
    """A kept event as the file journal gives it back (``Journal.events``)."""
    seq, kind, ref, time, keys, probs = kept[:6]
    return seq, kind, ref, time, read_back(zip(keys, kept[6:], strict=True)), probs


class MemoryJournal(EventLog):
    """The journal of a router without a file: the same interface, events kept in a list.

    Nothing is durable and nothing needs to be: a transaction is a no-op. Snapshots are not
    kept (there is nothing to recover from).

    An event is kept as one flat tuple of plain values: the payload's keys (one tuple per set
    of keys) and its values, whose sequences the router makes tuples
    (``msroute.router.state``); the positions of an id's events are a tuple of ints. The
    garbage collector stops tracking such a tuple once it has stopped tracking what it holds
    (a tuple of numbers and strings at its first pass, the event at the next: a dict it would
    track until a full collection, a list for ever), so that a long run's events neither
    trigger full collections nor make them longer. They are read back as the file journal
    reads them, with dicts and lists (``_thawed``).
    """

    path: Path | None = None
    label = ":memory:"

    def __init__(self) -> None:
        self.last_seq = 0
        self.run_id = uuid.uuid4().hex[:12]
        self.snapshot_key = secrets.token_bytes(32)
        self._shared = {}
        self._events: list[_Kept] = []
        self._keys: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._by_ref: dict[str, tuple[int, ...]] = {}
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
                seqs = self._by_ref[ref][:-1]
                if seqs:
                    self._by_ref[ref] = seqs
                else:
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
        seq, kind, ref, time, payload, probs = event
        if ref is not None:
            self._by_ref[ref] = (*self._by_ref.get(ref, ()), len(self._events))
        keys = tuple(payload)
        keys = self._keys.setdefault(keys, keys)
        self._events.append((seq, kind, ref, time, keys, probs, *payload.values()))

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
        for event in self._events[max(after, 0) : stop]:
            yield _thawed(event)

    def events_of(self, ref: str) -> list[Event]:
        """Every event about one id, in order."""
        return [_thawed(self._events[i]) for i in self._by_ref.get(ref, ())]

    def close(self) -> None:
        """Nothing to release."""
