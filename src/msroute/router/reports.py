"""Read-only views of a router: its summary, and its journal's events as dicts or export rows."""

from __future__ import annotations

from typing import Any

import numpy as np

from msroute.policies.omd import OMDApproachability
from msroute.router.journal import Journal, MemoryJournal
from msroute.router.rows import export_row
from msroute.router.state import RoutedDecision, RouterState

__all__ = ["event_dicts", "export_rows", "routed_from_event", "summary"]


def summary(st: RouterState, seq: int) -> dict[str, Any]:
    """A JSON-ready summary of a router in state ``st`` whose journal is at ``seq``: counters,
    the experts and their costs, the realized cost (its time average and the total ``spent``
    so far, by cost name), bounds and the routing distribution q (per context, for an OMD
    policy)."""
    cfg = st.config
    names = cfg.cost_names
    avg = st.cost_sum / st.n if st.n else np.zeros(len(names))
    out: dict[str, Any] = {
        "name": cfg.name,
        "policy": cfg.policy,
        "decisions": st.n,
        "feedback_applied": st.applied,
        "feedback_late": st.late,
        "pending": len(st.pending),
        "expired": st.expired,
        "policy_version": st.version,
        "experts": list(st.ids),
        "expert_costs": {
            e: dict(zip(names, row, strict=True))
            for e, row in zip(st.ids, st.cost_rows, strict=True)
        },
        "cost_names": list(names),
        "contexts": list(st.contexts),
        "avg_cost": dict(zip(names, avg.tolist(), strict=True)),
        "spent": dict(zip(names, st.cost_sum.tolist(), strict=True)),
        "bounds": {"upper": dict(cfg.upper), "lower": dict(cfg.lower)},
        "q": None,
        "seq": seq,
    }
    if isinstance(st.policy, OMDApproachability):
        q = st.policy.q.reshape(len(st.contexts) or 1, len(st.ids))  # R = 1
        tables = [dict(zip(st.ids, row.tolist(), strict=True)) for row in q]
        if st.contexts:
            out["q_by_context"] = dict(zip(st.contexts, tables, strict=True))
        else:
            out["q"] = tables[0]
    return out


def event_dicts(journal: Journal | MemoryJournal, seq: int, limit: int) -> list[dict[str, Any]]:
    """The journal events after ``seq`` (at most ``limit``), as JSON-ready dicts.

    Each has ``seq``, ``kind`` (decision, feedback, expire, add_expert, remove_expert,
    set_cost, set_bounds, configure),
    ``ref`` (the decision or expert id), ``time`` and the event's fields (a decision: its
    ``n``, ``context``, ``eligible``, ``draws``, ``team``, ``probs`` of the draws, ``cost``,
    ``deadline``, ``version``; a feedback: ``reward``, ``cost``, ``status``).
    """
    return [
        {"seq": s, "kind": k, "ref": r, "time": t, **payload}
        for s, k, r, t, payload, _ in journal.events(seq, limit)
    ]


def export_rows(
    journal: Journal | MemoryJournal, st: RouterState, seq: int, limit: int
) -> list[dict[str, Any]]:
    """The journal events after ``seq`` (at most ``limit``) as export rows
    (``msroute.router.rows.export_row``), each decision with the expert layout it was made in."""
    names = st.config.cost_names
    layouts, current = st.layouts, st.layout
    return [
        export_row(
            event,
            layouts[event[4].get("layout", current)] if event[1] == "decision" else (),
            names,
        )
        for event in journal.events(seq, limit)
    ]


def routed_from_event(
    st: RouterState, did: str, seq: int, payload: dict[str, Any], blob: bytes | None
) -> RoutedDecision:
    """The routed decision of a journaled decision event (what a retried request is answered
    with: the decision as it was made, its cost the routed team's)."""
    layout = st.layouts[payload["layout"]]
    props = None
    if blob is not None:
        probs = np.frombuffer(blob, dtype=np.float64).tolist()
        props = {e: p for e, p in zip(layout, probs, strict=True) if p > 0.0}
    return RoutedDecision(
        decision_id=did,
        team=list(payload["team"]),
        draws=list(payload["draws"]),
        propensities=props,
        policy_version=int(payload["version"]),
        cost=dict(zip(st.config.cost_names, payload["cost"], strict=True)),
        deadline=float(payload["deadline"]),
        seq=seq,
    )
