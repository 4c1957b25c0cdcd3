"""What a router snapshot holds, and how it is checked when read back.

A snapshot is a summary of the journal up to one event, taken so that opening a journal does not
replay it from the start: the policy (the versioned policy zip of ``msroute.policies.persist``,
which carries its own checksum) and the router's state as JSON. The router's state holds state,
not history: its size does not grow with the traffic. In particular the pending decisions are not
copied into it; it holds only the journal position of the oldest one (``pending_from``) and their
number, and recovery finds them again among the events from there on (a decision is pending unless
a feedback, an expiry or the removal of one of its experts closed it). Their number makes that
search checkable.

A snapshot is bound to its journal: the router state carries an HMAC-SHA256 (``hmac``), keyed
with the journal's own random key (``meta["snapshot_key"]``, made with the journal), of the
journal's run id, the snapshot's event, the SHA-256 of its policy zip and the canonical JSON of
its state. A snapshot changed and re-hashed, copied from another journal or moved to another
event does not check, and neither does one rewritten in an earlier format (1: no checksum;
2: a SHA-256 of the state alone, which anyone can recompute): a journal accepts snapshots of
the current format only. A journal made before snapshots were bound gets its key when it is
first opened, and its format 2 snapshots whose SHA-256 holds are signed with it then (``bind``).

Only the last ``SNAPSHOTS_KEPT`` snapshots are kept: the newest, and the one before it as a
fallback should the newest be unreadable.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from typing import Any

from msroute.errors import JournalError

__all__ = [
    "SNAPSHOTS_KEPT",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_RETRY_EVENTS",
    "bind",
    "check_snapshot_state",
    "snapshot_state",
]

#: Version of the router state's layout: 3, format 2's fields bound to the journal by ``hmac``
#: (format 1 held every pending decision; format 2 a bare SHA-256).
SNAPSHOT_FORMAT = 3

#: How many snapshots a journal keeps (older ones are deleted in the transaction that stores
#: a new one).
SNAPSHOTS_KEPT = 2

#: After a snapshot fails to be written (a full disk), how many events later it is tried again.
SNAPSHOT_RETRY_EVENTS = 100


def _canonical(state: dict[str, Any]) -> bytes:
    return json.dumps(state, sort_keys=True, separators=(",", ":")).encode()


def _digest(state: dict[str, Any]) -> str:
    """The SHA-256 of a format 2 state (its fields but ``sha256``)."""
    return hashlib.sha256(_canonical(state)).hexdigest()


def _mac(key: bytes, run_id: str, seq: int, policy: bytes, state: dict[str, Any]) -> str:
    """The HMAC binding a state (its fields but ``hmac``) to its journal, event and policy."""
    head = f"msroute-snapshot\0{run_id}\0{seq}\0".encode() + hashlib.sha256(policy).digest()
    return hmac.new(key, head + _canonical(state), hashlib.sha256).hexdigest()


def snapshot_state(
    key: bytes, run_id: str, seq: int, policy: bytes, **fields: Any
) -> dict[str, Any]:
    """The router state to store with the snapshot of event ``seq`` of the journal ``run_id``
    (whose snapshot key is ``key``) and its ``policy`` zip: ``fields``, the format number and
    their ``hmac``."""
    state = {"format": SNAPSHOT_FORMAT, **fields}
    return {**state, "hmac": _mac(key, run_id, seq, policy, state)}


def check_snapshot_state(
    state: object, label: str, key: bytes, run_id: str, seq: int, policy: bytes
) -> dict[str, Any]:
    """The stored router state of the snapshot of event ``seq`` (its policy zip: ``policy``),
    checked: a JSON object of the current format whose ``hmac`` matches.

    Raises
    ------
    JournalError
        Not an object, of another format (an earlier one is a downgrade), or its HMAC does not
        match (damaged, changed, or not this journal's snapshot of this event).
    """
    if not isinstance(state, dict):
        raise JournalError(f"{label}: the router state is not a JSON object")
    version = state.get("format", 1)
    if version != SNAPSHOT_FORMAT:
        earlier = isinstance(version, int) and not isinstance(version, bool) and version < 3
        raise JournalError(
            f"{label}: router state format {version!r}; this journal's snapshots are format "
            f"{SNAPSHOT_FORMAT}"
            + (" (an earlier format is refused: it is not bound to the journal)" if earlier else "")
        )
    body = {k: v for k, v in state.items() if k != "hmac"}
    given = state.get("hmac")
    if not isinstance(given, str) or not hmac.compare_digest(
        given, _mac(key, run_id, seq, policy, body)
    ):
        raise JournalError(
            f"{label}: the snapshot's HMAC does not match (damaged, changed, or not this "
            "journal's snapshot of this event)"
        )
    return state


def bind(
    snapshots: Iterable[tuple[int, bytes, Any]], key: bytes, run_id: str
) -> list[tuple[int, dict[str, Any]]]:
    """The stored snapshots (seq, policy zip, router state) of a journal made before snapshots
    were bound, to store again bound with its new ``key``: those of format 2 whose SHA-256
    holds (as their journal accepted them), as (seq, router state); the others are not
    returned (the journal refuses them from now on, and recovers without them)."""
    bound = []
    for seq, policy, state in snapshots:
        if not isinstance(state, dict) or state.get("format") != 2:
            continue
        body = {k: v for k, v in state.items() if k != "sha256"}
        if state.get("sha256") != _digest(body):
            continue
        fields = {k: v for k, v in body.items() if k != "format"}
        bound.append((seq, snapshot_state(key, run_id, seq, policy, **fields)))
    return bound
