"""What differs between the configuration a router runs and a new one, as journal events.

``Router.open(path, config=...)`` and ``Router.reconfigure`` take a router to a new
configuration by events (docs/operations.md, "Configuration changes"): experts added, the
bounds, experts removed, then the settings that change no state. The keys a running router
cannot change are refused, each named. Also: the policy's constructor arguments a journal
recorded (``journal_policy_kwargs``).
"""

from __future__ import annotations

import json
from typing import Any

from msroute.errors import JournalError, RouterConfigError
from msroute.policies.registry import get_policy_class
from msroute.router.config import RouterConfig
from msroute.router.journal import Journal
from msroute.router.state import RouterState, legacy_policy_kwargs

__all__ = ["FIXED_KEYS", "SETTING_KEYS", "config_changes", "journal_policy_kwargs"]

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


def config_changes(
    state: RouterState, new: RouterConfig, label: str
) -> list[tuple[str, str | None, dict[str, Any]]]:
    """The events that take a router in ``state`` to ``new``: (kind, id, payload) in the order
    ``Router.open`` applies them (empty when nothing differs). ``label`` names the journal in
    the error.

    Raises
    ------
    RouterConfigError
        ``new`` differs in a key a running router cannot change; one line naming each.
    """
    cur = state.config
    refused = [
        f"{key} ({getattr(cur, key)!r} -> {getattr(new, key)!r})"
        for key in FIXED_KEYS
        if getattr(cur, key) != getattr(new, key)
    ]
    for eid, vec in new.experts.items():
        if eid in state.col and tuple(state.cost_rows[state.col[eid]]) != tuple(vec):
            was = state.cost_rows[state.col[eid]]
            refused.append(f"experts.{eid} (cost {was} -> {list(vec)}: use a new id)")
        elif eid in state.retired:
            refused.append(
                f"experts.{eid} (removed earlier; ids are never reused: drop it from the "
                "configuration)"
            )
    if refused:
        raise RouterConfigError(
            f"{label}: the configuration differs from the journal's in "
            f"key(s) a running router cannot change: {'; '.join(refused)}; keep the "
            "journal's values or start a new journal"
        )
    changes: list[tuple[str, str | None, dict[str, Any]]] = [
        ("add_expert", eid, {"cost": list(vec)})
        for eid, vec in new.experts.items()
        if eid not in state.col
    ]
    if new.upper != cur.upper or new.lower != cur.lower:
        changes.append(("set_bounds", None, {"upper": new.upper, "lower": new.lower}))
    changes += [("remove_expert", e, {}) for e in state.ids if e not in new.experts]
    settings = {
        key: value
        for key, value in new.to_dict().items()
        if key in SETTING_KEYS and value != cur.to_dict().get(key)
    }
    settings.update({k: None for k in SETTING_KEYS - new.to_dict().keys() if k in cur.to_dict()})
    if settings:
        changes.append(("configure", None, settings))
    return changes


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
