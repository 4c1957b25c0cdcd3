"""Journal events as export rows, in the HTTP API's names and shapes.

A journal stores its events compactly: a decision's cost as a list in cost-name order, the
probability of each draw (``probs``), the whole distribution as a binary blob under the index of
an expert layout. An export row says the same with the API's words: ``decision_id`` (or
``expert_id``), ``propensities`` by expert id (the whole distribution, as ``POST .../decisions``
answers it), ``draw_propensities`` aligned with ``draws``, ``cost`` by cost name,
``policy_version``. The fields of each kind of row are documented on the HTTP API page
(docs/http-api.md) and in the JSON Schema ``msroute/router/journal-row.schema.json``, which
``msroute journal export`` writes and a test checks every row against.

``export_rows`` reads the events in order from the first (as ``msroute journal export`` does):
the experts of each moment are those of the journal's creation config and of the expert events
before it, which is the layout a decision's distribution was stored in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import resources
from typing import Any

import numpy as np

from msroute.errors import JournalError

__all__ = ["ROW_KINDS", "event_of_row", "export_row", "export_rows", "flatten_row", "row_schema"]

#: The kinds of event a journal holds, each with its own row fields.
ROW_KINDS = (
    "decision",
    "feedback",
    "cost",
    "expire",
    "add_expert",
    "remove_expert",
    "set_cost",
    "set_bounds",
    "configure",
)

#: What the ``ref`` of each kind of event names.
_REF_NAME = {
    "decision": "decision_id",
    "feedback": "decision_id",
    "cost": "decision_id",
    "expire": "decision_id",
    "add_expert": "expert_id",
    "remove_expert": "expert_id",
    "set_cost": "expert_id",
}


def row_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one export row."""
    text = resources.files("msroute.router").joinpath("journal-row.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def export_rows(
    events: Iterable[Sequence[Any]], config: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """The export row of each journal event, in order.

    Parameters
    ----------
    events : iterable of journal events
        ``(seq, kind, ref, time, payload, blob)`` from the first event on, as
        ``Journal.events()`` yields them.
    config : mapping
        The journal's creation config (its ``experts`` give the first expert layout and
        ``cost_names`` the names of the costs).

    Raises
    ------
    JournalError
        An event does not fit the journal (a distribution of another length than its layout).
    """
    names = [str(n) for n in config["cost_names"]]
    experts = [str(e) for e in config["experts"]]
    for event in events:
        yield export_row(event, experts, names)
        kind, ref = event[1], event[2]
        if kind == "add_expert":
            experts = [*experts, str(ref)]
        elif kind == "remove_expert":
            experts = [e for e in experts if e != ref]


def export_row(
    event: Sequence[Any], experts: Sequence[str], cost_names: Sequence[str]
) -> dict[str, Any]:
    """The export row of one journal event.

    Parameters
    ----------
    event : journal event
        ``(seq, kind, ref, time, payload, blob)``.
    experts : sequence of str
        The expert ids in the order the router held them when the event was written (the
        columns of a decision's stored distribution).
    cost_names : sequence of str
        The router's cost names, in order.
    """
    seq, kind, ref, time, payload, blob = event
    names = list(cost_names)
    row: dict[str, Any] = {"seq": int(seq), "kind": kind, "time": float(time)}
    if kind in _REF_NAME:
        row[_REF_NAME[kind]] = ref
    elif ref is not None:
        row["ref"] = ref
    if kind == "decision":
        row.update(_decision(seq, payload, blob, list(experts), names))
    elif kind in ("feedback", "cost", "add_expert", "set_cost"):
        row.update(payload)
        row["cost"] = _by_name(payload.get("cost"), names)
    else:
        row.update(payload)
    return row


def event_of_row(row: Mapping[str, Any], cost_names: Sequence[str]) -> dict[str, Any]:
    """An export row back in the journal's own names (``ref``, ``probs`` of the draws, costs
    as lists in ``cost_names`` order), as ``Router.decisions_since`` gives events; a row
    already in those names is returned as it is."""
    out = dict(row)
    for key in ("decision_id", "expert_id"):
        if key in out:
            out["ref"] = out.pop(key)
    if out.get("kind") == "decision" and "draw_propensities" in out:
        out["probs"] = out.pop("draw_propensities")
        out.pop("propensities", None)
        out["version"] = out.pop("policy_version")
    cost = out.get("cost")
    if isinstance(cost, Mapping):
        out["cost"] = [float(cost[name]) for name in cost_names]
    return out


def _decision(
    seq: int,
    payload: Mapping[str, Any],
    blob: bytes | None,
    experts: list[str],
    names: list[str],
) -> dict[str, Any]:
    propensities = None
    if blob is not None:
        probs = np.frombuffer(blob, dtype=np.float64)
        if probs.size != len(experts):
            raise JournalError(
                f"event {seq}: a distribution over {probs.size} experts, but the journal had "
                f"{len(experts)} then"
            )
        propensities = {e: float(p) for e, p in zip(experts, probs, strict=True) if p > 0.0}
    return {
        "n": payload["n"],
        "context": payload.get("context"),
        "eligible": payload.get("eligible"),
        "allowed": payload.get("allowed"),
        "draws": list(payload["draws"]),
        "team": list(payload["team"]),
        "propensities": propensities,
        "draw_propensities": payload.get("probs"),
        "cost": _by_name(payload["cost"], names),
        "deadline": payload["deadline"],
        "policy_version": payload["version"],
    }


def _by_name(cost: Sequence[float] | None, names: list[str]) -> dict[str, float] | None:
    if cost is None:
        return None
    return dict(zip(names, (float(c) for c in cost), strict=True))


#: The fields that hold an object or a list (when not null).
_CONTAINERS = frozenset(
    {
        "eligible",
        "allowed",
        "draws",
        "team",
        "propensities",
        "draw_propensities",
        "cost",
        "upper",
        "lower",
        "expired",
    }
)


def flatten_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row as flat columns: an object's members as ``field.key``, a list's items as
    ``field.1``, ``field.2``, ...; a scalar that is ``None`` stays ``None`` (an empty cell), a
    null object or list has no column (its members' columns are empty)."""
    flat: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                put(f"{key}.{k}", v)
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value, 1):
                put(f"{key}.{i}", v)
        else:
            flat[key] = value

    for key, value in row.items():
        if value is not None or key not in _CONTAINERS:
            put(key, value)
    return flat
