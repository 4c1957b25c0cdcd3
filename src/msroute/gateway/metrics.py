"""The gateway's metrics, in the service's registry: upstream calls, tokens, dollars, budgets."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from msroute.gateway.prices import Usage

__all__ = ["GatewayMetrics"]

_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class GatewayMetrics:
    """The metric families of ``msroute gateway`` (``msroute_upstream_*``, ``msroute_budget_*``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def family(kind: Any, name: str, doc: str, labels: tuple[str, ...], **kw: Any) -> Any:
            return kind(f"msroute_{name}", doc, labels, registry=registry, **kw)

        member = ("router", "expert")
        self.calls: Counter = family(
            Counter,
            "upstream_calls",
            "Upstream calls, by outcome (ok, error, timeout, no_usage: answered without a usage).",
            (*member, "outcome"),
        )
        self.seconds: Histogram = family(
            Histogram,
            "upstream_seconds",
            "Time of an answered upstream call.",
            member,
            buckets=_BUCKETS,
        )
        self.usd: Counter = family(
            Counter, "upstream_usd", "Dollars booked for upstream calls (usage x prices).", member
        )
        self.tokens: Counter = family(
            Counter,
            "upstream_tokens",
            "Tokens upstreams billed, by kind (prompt, completion, cached).",
            (*member, "kind"),
        )
        self.budget: Gauge = family(
            Gauge, "budget_usd", "Dollars a router may spend in the period.", ("router", "period")
        )
        self.budget_spent: Gauge = family(
            Gauge,
            "budget_spent_usd",
            "Dollars a router spent in the current period.",
            ("router", "period"),
        )
        self.query_bound: Gauge = family(
            Gauge, "budget_query_bound_usd", "The per-query bound the budgets give.", ("router",)
        )
        # The labelled children of the per-call families, each looked up once (a series
        # appears when first counted, as with ``labels``).
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, family: Any, *labels: str) -> Any:
        key = (family, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def call(self, router: str, expert: str, outcome: str, usd: float, usage: Usage | None) -> None:
        """Count one upstream call and what it billed."""
        self._child(self.calls, router, expert, outcome).inc()
        if usd > 0:
            self._child(self.usd, router, expert).inc(usd)
        if usage is not None:
            for kind, n in (
                ("prompt", usage.prompt),
                ("completion", usage.completion),
                ("cached", usage.cached),
            ):
                if n:
                    self._child(self.tokens, router, expert, kind).inc(n)

    def observe_seconds(self, router: str, expert: str, seconds: float) -> None:
        """The time of one answered upstream call."""
        self._child(self.seconds, router, expert).observe(seconds)

    def set_budget(self, router: str, report: dict[str, Any]) -> None:
        """Copy a budget plan's report into the gauges."""
        for period, values in report.get("periods", {}).items():
            self.budget.labels(router, period).set(values["usd"])
            self.budget_spent.labels(router, period).set(values["spent_usd"])
        if "query_bound" in report:
            self.query_bound.labels(router).set(report["query_bound"])
