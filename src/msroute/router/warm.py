"""A router's warm start: its configured eval table, checked and applied to the fresh policy.

``warm_start = {table = "eval.csv", strength = N, anchor = true, margin = true, explored = true}``
(``msroute.router.config``) starts the router's policy from an outcome table
(``msroute.warmstart``) before its first decision. The table's models are matched to the experts
by id (a table may grade more models than the router has experts), its categories to the
contexts and its costs to the cost names by name (a table may carry more costs; one that lacks
a cost name is refused). Nothing of it is journaled as traffic: the journal records the table's
SHA-256, the strength, the anchor, the margin and whether the floor counts the table as explored
(meta entry ``warm_start``, and the configuration), and a reopened journal applies the same table
again, refusing a table whose bytes changed: the decisions it re-derives would not be those it
made. A journal whose configuration names no anchor (or no margin, no ``explored``) was written
before it existed, and replays without it (``RouterConfig.recorded``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msroute.datasets.crowd import decode_text
from msroute.datasets.outcomes import read_outcomes
from msroute.errors import InvalidValueError, RouterConfigError
from msroute.policies.base import BasePolicy
from msroute.router.config import RouterConfig
from msroute.router.eventlog import MemoryJournal
from msroute.router.journal import Journal

if TYPE_CHECKING:
    from msroute.prompts.model import ContextModel

__all__ = [
    "WARM_META",
    "apply_warm_start",
    "moved_table",
    "record_warm_start",
    "recorded_warm_sha256",
]

#: The journal's meta entry recording a warm start (JSON: table, strength, sha256).
WARM_META = "warm_start"


def record_warm_start(
    journal: Journal | MemoryJournal, cfg: RouterConfig, sha256: str | None
) -> None:
    """Record a new router's warm start in its journal (``WARM_META``): the table's path,
    strength, anchor, margin, explored and SHA-256. Nothing for a router without one."""
    if cfg.warm_start is not None:
        journal.put_meta(WARM_META, json.dumps({**cfg.warm_start, "sha256": sha256}))


def recorded_warm_sha256(journal: Journal, cfg: RouterConfig) -> str | None:
    """The SHA-256 a journal recorded of its warm-start table (None without a warm start)."""
    if cfg.warm_start is None:
        return None
    return str(json.loads(journal.meta(WARM_META))["sha256"])


def moved_table(wanted: RouterConfig | None, recorded: RouterConfig) -> str | None:
    """Where ``wanted``, the configuration a journal is reopened with, says the recorded
    warm-start table is now: its path, where the two warm starts differ in the table's path
    alone (a table moved, or named by another spelling of its path). None otherwise: the
    recorded path is read, and another warm start is refused as a change of a fixed key. The
    table found there must still hash to the recorded SHA-256 (``apply_warm_start``)."""
    new = None if wanted is None else wanted.warm_start
    old = recorded.warm_start
    if new is None or old is None or new["table"] == old["table"]:
        return None
    return new["table"] if {**new, "table": old["table"]} == old else None


def _read(table: str, reopened: bool) -> bytes:
    """The table's bytes (RouterConfigError if unreadable; for a reopened journal, saying how
    to name a table that moved)."""
    try:
        return Path(table).read_bytes()
    except OSError as exc:
        hint = (
            " (moved? reopen with a configuration naming where it is now, its other warm_start"
            " settings as they were)"
            if reopened
            else ""
        )
        raise RouterConfigError(f"warm_start.table: cannot read {table!r}: {exc}{hint}") from exc


def apply_warm_start(
    policy: BasePolicy,
    settings: dict[str, Any],
    ids: list[str],
    contexts: list[str],
    expected_sha256: str | None = None,
    text_model: ContextModel | None = None,
) -> str:
    """Start ``policy`` (fresh, of the OMD family) from the table of ``settings``; returns
    the table's SHA-256.

    Raises
    ------
    RouterConfigError
        The table cannot be read or parsed, lacks an expert or a cost name or has a category
        that is not a context (``text_model`` given: lacks a prompt column), the policy is not
        of the OMD family, or (``expected_sha256`` given: a reopened journal) the table's bytes
        differ from those the journal was created with.
    """
    from msroute.policies.omd import OMDApproachability
    from msroute.warmstart import table_contexts, warm_start

    path = settings["table"]
    raw = _read(path, expected_sha256 is not None)
    digest = hashlib.sha256(raw).hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        raise RouterConfigError(
            f"warm_start.table: {path!r} has changed since this router was created (SHA-256 "
            f"{digest}, the journal recorded {expected_sha256}): restore that table, or create "
            "a new router for the new one"
        )
    if not isinstance(policy, OMDApproachability):
        raise RouterConfigError(
            f"warm_start: policy {type(policy).name!r} cannot start from a table; use 'omd'"
        )
    try:
        text = decode_text(raw, path, "a CSV or JSON Lines file")
        table = read_outcomes(text, path, jsonl=Path(path).suffix.lower() in (".jsonl", ".ndjson"))
        table = table.with_models(ids)
        if text_model is None:
            index = table_contexts(table, contexts or None)
        elif table.prompts is None:
            raise RouterConfigError(
                f"warm_start.table: {path!r} has no prompt column: a router whose contexts "
                "come from the prompts' text starts each context from the table's prompts in it"
            )
        else:
            index = text_model.eval_contexts(table.prompt_counts())
        warm_start(
            policy,
            table,
            index,
            float(settings["strength"]),
            anchor=bool(settings["anchor"]),
            margin=bool(settings["margin"]),
            explored=bool(settings["explored"]),
        )
    except (InvalidValueError, ValueError) as exc:
        raise RouterConfigError(f"warm_start: {exc}") from exc
    return digest
