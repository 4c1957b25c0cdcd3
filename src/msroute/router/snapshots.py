"""What a router snapshot holds, and how it is checked when read back.

A snapshot is a summary of the journal up to one event, taken so that opening a journal does not
replay it from the start: the policy (the versioned policy zip of ``msroute.policies.persist``,
which carries its own checksum) and the router's state as JSON. The router's state holds state,
not history: its size does not grow with the traffic. In particular the pending decisions are not
copied into it; it holds only the journal position of the oldest one (``pending_from``) and their
number, and recovery finds them again among the events from there on (a decision is pending unless
a feedback, an expiry or the removal of one of its experts closed it). Their number makes that
search checkable, and a SHA-256 of the canonical JSON covers the whole state.

Only the last ``SNAPSHOTS_KEPT`` snapshots are kept: the newest, and the one before it as a
fallback should the newest be unreadable.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from msroute.errors import JournalError

__all__ = [
    "SNAPSHOTS_KEPT",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_RETRY_EVENTS",
    "check_snapshot_state",
    "snapshot_state",
]

#: Version of the router state's layout (format 1, still read, holds every pending decision).
SNAPSHOT_FORMAT = 2

#: How many snapshots a journal keeps (older ones are deleted in the transaction that stores
#: a new one).
SNAPSHOTS_KEPT = 2

#: After a snapshot fails to be written (a full disk), how many events later it is tried again.
SNAPSHOT_RETRY_EVENTS = 100


def _digest(state: dict[str, Any]) -> str:
    body = json.dumps(state, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def snapshot_state(**fields: Any) -> dict[str, Any]:
    """The router state to store: ``fields`` plus the format number and their SHA-256."""
    state = {"format": SNAPSHOT_FORMAT, **fields}
    return {**state, "sha256": _digest(state)}


def check_snapshot_state(state: object, label: str) -> dict[str, Any]:
    """The stored router state of a snapshot, checked: a JSON object whose checksum matches (a
    format 1 state, without one, is taken as it is).

    Raises
    ------
    JournalError
        Not an object, of an unknown format, or its checksum does not match.
    """
    if not isinstance(state, dict):
        raise JournalError(f"{label}: the router state is not a JSON object")
    version = state.get("format", 1)
    if version == 1:
        return state
    if version != SNAPSHOT_FORMAT:
        raise JournalError(f"{label}: router state format {version!r}, this msroute reads 1 or 2")
    body = {k: v for k, v in state.items() if k != "sha256"}
    if state.get("sha256") != _digest(body):
        raise JournalError(f"{label}: the router state's checksum does not match (damaged)")
    return state
