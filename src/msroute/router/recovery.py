"""Recovery of a live router: snapshots, and the state of a journal's committed events.

``load`` rebuilds a router from its journal (the newest readable snapshot, then a replay of the
events after it), ``take_snapshot`` writes a snapshot, ``replay`` applies one logged event. A
replayed event goes through the same transition as the live call that logged it (the router's
``_decide``, ``_apply_feedback``, ``_apply_expire``, ``_apply_change``); replay adds only the
checks that the journal agrees with itself (a decision re-derives as logged, a feedback's status
matches the pending set). What a snapshot holds: ``msroute.router.snapshots``.
"""

from __future__ import annotations

import heapq
import logging
import sqlite3
from typing import TYPE_CHECKING, Any

import numpy as np

from msroute.errors import JournalError, MSRouteError
from msroute.policies.persist import policy_bytes, policy_from_bytes
from msroute.router.config import RouterConfig
from msroute.router.journal import Event
from msroute.router.pending import Pending as _Pending
from msroute.router.snapshots import SNAPSHOTS_KEPT, check_snapshot_state, snapshot_state
from msroute.router.streams import DecisionStreams

if TYPE_CHECKING:
    from msroute.router.core import Router

__all__ = ["load", "replay", "take_snapshot"]

_log = logging.getLogger("msroute.router")


def load(router: Router, use_snapshot: bool) -> None:
    """The state of the journal's committed events: the newest readable snapshot (or
    none), then a replay of the events after it (on a router fresh from ``_setup``).

    A snapshot that cannot be read back (damaged, or its pending decisions do not match
    the events) is logged and skipped for the one before it, or for a replay from the start.
    """
    journal = router._journal
    after = 0
    for seq, blob, raw in journal.snapshots() if use_snapshot else ():
        label = f"{journal.label}: snapshot {seq}"
        try:
            _restore(router, blob, check_snapshot_state(raw, label), seq)
        except (MSRouteError, ValueError, KeyError, TypeError) as exc:
            _log.warning("%s: not used: %s", label, exc)
            router._setup(router._base_config)
            continue
        after = seq
        break
    for event in journal.events(after):
        replay(router, event)
    router._snap_seq = after


def _restore_decision(router: Router, did: str, p: _Pending) -> None:
    """Give a pending decision restored from a snapshot the whole distribution it was
    drawn from, read back from its journal event, as the live router holds it: a policy
    may learn from every expert's probability, not only the drawn ones' (OMD's model
    estimator does). Only while the expert layout is still the decision's, as live."""
    for _, kind, _, _, payload, blob in router._journal.events_of(did):
        if kind == "decision" and blob is not None and payload["layout"] == router._layout:
            cols = np.array([[router._col[e] for e in p.draws]], dtype=np.int64)
            router._cache_decision(p, cols, np.frombuffer(blob, dtype=np.float64)[None, :])


def take_snapshot(router: Router) -> None:
    """Write a snapshot in its own transaction (outside any group)."""
    seq = router._journal.last_seq
    blob = policy_bytes(router.policy)
    state = snapshot_state(
        ids=router._ids,
        costs=router._costs.tolist(),
        retired=sorted(router._retired),
        layouts=router._layouts,
        counters={
            "n": router._n,
            "applied": router._applied,
            "late": router._late,
            "expired": router._expired,
            "version": router._version,
        },
        cost_sum=router._cost_sum.tolist(),
        config=router.config.to_dict(),
        pending_from=min((p.seq for p in router._pending.values()), default=seq + 1),
        pending=len(router._pending),
    )
    try:
        router._journal.begin()
        router._journal.put_snapshot(seq, blob, state, keep=SNAPSHOTS_KEPT)
        router._journal.commit()
    except (sqlite3.Error, OSError) as exc:
        router._journal.rollback()
        raise JournalError(f"{router._journal.label}: cannot store a snapshot: {exc}") from exc
    router._snap_seq = seq


def _restore(router: Router, blob: bytes, st: dict[str, Any], seq: int) -> None:
    """The state of snapshot ``seq`` (``st``: checked by ``read_snapshot_state``)."""
    router._ids = list(st["ids"])
    router._col = {e: i for i, e in enumerate(router._ids)}
    router._costs = np.array(st["costs"], dtype=np.float64).reshape(len(router._ids), -1)
    router._cost_rows = router._costs.tolist()
    router._retired = set(st["retired"])
    router._layouts = [list(x) for x in st["layouts"]]
    if "config" in st:  # the configuration as changed by events before the snapshot
        router.config = RouterConfig.from_dict(st["config"])
        router._constraints = router._constraints_of(router.config)
    policy = policy_from_bytes(blob, f"{router._journal.label}: snapshot")
    policy.streams = DecisionStreams(router.config.seed, policy.streams.uniforms.block)
    router.policy = policy
    counters = st.get("counters", st)
    router._n, router._applied = int(counters["n"]), int(counters["applied"])
    router._late, router._expired = int(counters["late"]), int(counters["expired"])
    router._version = int(counters["version"])
    router._cost_sum = np.array(st["cost_sum"], dtype=np.float64)
    if "pending" in st and isinstance(st["pending"], dict):  # snapshots of format 1
        for did, (n, draws, probs, ctx, cost, deadline) in st["pending"].items():
            router._pending[did] = _Pending(
                int(n),
                tuple(draws),
                None if probs is None else tuple(probs),
                ctx,
                np.array(cost, dtype=np.float64),
                float(deadline),
                None,
                -1,
                0,
            )
            _restore_decision(router, did, router._pending[did])
    else:
        _pending_from_journal(router, int(st["pending_from"]), seq, int(st["pending"]))
    for did, p in router._pending.items():  # re-armed: they expire as if never stopped
        heapq.heappush(router._deadlines, (p.deadline, p.n, did))


def _pending_from_journal(router: Router, first: int, last: int, count: int) -> None:
    """The decisions pending at snapshot ``last``, found again in the journal's events
    ``first .. last``: the decisions among them that no feedback, expiry or expert
    removal closed. ``count``: how many the snapshot says there are."""
    pending = router._pending
    shared = b""  # consecutive decisions mostly hold the same distribution: one copy
    for seq, kind, ref, _, payload, blob in router._journal.events(first - 1, last - first + 1):
        if kind == "decision" and ref is not None:
            ctx = None if payload["context"] is None else router._ctx[payload["context"]]
            probs = payload["probs"]
            p = _Pending(
                int(payload["n"]),
                tuple(payload["draws"]),
                None if probs is None else tuple(probs),
                ctx,
                np.array(payload["cost"], dtype=np.float64),
                float(payload["deadline"]),
                None,
                -1,
                seq,
            )
            pending[ref] = p
            if blob is not None:
                if blob == shared:
                    blob = shared
                p.blob, p.blob_layout, shared = blob, int(payload["layout"]), blob
        elif kind in ("feedback", "expire"):
            pending.pop(ref or "", None)
        elif kind == "remove_expert":
            for did in payload["expired"]:
                pending.pop(did, None)
    if len(pending) != count:
        raise JournalError(
            f"{router._journal.label}: snapshot {last} has {count} pending decisions, its "
            f"events give {len(pending)}"
        )


def replay(router: Router, event: Event) -> None:
    """Apply one journal event (no write); a decision is re-derived and verified."""
    seq, kind, ref, now, payload, blob = event
    label = router._journal.label
    if kind in ("set_bounds", "configure"):
        router._apply_change(kind, ref, payload, None)
        return
    if ref is None:
        raise JournalError(f"{label}: event {seq} ({kind}) has no id")
    if kind == "decision":
        if payload["n"] != router._n:
            raise JournalError(
                f"{label}: event {seq}: decision {ref!r} is number {payload['n']}, the replay "
                f"is at {router._n} (events missing?)"
            )
        ctx = router._context_index(payload["context"])
        mask = router._eligible_mask(payload["eligible"])
        _, redone, probs = router._decide(ref, ctx, mask, now, seq)
        router._pending[ref].deadline = float(payload["deadline"])
        if redone["draws"] != payload["draws"] or probs != blob:
            raise JournalError(
                f"{label}: event {seq}: decision {ref!r} (number {payload['n']}) re-derives "
                f"as draws {redone['draws']} but the journal has {payload['draws']}"
                + ("" if redone["draws"] != payload["draws"] else " (propensities differ)")
            )
    elif kind == "feedback":
        pending = router._pending.get(ref)
        realized = (
            pending.cost
            if pending is not None
            else np.array(router._decision_cost(ref), dtype=np.float64)
        )
        if (pending is None) != (payload["status"] in ("late", "expert_removed")):
            raise JournalError(f"{label}: event {seq}: feedback status of {ref!r} disagrees")
        cost = None if payload["cost"] is None else np.array(payload["cost"], dtype=np.float64)
        router._apply_feedback(ref, pending, float(payload["reward"]), cost, realized, False)
    elif kind == "expire":
        pending = router._pending.get(ref)
        if pending is None:
            raise JournalError(f"{label}: event {seq}: {ref!r} expires but is not pending")
        router._apply_expire(ref, pending, payload["reward"], False)
    elif kind in ("add_expert", "remove_expert"):
        router._apply_change(kind, ref, payload, None)
    else:
        raise JournalError(f"{label}: event {seq}: unknown kind {kind!r}")
