"""A router's state and its one transition function, ``apply(state, event)``.

docs/architecture.md, "The router and the journal": a router is a state machine over the events
of its journal. ``RouterState`` is everything the events determine (the experts and their
layouts, the policy, the pending decisions, the counters and the realized cost); ``apply`` moves
it by one event. Nothing here reads the clock or touches the journal: the live layer
(``msroute.router.core``) validates a call, applies its event and journals it, and recovery
(``msroute.router.recovery``) applies the journal's events to rebuild the state, so each
transition exists once and a replayed journal gives the state of a router that never stopped.

The events, one class per journal kind, are values of ``msroute.router.events`` (re-exported
here).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from msroute._validation import FloatArray, IntArray
from msroute.core.problem import Constraints, Problem
from msroute.errors import (
    InfeasibleConstraintsError,
    InvalidFeedbackError,
    ResourceError,
    RouterConfigError,
)
from msroute.policies import live_step
from msroute.policies.base import BasePolicy, Decision
from msroute.policies.live import DEFAULT_OMD_PARAMS, TEAM_OMD_PARAMS, live_kwargs
from msroute.policies.omd import OMDApproachability
from msroute.policies.registry import get_policy_class, make_policy
from msroute.router.config import RouterConfig
from msroute.router.events import (
    AddExpert,
    Change,
    Configure,
    CostReport,
    Decide,
    Event,
    Expire,
    Feedback,
    Given,
    RemoveExpert,
    RoutedDecision,
    SetBounds,
    SetCost,
)
from msroute.router.pending import Pending
from msroute.router.streams import DecisionStreams

if TYPE_CHECKING:
    from msroute.prompts.model import ContextModel

__all__ = [
    "DEFAULT_OMD_PARAMS",
    "TEAM_OMD_PARAMS",
    "AddExpert",
    "Configure",
    "CostReport",
    "Decide",
    "Event",
    "EventMismatch",
    "Expire",
    "Feedback",
    "Given",
    "RemoveExpert",
    "RoutedDecision",
    "RouterState",
    "SetBounds",
    "SetCost",
    "apply",
    "build_policy",
    "legacy_policy_kwargs",
    "policy_kwargs",
]


# ---------------------------------------------------------------------- state
#: Entries of closed decisions the deadline heap may hold beyond twice the pending ones.
_HEAP_SLACK = 1024


@dataclass(eq=False)
class RouterState:
    """What a router's events determine; build the initial one with ``initial``."""

    config: RouterConfig
    policy: BasePolicy
    ids: list[str]
    costs: FloatArray
    contexts: dict[str, int]
    retired: set[str] = field(default_factory=set)
    layouts: list[list[str]] = field(default_factory=list)
    n: int = 0  # decisions made
    applied: int = 0
    late: int = 0
    expired: int = 0
    version: int = 0
    cost_sum: FloatArray = field(default_factory=lambda: np.zeros(0))
    pending: dict[str, Pending] = field(default_factory=dict)
    deadlines: list[tuple[float, int, str]] = field(default_factory=list)  # (deadline, n, id)
    warm_sha256: str | None = None  # the warm-start table's, where one is configured

    def __post_init__(self) -> None:
        self.col = {e: i for i, e in enumerate(self.ids)}
        self.cost_rows: list[list[float]] = self.costs.tolist()
        self.ctx_arrays = [np.array([i], dtype=np.int64) for i in range(len(self.contexts))]
        self.constraints = constraints_of(self.config)
        if not self.layouts:
            self.layouts = [list(self.ids)]
        if not len(self.cost_sum):
            self.cost_sum = np.zeros(len(self.config.cost_names))

    @classmethod
    def initial(
        cls,
        cfg: RouterConfig,
        kwargs: dict[str, Any] | None = None,
        warm_sha256: str | None = None,
        text_model: ContextModel | None = None,
        warm_table: str | None = None,
    ) -> RouterState:
        """The state before any event: the policy over the configured experts, built with
        ``kwargs`` (a journal's recorded constructor arguments; default:
        ``policy_kwargs(cfg)``), and started from the configured warm-start table
        (``msroute.router.warm``; ``warm_sha256``: the SHA-256 a journal recorded of it; its
        prompts in the contexts of ``text_model``, the context model of ``contexts_from``;
        ``warm_table``: where that table is read instead of its configured path, one that moved
        since, ``msroute.router.warm.moved_table``).

        Raises
        ------
        InfeasibleConstraintsError, ResourceError, RouterConfigError
            The experts cannot meet the bounds, a ``params`` value is invalid, or the
            warm-start table is unusable or not the one recorded.
        """
        check_reward_range(cfg)
        ids = list(cfg.experts)
        costs = np.array([cfg.experts[e] for e in ids], dtype=np.float64)
        # Every policy takes contexts: the OMD family learns one routing per context (shared
        # dual), a context-free policy one routing for all; both journal each decision's context.
        contexts = {c: i for i, c in enumerate(cfg.contexts or ())}
        given = policy_kwargs(cfg) if kwargs is None else kwargs
        policy = build_policy(cfg, costs, constraints_of(cfg), given)
        state = cls(cfg, policy, ids, costs, contexts)
        if cfg.warm_start is not None:
            from msroute.router.warm import apply_warm_start

            names = list(cfg.contexts or ())
            settings = (
                cfg.warm_start if warm_table is None else {**cfg.warm_start, "table": warm_table}
            )
            state.warm_sha256 = apply_warm_start(
                policy, settings, ids, names, warm_sha256, text_model
            )
        return state

    @property
    def layout(self) -> int:
        """The index of the current expert layout (it changes with every expert change)."""
        return len(self.layouts) - 1

    @property
    def omd(self) -> bool:
        """Whether the policy is of the OMD family (it keeps one routing per context)."""
        return isinstance(self.policy, OMDApproachability)

    def context_index(self, context: str | None) -> int | None:
        """The index of a context name (InvalidFeedbackError if unknown, or given to a
        router without contexts)."""
        if not self.contexts:
            if context is not None:
                raise InvalidFeedbackError(f"context: this router has no contexts, got {context!r}")
            return None
        if context is None:
            raise InvalidFeedbackError(
                f"context: none given; this router routes per context: {list(self.contexts)}"
            )
        if not isinstance(context, str) or context not in self.contexts:
            raise InvalidFeedbackError(
                f"context: unknown context {context!r}; known: {list(self.contexts)}"
            )
        return self.contexts[context]

    def eligible_mask(self, eligible: Sequence[str] | None) -> np.ndarray | None:
        """The (1, K) mask of an eligible set, None for all experts (InvalidFeedbackError for
        an empty set or an unknown id)."""
        if eligible is None:
            return None
        if isinstance(eligible, str) or not isinstance(eligible, Sequence | set | frozenset):
            raise InvalidFeedbackError(f"eligible: must be a list of expert ids, got {eligible!r}")
        if len(eligible) == 0:
            raise InvalidFeedbackError("eligible: empty; give at least one expert id")
        mask = np.zeros((1, len(self.ids)), dtype=bool)
        for e in eligible:
            col = self.col.get(e) if isinstance(e, str) else None
            if col is None:
                raise InvalidFeedbackError(f"eligible: unknown expert id {e!r}")
            mask[0, col] = True
        return None if mask.all() else mask  # all eligible: the unmasked path, as select() does

    def team_cost(self, team_cols: list[int]) -> FloatArray:
        """The team's cost vector, each distinct expert once: the same floats as
        ``costs[team_cols].sum(axis=0)`` (which adds the rows in order), in Python."""
        rows = self.cost_rows
        total = rows[team_cols[0]]
        for col in team_cols[1:]:
            total = [a + b for a, b in zip(total, rows[col], strict=True)]
        return np.array(total, dtype=np.float64)

    def decision_of(self, p: Pending) -> Decision:
        """The policy's decision value of a pending decision, for the current expert layout."""
        if p.decision is not None and p.layout == self.layout:
            return p.decision
        cols = np.array([[self.col[e] for e in p.draws]], dtype=np.int64)
        probs = None
        if p.blob is not None and p.blob_layout == self.layout:  # restored: as live holds it
            probs = np.frombuffer(p.blob, dtype=np.float64)[None, :]
        elif p.probs is not None:
            probs = np.zeros((1, len(self.ids)))
            probs[0, cols[0]] = p.probs
        return self.cache_decision(p, cols, probs)

    def cache_decision(self, p: Pending, cols: IntArray, probs: FloatArray | None) -> Decision:
        """Give ``p`` this decision value for the current layout."""
        ctx = None if p.context is None else self.ctx_arrays[p.context]
        booked = None if self.policy.pacer is None else p.cost[None, :]
        p.decision, p.layout = Decision(cols, probs, ctx, p.n, booked), self.layout
        return p.decision

    def push_deadline(self, deadline: float, n: int, ref: str) -> None:
        """Put a pending decision on the deadline heap.

        A decision that closes (feedback, expiry, a removed expert) leaves its entry on the heap
        until its deadline passes, which would hold one entry per decision of the last
        ``feedback_ttl_s`` seconds; when the heap holds more than twice the pending decisions
        (plus ``_HEAP_SLACK``), it is rebuilt from the pending set, so that its size follows
        the pending decisions, not the traffic. The entries' keys are unique (``n``), so the
        decisions come due in the same order either way."""
        heapq.heappush(self.deadlines, (deadline, n, ref))
        if len(self.deadlines) > 2 * len(self.pending) + _HEAP_SLACK:
            self.deadlines = [(p.deadline, p.n, did) for did, p in self.pending.items()]
            heapq.heapify(self.deadlines)

    def due(self, now: float) -> list[str]:
        """The pending decisions whose deadline is at or before ``now``, oldest first (taken
        off the deadline heap, which skips the decisions already closed)."""
        out = []
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            did = heapq.heappop(heap)[2]
            if did in self.pending:
                out.append(did)
        return out

    def config_with(self, **changes: Any) -> RouterConfig:
        """The current configuration with some keys changed (validated)."""
        cfg = RouterConfig.from_dict({**self.config.to_dict(), **changes})
        check_reward_range(cfg)
        return cfg

    def policy_after(self, event: Change) -> BasePolicy:
        """The policy after an expert, cost or bounds change, carrying what the current one learned
        (the policy resizes itself: ``BasePolicy.resized``). Raises (InfeasibleConstraints-
        Error, ...) before anything changes."""
        constraints = self.constraints
        if isinstance(event, SetBounds):
            constraints = constraints_of(self.config_with(constraints=event.payload()))
        ids, costs = self._experts_after(event)
        problem = Problem(costs, self.config.m_draws, constraints)
        new = self.policy.resized(problem, [self.col.get(e) for e in ids])
        if not self.omd:  # OMD checked Assumption 1 with its floor; the others route teams
            problem.check_feasible(0.0)
        new.streams = DecisionStreams(self.config.seed, new.streams.uniforms.block)
        return new

    def _experts_after(self, event: Change) -> tuple[list[str], FloatArray]:
        if isinstance(event, AddExpert):
            row = np.array(event.cost, dtype=np.float64)[None, :]
            return [*self.ids, event.ref], np.vstack([self.costs, row])
        if isinstance(event, RemoveExpert):
            keep = [i for i, e in enumerate(self.ids) if e != event.ref]
            return [self.ids[i] for i in keep], self.costs[keep]
        if isinstance(event, SetCost):
            costs = self.costs.copy()
            costs[self.col[event.ref]] = event.cost
            return self.ids, costs
        return self.ids, self.costs

    def install(self, ids: list[str], costs: FloatArray, policy: BasePolicy) -> None:
        """Route over this expert set (and costs) with this policy: a new layout."""
        if list(ids) != self.ids or not np.array_equal(costs, self.costs):
            experts = {e: tuple(row) for e, row in zip(ids, costs.tolist(), strict=True)}
            self.config = dataclasses.replace(self.config, experts=experts)
        self.ids = list(ids)
        self.col = {e: i for i, e in enumerate(self.ids)}
        self.costs = costs
        self.cost_rows = costs.tolist()
        self.layouts.append(list(self.ids))
        self.policy = policy
        self.version += 1


def constraints_of(cfg: RouterConfig) -> Constraints:
    """The bounds of a configuration, in cost-name order."""
    return Constraints(
        upper=[cfg.upper.get(n) for n in cfg.cost_names],
        lower=[cfg.lower.get(n) for n in cfg.cost_names],
        names=cfg.cost_names,
    )


def policy_kwargs(cfg: RouterConfig) -> dict[str, Any]:
    """The policy's constructor arguments for a configuration: its horizon, one run, its
    seed, the live defaults (``msroute.policies.live.live_kwargs``: pacing, and for the OMD
    family ``DEFAULT_OMD_PARAMS``, ``TEAM_OMD_PARAMS`` and a per-draw ``ix`` for a team, the
    number of contexts); then the ``params`` of the configuration (which override them)."""
    kwargs: dict[str, Any] = {"horizon": cfg.horizon, "n_runs": 1, "seed": cfg.seed}
    kwargs.update(live_kwargs(cfg.policy, cfg.m_draws, len(cfg.contexts or ()), pacing=cfg.pacing))
    kwargs.update(cfg.params)
    return kwargs


def check_reward_range(cfg: RouterConfig) -> None:
    """Refuse (RouterConfigError) rewards the policy cannot learn from: ``[reward_min,
    reward_max]`` (an unset ``reward_max``: the policy's upper end) and a numeric
    ``on_missing`` must lie in the policy's ``reward_range``, against which a replay checks
    every reward; so a feedback the router accepts always replays."""
    low, high = get_policy_class(cfg.policy).reward_range
    top = high if cfg.reward_max is None else cfg.reward_max
    if not (low <= cfg.reward_min and top <= high):
        raise RouterConfigError(
            f"reward_min, reward_max: [{cfg.reward_min:g}, {top:g}] is outside the rewards "
            f"policy {cfg.policy!r} learns from, [{low:g}, {high:g}] (its reward_range)"
        )
    if cfg.on_missing != "drop" and cfg.on_missing > top:
        raise RouterConfigError(
            f"on_missing: the default reward {cfg.on_missing:g} is above {top:g}, the most "
            f"policy {cfg.policy!r} learns from"
        )


def legacy_policy_kwargs(cfg: RouterConfig) -> dict[str, Any]:
    """``policy_kwargs`` for a journal that recorded none (created before journals recorded
    them): the OMD family then ran the linear surrogate and the variant's ``ix`` in every
    case."""
    kwargs = policy_kwargs(cfg)
    kwargs.pop("pacing", None)  # such journals ran unpaced
    if issubclass(get_policy_class(cfg.policy), OMDApproachability):
        kwargs["surrogate"] = cfg.params.get("surrogate", "linear")
        if "ix_per_k" not in cfg.params:
            kwargs.pop("ix_per_k", None)
    return kwargs


def build_policy(
    cfg: RouterConfig, costs: FloatArray, constraints: Constraints, kwargs: dict[str, Any]
) -> BasePolicy:
    """A fresh policy over these experts under these bounds, constructed with ``kwargs``, with
    one decision stream per decision (``DecisionStreams``); InfeasibleConstraintsError, ...
    when impossible."""
    problem = Problem(costs, cfg.m_draws, constraints)
    try:
        policy = make_policy(cfg.policy, problem, **kwargs)
    except (InfeasibleConstraintsError, ResourceError):  # they name the cost, or M
        raise
    except (TypeError, ValueError) as exc:  # a bad [params] value, or K too small
        raise RouterConfigError(f"params: {exc}") from exc
    if not isinstance(policy, OMDApproachability):  # OMD checked Assumption 1 with its floor
        problem.check_feasible(0.0)
    if cfg.m_draws == 1 and policy.pacer is not None:  # the compiled step, in the background
        live_step.start()
    policy.streams = DecisionStreams(cfg.seed, policy.streams.uniforms.block)
    return policy


# ---------------------------------------------------------------------- transitions
class EventMismatch(ValueError):
    """An event disagrees with the state it is applied to (a journal that does not agree
    with itself: recovery reports it as ``JournalError``)."""


def apply(
    state: RouterState,
    event: Event,
    *,
    trusted: bool = True,
    policy: BasePolicy | None = None,
) -> tuple[RoutedDecision, dict[str, Any], bytes | None] | None:
    """Move ``state`` by one event.

    Parameters
    ----------
    state : RouterState
        Changed in place.
    event : Event
    trusted : bool, default True
        Whether the event's values were validated by the live layer; False (a journal's
        event) has the policy check them again as it learns.
    policy : BasePolicy, optional
        For an expert or bounds change: the policy ``state.policy_after(event)`` built (the
        live layer builds it first, so that an infeasible change raises before anything
        changes); built here when not given.

    Returns
    -------
    tuple or None
        For a ``Decide``: the routed decision, the journal event's fields and its stored
        distribution (the probabilities' bytes, None for a policy without one). None otherwise.

    Raises
    ------
    EventMismatch
        A ``Feedback`` or ``CostReport`` whose status disagrees with the pending set, or an
        ``Expire`` of a decision that is not pending.
    """
    if isinstance(event, Decide):
        return _decide(state, event)
    if isinstance(event, Feedback):
        _feedback(state, event, trusted)
    elif isinstance(event, CostReport):
        _cost_report(state, event)
    elif isinstance(event, Expire):
        _expire(state, event, trusted)
    elif isinstance(event, Configure):
        state.config = state.config_with(**event.settings)
    else:
        _change(state, event, state.policy_after(event) if policy is None else policy)
    return None


def _decide(
    state: RouterState, event: Decide
) -> tuple[RoutedDecision, dict[str, Any], bytes | None]:
    n = state.n
    streams = state.policy.streams
    assert isinstance(streams, DecisionStreams)
    streams.start(n)
    ctx = event.context
    dec = state.policy.select_trusted(None if ctx is None else state.ctx_arrays[ctx], event.mask)
    cols = dec.draws[0].tolist()
    ids = state.ids
    draws = [ids[c] for c in cols]
    team_cols = list(dict.fromkeys(cols))
    team = [ids[c] for c in team_cols]
    # A paced policy booked the team at its table cost already (the same floats).
    cost = state.team_cost(team_cols) if dec.cost is None else dec.cost[0]
    drawn = propensities = None
    if dec.probs is not None:
        probs = dec.probs[0].tolist()
        drawn = tuple([probs[c] for c in cols])
        # The support only: with a mask, or a policy that puts no mass on some experts.
        propensities = (
            dict(zip(ids, probs, strict=True))
            if min(probs) > 0.0
            else {e: p for e, p in zip(ids, probs, strict=True) if p > 0.0}
        )
    deadline = event.now + state.config.feedback_ttl_s if event.deadline is None else event.deadline
    cost_list = cost.tolist()
    routed = RoutedDecision(  # decision_id, team, draws, propensities, policy_version, ...
        event.ref,
        team,
        draws,
        propensities,
        state.version,
        dict(zip(state.config.cost_names, cost_list, strict=True)),
        deadline,
        event.seq,
    )
    layout = state.layout
    drawn_ids = tuple(draws)
    state.pending[event.ref] = Pending(
        n, drawn_ids, drawn, ctx, cost, deadline, dec, layout, event.seq
    )
    state.push_deadline(deadline, n, event.ref)
    state.cost_sum += cost
    state.n = n + 1
    # Tuples, not the routed decision's lists: the event keeps what was decided whatever the
    # caller does with its answer, and a router without a file keeps its events as values the
    # collector stops tracking (``msroute.router.eventlog.MemoryJournal``).
    payload: dict[str, Any] = {
        "n": n,
        "draws": drawn_ids,
        "team": tuple(team),
        "probs": drawn,
        "cost": tuple(cost_list),
        "deadline": deadline,
        "version": routed.policy_version,
        "layout": layout,
    }
    if dec.allowed is not None:  # the pacer narrowed it: what a candidate is played within
        payload["allowed"] = tuple([ids[c] for c in np.flatnonzero(dec.allowed[0])])
    return routed, payload, None if dec.probs is None else dec.probs[0].tobytes()


def _feedback(state: RouterState, event: Feedback, trusted: bool) -> None:
    pending = state.pending.get(event.ref)
    if (pending is None) != (event.status != "applied"):
        raise EventMismatch(
            f"feedback status {event.status!r} of {event.ref!r} disagrees: the decision is "
            f"{'not ' if pending is None else ''}pending"
        )
    if event.cost is not None:
        state.cost_sum += event.cost - event.realized
    if pending is None:
        state.late += 1
        if event.cost is not None:  # the pacer counts the late cost as the averages do
            state.policy.settle(event.realized[None, :], event.cost[None, :], was_open=False)
        return
    del state.pending[event.ref]
    learned = pending.cost if event.cost is None else event.cost
    learn = state.policy.update_trusted if trusted else state.policy.update
    learn(state.decision_of(pending), np.array([event.reward]), learned[None, :])
    state.applied += 1
    state.version += 1


def _cost_report(state: RouterState, event: CostReport) -> None:
    pending = state.pending.get(event.ref)
    if (pending is None) != (event.status != "applied"):
        raise EventMismatch(
            f"cost status {event.status!r} of {event.ref!r} disagrees: the decision is "
            f"{'not ' if pending is None else ''}pending"
        )
    state.cost_sum += event.cost - event.realized
    # The pacer's spend takes the report now (and its estimates learn the experts' costs from
    # it); an open decision stays open until it closes.
    decision = None if pending is None else state.decision_of(pending)
    state.policy.settle(
        event.realized[None, :], event.cost[None, :], was_open=False, decision=decision
    )
    if pending is None:
        return
    pending.cost = event.cost
    decision = pending.decision
    if decision is not None and decision.cost is not None:  # booked now at the report
        pending.decision = decision.with_cost(event.cost[None, :].copy())


def _expire(state: RouterState, event: Expire, trusted: bool) -> None:
    pending = state.pending.pop(event.ref, None)
    if pending is None:
        raise EventMismatch(f"{event.ref!r} expires but is not pending")
    state.expired += 1
    if event.reward is not None:
        learn = state.policy.update_trusted if trusted else state.policy.update
        learn(state.decision_of(pending), np.array([event.reward]), pending.cost[None, :])
        state.version += 1
    else:  # closed at its booking
        state.policy.settle(pending.cost[None, :], None, was_open=True)


def _change(state: RouterState, event: Change, policy: BasePolicy) -> None:
    ids, costs = state._experts_after(event)
    if isinstance(event, RemoveExpert):
        for did in event.expired:
            closed = state.pending.pop(did)
            state.expired += 1
            policy.settle(closed.cost[None, :], None, was_open=True)
        state.retired.add(event.ref)
    elif isinstance(event, SetBounds):
        state.config = state.config_with(constraints=event.payload())
        state.constraints = constraints_of(state.config)
    state.install(ids, costs, policy)
