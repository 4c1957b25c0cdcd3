"""The events of a router's journal, one value class per kind, and the routed decision.

``msroute.router.state.apply`` moves a router's state by one of these; the live layer builds
them from a call's checked arguments, recovery from the journal's rows. ``Decide``
("decision"), ``Feedback``, ``CostReport`` ("cost"), ``Expire``, ``AddExpert``,
``RemoveExpert``, ``SetCost``, ``SetBounds`` and ``Configure``; each but ``Decide`` gives the
journal row's fields as ``payload()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from msroute._records import quick_init
from msroute._validation import FloatArray

__all__ = [
    "AddExpert",
    "Change",
    "Configure",
    "CostReport",
    "Decide",
    "Event",
    "Expire",
    "Feedback",
    "Given",
    "RemoveExpert",
    "RoutedDecision",
    "SetBounds",
    "SetCost",
]


@quick_init
@dataclass(frozen=True)
class RoutedDecision:
    """One routed query.

    Attributes
    ----------
    decision_id : str
        The id to send feedback with.
    team : list of str
        The distinct routed experts, in draw order.
    draws : list of str
        The M draws (ids; a multinomial policy may draw an expert more than once).
    propensities : dict of str -> float, or None
        The distribution the draws were sampled from (after the eligibility mask; experts with
        probability 0 left out), or None for policies without a closed form.
    policy_version : int
        How many times the policy had learned (or changed experts) before this decision.
    cost : dict of str -> float
        The realized cost of the team by cost name (each distinct expert counted once).
    deadline : float
        Unix time at which the decision expires: a feedback at or after it is late (the
        decision is expired at its deadline, not after it).
    seq : int
        The journal sequence number of the decision.
    """

    decision_id: str
    team: list[str]
    draws: list[str]
    propensities: dict[str, float] | None
    policy_version: int
    cost: dict[str, float]
    deadline: float
    seq: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: decision_id, team, draws, propensities, policy_version, cost, deadline."""
        return {
            "decision_id": self.decision_id,
            "team": list(self.team),
            "draws": list(self.draws),
            "propensities": None if self.propensities is None else dict(self.propensities),
            "policy_version": self.policy_version,
            "cost": dict(self.cost),
            "deadline": self.deadline,
        }


@quick_init
@dataclass(frozen=True)
class Decide:
    """Route query ``n = state.n`` (context and eligible set already resolved by
    ``RouterState.context_index`` and ``RouterState.eligible_mask``); ``deadline`` None is
    ``now + feedback_ttl_s``, a replayed decision gives the journaled one."""

    kind: ClassVar[str] = "decision"
    ref: str
    context: int | None
    mask: np.ndarray | None
    now: float
    seq: int
    deadline: float | None = None


@quick_init
@dataclass(frozen=True)
class Feedback:
    """The outcome of decision ``ref``: learned while it is pending (``status`` "applied"),
    else only counted ("late", "expert_removed", and a journaled "duplicate" never
    exists). ``cost`` (None: the routed team's) replaces ``realized`` in the averages."""

    kind: ClassVar[str] = "feedback"
    ref: str
    reward: float
    cost: FloatArray | None
    realized: FloatArray
    status: str

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        cost = None if self.cost is None else tuple(self.cost.tolist())
        return {"reward": self.reward, "cost": cost, "status": self.status}


@dataclass(frozen=True, slots=True)
class CostReport:
    """The realized cost of decision ``ref``, known before (or without) its reward: it replaces
    ``realized`` (the decision's current cost: its booking, or the last cost reported) in the
    averages and the pacer's spend. A pending decision (``status`` "applied") keeps it as its
    cost, which its feedback then learns unless that reports another; a closed one ("late") is
    only counted, as a late feedback's cost is."""

    kind: ClassVar[str] = "cost"
    ref: str
    cost: FloatArray
    realized: FloatArray
    status: str

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        return {"cost": tuple(self.cost.tolist()), "status": self.status}


@dataclass(frozen=True, slots=True)
class Expire:
    """Pending decision ``ref`` reached its deadline; ``reward`` None drops its missing
    reward, a number is learned in its place (``on_missing``)."""

    kind: ClassVar[str] = "expire"
    ref: str
    reward: float | None

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        return {"reward": self.reward}


@dataclass(frozen=True, slots=True)
class AddExpert:
    """A new expert with this cost vector (in cost-name order)."""

    kind: ClassVar[str] = "add_expert"
    ref: str
    cost: list[float]

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        return {"cost": list(self.cost)}


@dataclass(frozen=True, slots=True)
class RemoveExpert:
    """Remove expert ``ref``; ``expired``: the pending decisions that routed to it, closed."""

    kind: ClassVar[str] = "remove_expert"
    ref: str
    expired: list[str]

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        return {"expired": list(self.expired)}


@dataclass(frozen=True, slots=True)
class SetCost:
    """Expert ``ref``'s new cost vector (in cost-name order): its price from the next decision
    on; the policy keeps what it learned about it."""

    kind: ClassVar[str] = "set_cost"
    ref: str
    cost: list[float]

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        return {"cost": list(self.cost)}


@dataclass(frozen=True, slots=True)
class SetBounds:
    """The whole new bounds on the time-averaged realized costs, by cost name."""

    kind: ClassVar[str] = "set_bounds"
    upper: dict[str, float]
    lower: dict[str, float]
    ref: None = None

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        return {"upper": dict(self.upper), "lower": dict(self.lower)}


@dataclass(frozen=True, slots=True)
class Configure:
    """New values of configuration keys that change no other state (``feedback_ttl_s``,
    ``on_missing``...; None removes a key)."""

    kind: ClassVar[str] = "configure"
    settings: dict[str, Any]
    ref: None = None

    def payload(self) -> dict[str, Any]:
        """The journal event's fields."""
        return dict(self.settings)


Event = (
    Decide
    | Feedback
    | CostReport
    | Expire
    | AddExpert
    | RemoveExpert
    | SetCost
    | SetBounds
    | Configure
)
#: The events that the live layer journals as given (a decision's fields are derived).
Given = Feedback | CostReport | Expire | AddExpert | RemoveExpert | SetCost | SetBounds | Configure
#: The events that change the experts, their costs or the bounds, and with them the policy.
Change = AddExpert | RemoveExpert | SetCost | SetBounds
