"""Recovery of a live router: snapshots, and the state of a journal's committed events.

``load`` rebuilds a router from its journal (the newest readable snapshot, then a replay of the
events after it), ``take_snapshot`` writes a snapshot, ``replay`` applies one logged event. A
replayed event is read back into its ``msroute.router.state`` event and goes through the same
``apply`` as the live call that logged it; replay adds only the checks that the journal agrees
with itself (a decision re-derives as logged, a feedback's status matches the pending set).
What a snapshot holds: ``msroute.router.snapshots``.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Protocol

import numpy as np

from msroute.errors import JournalError, MSRouteError
from msroute.policies.persist import policy_bytes, policy_from_bytes
from msroute.policies.registry import get_policy_class
from msroute.router.changes import FIXED_KEYS, SETTING_KEYS
from msroute.router.config import RouterConfig, cost_vector
from msroute.router.eventlog import read_back
from msroute.router.inputs import check_reward, decision_cost
from msroute.router.journal import Event as JournalEvent
from msroute.router.journal import Journal, MemoryJournal
from msroute.router.pending import Pending
from msroute.router.snapshots import (
    SNAPSHOT_RETRY_EVENTS,
    SNAPSHOTS_KEPT,
    check_snapshot_state,
    snapshot_state,
)
from msroute.router.state import (
    AddExpert,
    Configure,
    CostReport,
    Decide,
    EventMismatch,
    Expire,
    Feedback,
    RemoveExpert,
    RouterState,
    SetBounds,
    SetCost,
    apply,
    constraints_of,
)
from msroute.router.streams import DecisionStreams

__all__ = ["Recoverable", "load", "replay", "take_snapshot"]

_log = logging.getLogger("msroute.router")


class Recoverable(Protocol):
    """What recovery reads and sets of a router (``msroute.router.core.Router``, which calls
    this module): its journal, its state and snapshot counters, and its fresh start."""

    _journal: Journal | MemoryJournal
    _base_config: RouterConfig
    _state: RouterState
    _snap_seq: int  # the seq of the last snapshot
    _snap_before: int  # the one before it (a snapshot handed to the folder thread may fail)
    _snap_retry: int  # after a failed snapshot: the seq from which to try again

    @property
    def config(self) -> RouterConfig: ...

    def _setup(self, cfg: RouterConfig) -> None: ...


def load(router: Recoverable, use_snapshot: bool) -> None:
    """The state of the journal's committed events: the newest readable snapshot (or
    none), then a replay of the events after it (on a router fresh from ``_setup``).

    A snapshot that cannot be read back (damaged, or its pending decisions do not match
    the events) is logged and skipped for the one before it, or for a replay from the start.
    The journal's durability is then the state's ``journal_sync``, which a snapshot or a
    replayed change may have set.
    """
    journal = router._journal
    after = 0
    for seq, blob, raw in journal.snapshots() if use_snapshot else ():
        label = f"{journal.label}: snapshot {seq}"
        try:
            st = check_snapshot_state(raw, label, journal.snapshot_key, journal.run_id, seq, blob)
            router._state = _restore(router, blob, st, seq)
        except (MSRouteError, ValueError, KeyError, TypeError) as exc:
            _log.warning("%s: not used: %s", label, exc)
            router._setup(router._base_config)
            continue
        after = seq
        break
    for event in journal.events(after):
        replay(router, event)
    router._snap_seq = after
    if not journal.in_transaction:  # reconfigure() sets it after its COMMIT
        journal.set_sync(router._state.config.journal_sync)  # the snapshot's or a change's


def snapshot_due(router: Recoverable) -> bool:
    """Whether the router's periodic snapshot is due (a router without a file takes none)."""
    last = router._journal.last_seq
    return (
        router._journal.path is not None
        and last - router._snap_seq >= router.config.snapshot_every
        and last >= router._snap_retry
    )


def maybe_snapshot(router: Recoverable) -> None:
    """Take the router's periodic snapshot when it is due. Its failure fails no call (the events
    are already durable, and a snapshot only shortens recovery): it is logged and tried again
    ``SNAPSHOT_RETRY_EVENTS`` events later. With folds in the background
    (``Journal.fold_in_background``) the snapshot's transaction is the folder thread's: a
    failure is learnt at a later call, and the snapshot is retried as well."""
    journal = router._journal
    failed = journal.snapshot_failure() if isinstance(journal, Journal) else None
    if failed is not None:
        router._snap_seq = router._snap_before
        router._snap_retry = failed + SNAPSHOT_RETRY_EVENTS
    if not snapshot_due(router):
        return
    last = journal.last_seq
    try:
        take_snapshot(router, background=True)
    except JournalError as exc:
        router._snap_retry = last + SNAPSHOT_RETRY_EVENTS
        _log.warning("%s (the events are durable; retried later)", exc)


def take_snapshot(router: Recoverable, background: bool = False) -> None:
    """Write a snapshot in its own transaction (outside any group); with ``background``, on
    the journal's folder thread if it folds in the background and is free (else here)."""
    journal, state = router._journal, router._state
    seq = journal.last_seq
    blob = policy_bytes(state.policy)
    fields = snapshot_state(
        journal.snapshot_key,
        journal.run_id,
        seq,
        blob,
        ids=state.ids,
        costs=state.costs.tolist(),
        retired=sorted(state.retired),
        layouts=state.layouts,
        counters={
            "n": state.n,
            "applied": state.applied,
            "late": state.late,
            "expired": state.expired,
            "version": state.version,
        },
        cost_sum=state.cost_sum.tolist(),
        config=state.config.to_dict(),
        pending_from=min((p.seq for p in state.pending.values()), default=seq + 1),
        pending=len(state.pending),
    )
    router._snap_before = router._snap_seq
    if background and isinstance(journal, Journal) and journal.fold_in_background:
        if journal.queue_snapshot(seq, blob, fields, keep=SNAPSHOTS_KEPT):
            router._snap_seq = seq
        return  # else the folder is busy: due still, tried again when the next group ends
    try:
        journal.begin()
        journal.put_snapshot(seq, blob, fields, keep=SNAPSHOTS_KEPT)
        journal.commit()
    except (sqlite3.Error, OSError) as exc:
        journal.rollback()
        raise JournalError(f"{journal.label}: cannot store a snapshot: {exc}") from exc
    router._snap_seq = seq


def _restore(router: Recoverable, blob: bytes, st: dict[str, Any], seq: int) -> RouterState:
    """The state of snapshot ``seq`` (``st``: checked by ``check_snapshot_state``), with its
    pending decisions found again and re-armed: they expire as if never stopped."""
    fresh = router._state
    cfg = RouterConfig.recorded(st["config"])  # as changed by the events before the snapshot
    policy = policy_from_bytes(blob, f"{router._journal.label}: snapshot")
    policy.streams = DecisionStreams(cfg.seed, policy.streams.uniforms.block)
    ids = list(st["ids"])
    counters = st["counters"]
    state = RouterState(
        config=cfg,
        policy=policy,
        ids=ids,
        costs=np.array(st["costs"], dtype=np.float64).reshape(len(ids), -1),
        contexts=fresh.contexts,
        retired=set(st["retired"]),
        layouts=[list(x) for x in st["layouts"]],
        n=int(counters["n"]),
        applied=int(counters["applied"]),
        late=int(counters["late"]),
        expired=int(counters["expired"]),
        version=int(counters["version"]),
        cost_sum=np.array(st["cost_sum"], dtype=np.float64),
    )
    _pending_from_journal(router, state, int(st["pending_from"]), seq, int(st["pending"]))
    for did, p in state.pending.items():
        state.push_deadline(p.deadline, p.n, did)
    _check_restored(state, router._base_config)
    return state


def _check_restored(state: RouterState, base: RouterConfig) -> None:
    """Refuse (JournalError: ``load`` then tries the snapshot before) a restored state that
    its journal could not have made, as a constructor refuses its arguments: the keys a running
    router cannot change differ from the journal's, the policy is of another class or holds
    other experts, costs or bounds than the state, ids repeat, a cost or a counter is out of
    range, the counters do not add up (each decision is pending, applied or expired), or
    the current expert layout (and the configuration's experts, if the snapshot holds its
    configuration: ``own_config``) are not the state's experts."""
    cfg, policy = state.config, state.policy
    bad = [
        f"{key} differs from the journal's"
        for key in FIXED_KEYS
        if getattr(cfg, key) != getattr(base, key)
    ]
    k, d = len(state.ids), len(cfg.cost_names)
    if len(set(state.ids)) != k or set(state.ids) & state.retired:
        bad.append("an expert id repeats, or is also retired")
    if state.costs.shape != (k, d) or not (
        np.isfinite(state.costs).all() and (state.costs >= 0).all()
    ):
        bad.append(f"the costs are not {k} x {d} finite numbers >= 0")
    if state.cost_sum.shape != (d,) or not (
        np.isfinite(state.cost_sum).all() and (state.cost_sum >= 0).all()
    ):
        bad.append(f"cost_sum is not {d} finite numbers >= 0")
    if not state.layouts or state.layouts[-1] != state.ids:
        bad.append("the current expert layout is not the state's experts")
    elif cfg.experts != {
        e: tuple(row) for e, row in zip(state.ids, state.costs.tolist(), strict=True)
    }:
        bad.append("the configuration's experts are not the state's")
    counters = (state.n, state.applied, state.late, state.expired, state.version)
    if min(counters) < 0 or state.n != state.applied + state.expired + len(state.pending):
        bad.append(f"the counters {counters} are negative or do not add up")
    if type(policy) is not get_policy_class(cfg.policy):
        bad.append(f"the policy is a {type(policy).__name__}, not {cfg.policy!r}")
    elif (
        policy.n_experts != k
        or policy.m_draws != cfg.m_draws
        or any(
            p.costs.shape != state.costs.shape
            or not np.array_equal(p.costs, state.costs)
            or p.constraints.to_dict() != constraints_of(cfg).to_dict()
            for p in policy.problem_batch.problems
        )
    ):
        bad.append("the policy's experts, costs or bounds are not the state's")
    if bad:
        raise JournalError(f"the restored state is not one this journal made: {'; '.join(bad)}")


def _pending_from_journal(
    router: Recoverable, state: RouterState, first: int, last: int, count: int
) -> None:
    """The decisions pending at snapshot ``last``, found again in the journal's events
    ``first .. last``: the decisions among them that no feedback, expiry or expert
    removal closed. ``count``: how many the snapshot says there are."""
    pending = state.pending
    shared = b""  # consecutive decisions mostly hold the same distribution: one copy
    for seq, kind, ref, _, payload, blob in router._journal.events(first - 1, last - first + 1):
        if kind == "decision" and ref is not None:
            ctx = None if payload["context"] is None else state.contexts[payload["context"]]
            probs = payload["probs"]
            p = Pending(
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
        elif kind == "cost" and ref in pending:
            pending[ref].cost = np.array(payload["cost"], dtype=np.float64)
        elif kind == "remove_expert":
            for did in payload["expired"]:
                pending.pop(did, None)
    if len(pending) != count:
        raise JournalError(
            f"{router._journal.label}: snapshot {last} has {count} pending decisions, its "
            f"events give {len(pending)}"
        )


def replay(router: Recoverable, event: JournalEvent) -> None:
    """Apply one journal event (no write); a decision is re-derived and verified. An event the
    state refuses (one the live router could not have written) is a JournalError naming the
    journal and the event."""
    seq, kind, ref, _, _, _ = event
    try:
        _replay(router, event)
    except JournalError:
        raise
    except (EventMismatch, MSRouteError, KeyError, TypeError, ValueError, IndexError) as exc:
        detail = f"its payload has no {exc}" if isinstance(exc, KeyError) else str(exc)
        about = "" if ref is None else f" {ref!r}"
        raise JournalError(
            f"{router._journal.label}: event {seq} ({kind}{about}): {detail}"
        ) from exc


def _replay(router: Recoverable, event: JournalEvent) -> None:
    """``replay``: one event applied, its errors raised as they come."""
    seq, kind, ref, _, payload, _ = event
    label = router._journal.label
    state = router._state
    if kind == "decision":
        _replay_decision(router, event)
    elif kind == "configure":
        other = sorted(set(payload) - SETTING_KEYS)
        if other:
            raise EventMismatch(f"sets {other}: a configure event sets only {sorted(SETTING_KEYS)}")
        apply(state, Configure(dict(payload)))
    elif kind == "set_bounds":
        apply(state, SetBounds(dict(payload["upper"]), dict(payload["lower"])), trusted=False)
    elif ref is None:
        raise JournalError(f"{label}: event {seq} ({kind}) has no id")
    elif kind in ("feedback", "cost"):
        pending = state.pending.get(ref)
        realized = pending.cost if pending is not None else decision_cost(router._journal, ref, seq)
        cost = None if payload["cost"] is None else np.array(payload["cost"], dtype=np.float64)
        if kind == "cost":
            if cost is None or cost.shape != realized.shape:
                raise EventMismatch(f"reports the cost {payload['cost']!r}: not a cost vector")
            state.policy.check_cost(cost[None, :])  # as live
            apply(state, CostReport(ref, cost, realized, payload["status"]), trusted=False)
            return
        reward = check_reward(payload["reward"], state.config, state.policy)  # as live
        fed = Feedback(ref, reward, cost, realized, payload["status"])
        apply(state, fed, trusted=False)
    elif kind == "expire":
        apply(state, Expire(ref, payload["reward"]), trusted=False)
    elif kind == "add_expert":
        if ref in state.col or ref in state.retired:
            raise EventMismatch(f"{ref!r} is already an expert, or was removed")
        vec = cost_vector(payload["cost"], state.config.cost_names, "cost")
        apply(state, AddExpert(ref, list(vec)), trusted=False)
    elif kind == "set_cost":
        if ref not in state.col:
            raise EventMismatch(f"reprices {ref!r}, which is not an expert")
        vec = cost_vector(payload["cost"], state.config.cost_names, "cost")
        apply(state, SetCost(ref, list(vec)), trusted=False)
    elif kind == "remove_expert":
        expired = list(payload["expired"])
        on_it = {d for d, p in state.pending.items() if ref in p.draws}
        if ref not in state.col or len(set(expired)) != len(expired) or set(expired) != on_it:
            raise EventMismatch(
                f"removes {ref!r} closing {expired!r}: the experts are {state.ids!r}, and the "
                f"decisions pending on it {sorted(on_it)!r}"
            )
        apply(state, RemoveExpert(ref, expired), trusted=False)
    else:
        raise JournalError(f"{label}: event {seq}: unknown kind {kind!r}")


def _replay_decision(router: Recoverable, event: JournalEvent) -> None:
    """Re-derive a logged decision and check that it comes out as logged."""
    seq, _, ref, now, payload, blob = event
    label = router._journal.label
    state = router._state
    if ref is None:
        raise JournalError(f"{label}: event {seq} (decision) has no id")
    if payload["n"] != state.n:
        raise JournalError(
            f"{label}: event {seq}: decision {ref!r} is number {payload['n']}, the replay "
            f"is at {state.n} (events missing?)"
        )
    ctx = state.context_index(payload["context"])
    mask = state.eligible_mask(payload["eligible"])
    decided = apply(state, Decide(ref, ctx, mask, now, seq, float(payload["deadline"])))
    assert decided is not None
    redone, probs = read_back(decided[1].items()), decided[2]
    if redone["draws"] != payload["draws"] or probs != blob:
        raise JournalError(
            f"{label}: event {seq}: decision {ref!r} (number {payload['n']}) re-derives "
            f"as draws {redone['draws']} but the journal has {payload['draws']}"
            + ("" if redone["draws"] != payload["draws"] else " (propensities differ)")
        )
    differs = [k for k in ("team", "cost", "version") if redone[k] != payload[k]]
    if differs:
        raise JournalError(
            f"{label}: event {seq}: decision {ref!r} (number {payload['n']}) re-derives with "
            + ", ".join(f"{k} {redone[k]!r}, the journal has {payload[k]!r}" for k in differs)
        )
