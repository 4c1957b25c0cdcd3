"""The checks of a live call's arguments, and what the journal says of a closed decision.

Every check raises before anything changes (``InvalidFeedbackError``, ``DecisionConflictError``,
``UnknownDecisionError``, naming the argument); the router calls them before it opens a
transaction. A decision that is no longer pending is known from its journal events only (the
router keeps no copy of past decisions): its status and its routed cost are read back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from msroute._validation import COST_MAX, FloatArray, finite_real
from msroute.errors import (
    DecisionConflictError,
    InvalidFeedbackError,
    InvalidValueError,
    RouterConfigError,
    UnknownDecisionError,
)
from msroute.policies.base import BasePolicy
from msroute.router.config import RouterConfig, cost_vector
from msroute.router.journal import Journal, MemoryJournal
from msroute.router.reports import routed_from_event
from msroute.router.state import RoutedDecision, RouterState, SetBounds

__all__ = [
    "bounds_event",
    "check_client_id",
    "check_cost",
    "check_count",
    "check_now",
    "check_price",
    "check_repeat",
    "check_reward",
    "closed_status",
    "decision_cost",
    "routed_before",
    "same_set",
]


def check_client_id(did: str, run_id: str) -> None:
    """Refuse a new client id that a generated id could equal: generated ids are
    ``<run id>-<n>`` (``run_id``, the journal's), so a client id is refused if it has that form
    and can therefore never collide with one."""
    prefix = f"{run_id}-"
    if did.startswith(prefix) and did[len(prefix) :].isdigit():
        raise InvalidFeedbackError(
            f"decision_id: {did!r} has the form of the ids this router generates "
            f"({prefix}<n>); choose an id without the prefix {prefix!r}"
        )


def check_now(now: object) -> float:
    """A clock reading (``expire(now)``) as a float: a real, finite number of seconds."""
    return finite_real(now, "now", InvalidFeedbackError)


def check_count(value: object, name: str) -> int:
    """A journal position or a row count (``decisions_since``): an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise InvalidFeedbackError(f"{name}: must be an integer >= 0, got {value!r:.80}")
    return int(value)


def check_reward(reward: object, cfg: RouterConfig, policy: BasePolicy) -> float:
    """A feedback's reward as a float: a finite real number (``finite_real``) in
    ``[reward_min, reward_max]``
    (``reward_max`` unset: the upper end of the ``policy``'s ``reward_range``, which holds the
    configured range: ``msroute.router.state.check_reward_range``)."""
    r = finite_real(reward, "reward", InvalidFeedbackError)
    hi = policy.reward_range[1] if cfg.reward_max is None else cfg.reward_max
    if not cfg.reward_min <= r <= hi:
        unset = (
            " (reward_max unset: the most the policy learns from)" if cfg.reward_max is None else ""
        )
        raise InvalidFeedbackError(
            f"reward: {reward!r} is not in [reward_min, reward_max] = "
            f"[{cfg.reward_min:g}, {hi:g}]{unset}"
        )
    return r


def check_cost(
    cost: object, realized: FloatArray, names: Sequence[str], policy: BasePolicy
) -> FloatArray | None:
    """A feedback's real cost as a vector in ``names`` order (None if not given): a dict by cost
    name (the names not given keep the ``realized`` team cost) or a list, within what the
    ``policy`` can learn from."""
    if cost is None:
        return None
    if isinstance(cost, Mapping):
        unknown = sorted(set(cost) - set(names))
        if unknown:
            raise InvalidFeedbackError(f"cost: unknown cost name(s) {unknown}; known: {names}")
        given = {**dict(zip(names, realized.tolist(), strict=True)), **cost}
        cost = [given[n] for n in names]  # cost_vector reads this list as it reads the table
    try:
        if (
            isinstance(cost, list)
            and len(cost) == len(names)
            and all(type(v) is float and 0.0 <= v <= COST_MAX for v in cost)
        ):
            vec = np.array(cost, dtype=np.float64)  # what cost_vector accepts as it is
        else:
            vec = np.array(cost_vector(cost, names, "cost"), dtype=np.float64)
        policy.check_cost(vec[None, :])  # within what the policy can learn from
    except (RouterConfigError, InvalidValueError) as exc:
        raise InvalidFeedbackError(f"cost: {exc}") from exc
    return vec


def check_repeat(
    journal: Journal | MemoryJournal, did: str, reward: float, cost: FloatArray | None
) -> None:
    """A repeated feedback is a retried request: it must carry the first one's reward and
    cost (DecisionConflictError otherwise; nothing changes, the first outcome stands)."""
    events = journal.events_of(did)
    first = next(payload for _, kind, _, _, payload, _ in events if kind == "feedback")
    given = None if cost is None else cost.tolist()
    if first["reward"] != reward or first["cost"] != given:
        raise DecisionConflictError(
            f"decision_id {did!r}: feedback already reported with reward {first['reward']!r}"
            f" and cost {first['cost']!r}; a repeat must carry the same (got reward "
            f"{reward!r} and cost {given!r})"
        )


def closed_status(journal: Journal | MemoryJournal, did: str) -> str:
    """For an id that is not pending: "duplicate", "late" or "expert_removed"
    (UnknownDecisionError if new).

    A decision stops pending at its feedback, its expiry, or the removal of an expert it
    routed to (which writes no event under the decision's id): so a decision with neither
    a feedback nor an expiry was closed by a removal.
    """
    kinds = {event[1] for event in journal.events_of(did)}
    if "decision" not in kinds:
        raise UnknownDecisionError(f"decision_id: unknown decision {did!r}")
    if "feedback" in kinds:
        return "duplicate"  # applied, or already logged late or for a removed expert
    return "late" if "expire" in kinds else "expert_removed"


def decision_cost(
    journal: Journal | MemoryJournal, did: str, before: int | None = None
) -> FloatArray:
    """The current cost of a decision that is no longer pending, from its journal events (those
    before event ``before``, all by default): its routed team's cost, replaced by each cost
    reported since (a cost report, a feedback's cost), the last one standing."""
    cost = None
    for seq, kind, _, _, payload, _ in journal.events_of(did):
        if before is not None and seq >= before:
            break
        if kind == "decision" or (kind in ("cost", "feedback") and payload["cost"] is not None):
            cost = payload["cost"]
    if cost is None:
        raise UnknownDecisionError(f"decision_id: unknown decision {did!r}")
    return np.array(cost, dtype=np.float64)


def routed_before(
    journal: Journal | MemoryJournal,
    state: RouterState,
    did: str,
    context: str | None,
    eligible: Sequence[str] | None,
) -> RoutedDecision | None:
    """The decision already routed under this id, read back from the journal (by its
    indexed id: the router keeps no copy of past decisions, so its memory does not grow
    with the traffic), or None.

    A repeated id is a retried request: a context or eligible set given with it must be
    the original one (eligible compared as a set), else ``DecisionConflictError``.
    """
    for seq, kind, _, _, payload, blob in journal.events_of(did):
        if kind != "decision":
            continue
        if context is not None and context != payload["context"]:
            raise DecisionConflictError(
                f"decision_id {did!r}: already routed with context {payload['context']!r}, "
                f"not {context!r}"
            )
        if eligible is not None:
            before = payload["eligible"]
            if before is None or not same_set(eligible, before):
                raise DecisionConflictError(
                    f"decision_id {did!r}: already routed with eligible "
                    f"{'all experts' if before is None else before!r}, not {eligible!r}"
                )
        return routed_from_event(state, did, seq, payload, blob)
    return None


def same_set(given: object, before: list[str]) -> bool:
    """Whether ``given`` (a caller's eligible argument, unchecked) names the ids of ``before``."""
    if isinstance(given, str) or not isinstance(given, Sequence | set | frozenset):
        return False
    return all(isinstance(e, str) for e in given) and set(given) == set(before)


def bounds_event(state: RouterState, upper: object, lower: object) -> SetBounds | None:
    """The full new bounds of a ``set_bounds`` call in ``state`` (None when they do not change).

    Raises InvalidFeedbackError (an unknown cost name, a bound that is not a finite number, a
    lower bound above its upper bound)."""
    cur = state.config
    merged: dict[str, dict[str, float]] = {}
    for key, given, current in (("upper", upper, cur.upper), ("lower", lower, cur.lower)):
        out = dict(current)
        if given is not None:
            if not isinstance(given, Mapping):
                raise InvalidFeedbackError(
                    f"{key}: must be a mapping of cost name to bound, got {given!r:.80}"
                )
            for name, value in given.items():
                if value is None:
                    if name not in cur.cost_names:
                        raise InvalidFeedbackError(
                            f"{key}.{name}: unknown cost name; known: {list(cur.cost_names)}"
                        )
                    out.pop(name, None)
                else:
                    out[name] = value
        merged[key] = out
    try:
        cfg = state.config_with(constraints=merged)
    except RouterConfigError as exc:
        raise InvalidFeedbackError(str(exc).replace("constraints.", "")) from exc
    if cfg.upper == cur.upper and cfg.lower == cur.lower:
        return None
    return SetBounds(dict(cfg.upper), dict(cfg.lower))


def check_price(
    state: RouterState, expert_id: object, cost: Mapping[str, float] | Sequence[float]
) -> tuple[tuple[float, ...], bool]:
    """An expert's new cost vector (a list in cost-name order, or a dict by cost name whose
    costs not named keep theirs) and whether it differs from the current one."""
    if not isinstance(expert_id, str) or expert_id not in state.col:
        raise InvalidFeedbackError(f"expert_id: unknown expert {expert_id!r:.80}")
    names = state.config.cost_names
    current = tuple(state.cost_rows[state.col[expert_id]])
    given: object = cost
    if isinstance(cost, Mapping):
        unknown = sorted(map(str, set(cost) - set(names)))
        if unknown:
            raise InvalidFeedbackError(
                f"cost: unknown cost name(s) {unknown}; known: {list(names)}"
            )
        given = {**dict(zip(names, current, strict=True)), **cost}
    try:
        vec = cost_vector(given, names, "cost")
    except RouterConfigError as exc:
        raise InvalidFeedbackError(str(exc)) from exc
    return vec, vec != current
