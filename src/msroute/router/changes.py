"""What differs between the configuration a router runs and a new one, as journal events.

``Router.open(path, config=...)`` and ``Router.reconfigure`` take a router to a new
configuration by events (docs/operations.md, "Configuration changes"). The merge is three-way:
the configuration applied last (``applied_config``: the journal records each one it applies;
a journal that never applied one, its creation configuration), the router's state (which runtime
changes moved: bounds set, experts added, removed or repriced) and the new configuration. What
the new configuration changed since the one applied last wins; everything it left as it was
keeps the router's state, so a runtime change lasts until the file itself changes that value.
The events, in order: experts added, experts repriced, the bounds, experts removed, then the
settings that change no state. The keys a running router cannot change are refused, each named.
Also: the policy's constructor arguments a journal recorded (``journal_policy_kwargs``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from msroute.errors import JournalError, RouterConfigError
from msroute.policies.registry import get_policy_class
from msroute.router.config import RouterConfig
from msroute.router.eventlog import MemoryJournal
from msroute.router.journal import Journal
from msroute.router.state import (
    AddExpert,
    Configure,
    RemoveExpert,
    RouterState,
    SetBounds,
    SetCost,
    legacy_policy_kwargs,
)

__all__ = [
    "APPLIED_CONFIG",
    "FIXED_KEYS",
    "SETTING_KEYS",
    "applied_config",
    "applied_entry",
    "change_event",
    "config_changes",
    "journal_policy_kwargs",
    "put_applied",
]

#: Configuration keys a running router cannot change (``Router.open`` refuses them).
FIXED_KEYS = (
    "policy",
    "m_draws",
    "cost_names",
    "contexts",
    "seed",
    "horizon",
    "pacing",
    "params",
    "warm_start",
    "contexts_from",
)
#: Configuration keys that change no state: a ``configure`` event sets them.
SETTING_KEYS = frozenset(
    {
        "feedback_ttl_s",
        "on_missing",
        "reward_min",
        "reward_max",
        "snapshot_every",
        "journal_sync",
        "name",
    }
)
#: The journal's meta entry holding the configuration ``reconfigure`` applied last (JSON).
APPLIED_CONFIG = "applied_config"

Change = tuple[str, str | None, dict[str, Any]]


def applied_config(journal: Journal | MemoryJournal) -> RouterConfig:
    """The configuration the journal's router was last taken to (``APPLIED_CONFIG``), or for a
    journal that never was, the one it was created with."""
    try:
        raw = journal.meta(APPLIED_CONFIG)
    except (JournalError, KeyError):
        raw = journal.meta("config")
    try:
        return RouterConfig.recorded(json.loads(raw))
    except (ValueError, RouterConfigError) as exc:
        label = journal.label
        raise JournalError(f"{label}: its applied configuration is unusable: {exc}") from exc


def applied_entry(config: RouterConfig) -> str:
    """The ``APPLIED_CONFIG`` entry of a configuration (its journal path left out)."""
    return json.dumps({**config.to_dict(), "journal": None})


def put_applied(journal: Journal | MemoryJournal, entry: str) -> None:
    """Record ``entry`` as the configuration applied last, in the open transaction."""
    try:
        journal.put_meta(APPLIED_CONFIG, entry)
    except (sqlite3.Error, OSError) as exc:
        raise JournalError(f"{journal.label}: cannot write the journal: {exc}") from exc


def config_changes(
    state: RouterState, new: RouterConfig, base: RouterConfig, label: str
) -> list[Change]:
    """The events that take a router in ``state`` to ``new``: (kind, id, payload) in the order
    ``Router.open`` applies them (empty when nothing differs). ``base``: the configuration
    applied last; what ``new`` changed since ``base`` is applied, the rest of the state kept.
    ``label`` names the journal in the error.

    Raises
    ------
    RouterConfigError
        ``new`` differs in a key a running router cannot change, or adds or reprices an
        expert id removed earlier; one line naming each.
    """
    cur, old = state.config, base
    refused = [
        f"{key} ({getattr(cur, key)!r} -> {getattr(new, key)!r})"
        for key in FIXED_KEYS
        if getattr(cur, key) != getattr(new, key)
    ]
    added: list[Change] = []
    repriced: list[Change] = []
    for eid, vec in new.experts.items():
        if old.experts.get(eid) == vec:
            continue  # the file left it as it was: the state's (repriced or removed) stands
        if eid in state.retired:
            refused.append(
                f"experts.{eid} (removed earlier; ids are never reused: drop it from the "
                "configuration)"
            )
        elif eid not in state.col:
            added.append(("add_expert", eid, {"cost": list(vec)}))
        elif tuple(state.cost_rows[state.col[eid]]) != tuple(vec):
            repriced.append(("set_cost", eid, {"cost": list(vec)}))
    if refused:
        raise RouterConfigError(
            f"{label}: the configuration differs from the journal's in "
            f"key(s) a running router cannot change: {'; '.join(refused)}; keep the "
            "journal's values or start a new journal"
        )
    changes = added + repriced
    bounds = {
        side: _merged(getattr(cur, side), getattr(old, side), getattr(new, side))
        for side in ("upper", "lower")
    }
    if bounds["upper"] != cur.upper or bounds["lower"] != cur.lower:
        changes.append(("set_bounds", None, bounds))
    dropped = [e for e in old.experts if e not in new.experts]
    changes += [("remove_expert", e, {}) for e in state.ids if e in dropped]
    settings = _merged(_settings(cur.to_dict()), _settings(old.to_dict()), _settings(new.to_dict()))
    changed = {k: v for k, v in settings.items() if v != cur.to_dict().get(k)}
    changed.update({k: None for k in _settings(cur.to_dict()) if k not in settings})
    if changed:
        changes.append(("configure", None, changed))
    return changes


def change_event(
    kind: str, ref: str | None, payload: dict[str, Any], removal: Callable[[str], RemoveExpert]
) -> AddExpert | RemoveExpert | SetCost | SetBounds | Configure:
    """The event of one of ``config_changes``' entries (``removal``: the removal of an expert,
    closing the decisions pending on it when it is applied)."""
    if kind == "add_expert":
        return AddExpert(str(ref), list(payload["cost"]))
    if kind == "set_cost":
        return SetCost(str(ref), list(payload["cost"]))
    if kind == "remove_expert":
        return removal(str(ref))
    if kind == "set_bounds":
        return SetBounds(dict(payload["upper"]), dict(payload["lower"]))
    return Configure(dict(payload))


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in SETTING_KEYS}


def _merged(cur: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``cur`` with every entry that ``new`` changed since ``old`` (set, or removed) as in
    ``new``."""
    out = dict(cur)
    for key in old.keys() | new.keys():
        if key not in new:
            if key in old:
                out.pop(key, None)
        elif old.get(key, _ABSENT) != new[key]:
            out[key] = new[key]
    return out


_ABSENT = object()


def journal_policy_kwargs(journal: Journal, cfg: RouterConfig) -> dict[str, Any]:
    """The policy's constructor arguments a journal recorded (a JSON object), or for a journal
    that recorded none those it ran with (``legacy_policy_kwargs``)."""
    try:
        raw = journal.meta("policy_kwargs")
    except JournalError:
        return legacy_policy_kwargs(cfg)
    try:
        kwargs = json.loads(raw)
    except ValueError as exc:
        raise JournalError(f"{journal.label}: the policy_kwargs entry is not JSON: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise JournalError(
            f"{journal.label}: the policy_kwargs entry is not a JSON object: {raw[:80]!r}"
        )
    return get_policy_class(cfg.policy)._recorded_kwargs(kwargs)
