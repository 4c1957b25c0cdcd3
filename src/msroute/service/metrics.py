"""Prometheus metrics of one app, in a registry the app owns (tests can create many apps).

Counters and histograms are observed as requests are served (they count this process's
requests: they restart from zero with the process, as Prometheus counters do). Gauges describe
each router's state and are read from ``router.state()`` when ``/metrics`` is scraped, so they
always agree with the journal, across restarts too.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Summary,
    generate_latest,
)

__all__ = ["FEEDBACK_STATUSES", "DelayClock", "RouterCounters", "ServiceMetrics"]

M = TypeVar("M", Counter, Gauge, Histogram, Summary)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_DELAY_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)


#: The statuses of a feedback (``router.feedback``'s return values).
FEEDBACK_STATUSES = ("applied", "duplicate", "late", "expert_removed")


@dataclass(frozen=True)
class RouterCounters:
    """One router's children of the counters observed on every request."""

    decisions: Counter
    feedback: Mapping[str, Counter]
    feedback_delay: Histogram
    reward: Summary


class ServiceMetrics:
    """The metric families of the service, registered in a private ``CollectorRegistry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = self._family(Counter, "decisions", "Decisions served by this process.")
        self.feedback = self._family(
            Counter,
            "feedback",
            "Feedback received by this process, by status (applied, duplicate, late).",
            ("router", "status"),
        )
        self.feedback_delay = self._family(
            Histogram,
            "feedback_delay_seconds",
            "Time from a decision to its first feedback (decisions made by this process).",
            buckets=_DELAY_BUCKETS,
        )
        self.reward = self._family(
            Summary,
            "feedback_reward",
            "Rewards of the feedback received by this process (the first feedback of each "
            "decision: applied, late or expert_removed). rate(_sum) / rate(_count) over a "
            "window is the mean reward of the window.",
        )
        self.latency = self._family(
            Histogram,
            "request_duration_seconds",
            "Time to serve a request, by method and endpoint (path template).",
            ("method", "endpoint"),
            buckets=_LATENCY_BUCKETS,
        )
        self.writable = self._family(
            Gauge,
            "journal_writable",
            "1 while the router's journal takes writes, 0 from a failed write until one "
            "commits again (what /healthz reports).",
        )
        self.pending = self._family(Gauge, "pending_decisions", "Decisions awaiting feedback.")
        self.expired = self._family(
            Gauge, "expired_decisions", "Decisions expired without feedback (in the journal)."
        )
        self.journal_decisions = self._family(
            Gauge, "journal_decisions", "Decisions in the router's journal."
        )
        self.policy_version = self._family(
            Gauge, "policy_version", "Version of the routing policy."
        )
        self.avg_cost = self._family(
            Gauge,
            "avg_cost",
            "Time-averaged realized cost per decision, by cost name.",
            ("router", "cost"),
        )
        self.spent = self._family(
            Gauge,
            "spent",
            "Total realized cost since the router started, by cost name (dollars for usd).",
            ("router", "cost"),
        )
        self.bound = self._family(
            Gauge,
            "cost_bound",
            "Bound on the time-averaged cost, by cost name and side (upper, lower).",
            ("router", "cost", "side"),
        )
        self.commit_groups = self._family(
            Gauge,
            "commit_groups",
            "Journal transactions committed by this process (one per group of requests).",
        )
        self.commit_calls = self._family(
            Gauge,
            "commit_calls",
            "Router calls applied by this process (calls / groups = mean group size).",
        )
        self._hot: dict[str, RouterCounters] = {}
        self._bounds: dict[str, set[tuple[str, str]]] = {}  # the bound labels set, by router

    def _family(
        self,
        kind: type[M],
        name: str,
        doc: str,
        labels: tuple[str, ...] = ("router",),
        **kwargs: Any,
    ) -> M:
        """One metric family ``msroute_<name>`` in this registry (labelled by router by default)."""
        return kind(f"msroute_{name}", doc, labels, registry=self.registry, **kwargs)

    def hot(self, router: str) -> RouterCounters:
        """The per-router children of the request-time metrics (looked up once, not per call)."""
        counters = self._hot.get(router)
        if counters is None:
            counters = self._hot[router] = RouterCounters(
                decisions=self.decisions.labels(router),
                feedback={s: self.feedback.labels(router, s) for s in FEEDBACK_STATUSES},
                feedback_delay=self.feedback_delay.labels(router),
                reward=self.reward.labels(router),
            )
        return counters

    def set_state(self, router: str, state: Mapping[str, Any], groups: int, calls: int) -> None:
        """Copy one router's ``state()`` (and its owner's commit counts) into the gauges."""
        self.pending.labels(router).set(state["pending"])
        self.expired.labels(router).set(state["expired"])
        self.journal_decisions.labels(router).set(state["decisions"])
        self.policy_version.labels(router).set(state["policy_version"])
        for cost, value in state["avg_cost"].items():
            self.avg_cost.labels(router, cost).set(value)
        for cost, value in state["spent"].items():
            self.spent.labels(router, cost).set(value)
        bounds = {
            (cost, side): value
            for side in ("upper", "lower")
            for cost, value in (state["bounds"].get(side) or {}).items()
            if value is not None
        }
        for cost, side in self._bounds.get(router, set()) - bounds.keys():  # bounds removed
            self.bound.remove(router, cost, side)
        for (cost, side), value in bounds.items():
            self.bound.labels(router, cost, side).set(value)
        self._bounds[router] = set(bounds)
        self.commit_groups.labels(router).set(groups)
        self.commit_calls.labels(router).set(calls)

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class DelayClock:
    """When each recent decision of this process was made, to observe its feedback delay.

    Entries leave at their first feedback, or once older than ``horizon_s`` (late feedback past
    that is not timed), and the oldest leave first beyond ``capacity``: memory stays bounded.
    """

    def __init__(self, horizon_s: float, capacity: int = 200_000) -> None:
        self._horizon = horizon_s
        self._capacity = capacity
        self._made: OrderedDict[str, float] = OrderedDict()

    def start(self, decision_id: str) -> None:
        """Record that ``decision_id`` was just made (a repeat keeps the first time)."""
        now = time.monotonic()
        self._made.setdefault(decision_id, now)
        while self._made:
            oldest_id, made = next(iter(self._made.items()))
            if len(self._made) <= self._capacity and now - made <= self._horizon:
                break
            del self._made[oldest_id]

    def stop(self, decision_id: str) -> float | None:
        """Seconds since ``decision_id`` was made, or None if this process did not time it."""
        made = self._made.pop(decision_id, None)
        return None if made is None else time.monotonic() - made
