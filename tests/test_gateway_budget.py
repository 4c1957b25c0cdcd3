"""Dollars per day as a per-query bound (msroute.gateway.budget), on a Router under a simulated
clock: each day's spend stays within its budget, in steady traffic, in a spike, across a
restart; the bound is set rarely."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msroute.gateway.budget import TICK_S, BudgetPlan, period_bounds
from msroute.gateway.config import BudgetConfig
from msroute.router import Router

CHEAP, PRICEY = 0.001, 0.01
CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 1,
    "cost_names": ["usd"],
    "seed": 4,
    "experts": {"cheap": [CHEAP], "pricey": [PRICEY]},
}
SKILL = {"cheap": 0.3, "pricey": 0.9}  # the router wants to spend
#: Midnight UTC of a day, then the simulation's clock.
DAY0 = datetime(2026, 3, 10, tzinfo=UTC).timestamp()


def simulate(
    plan: BudgetPlan,
    router: Router,
    rate: Any,
    start: float,
    end: float,
    rng: np.random.Generator,
    markup: float = 1.2,
) -> dict[str, int]:
    """Traffic at ``rate(t)`` queries per second from ``start`` to ``end``: each call costs
    ``markup`` times its booking (reported as it returns) and is fed back; the plan looks every
    ``TICK_S`` seconds and sets the router's bound when it says. Returns how often it did."""
    settings = {"set": 0}
    t = start
    while t < end:
        state = router.state()
        bound = plan.observe(t, state["decisions"], state["spent"]["usd"])
        if bound is not None:
            router.set_bounds(upper={"usd": bound})
            plan.applied(bound)
            settings["set"] += 1
        for _ in range(rng.poisson(rate(t) * TICK_S)):
            d = router.route()
            # The table price times the markup (the booking itself learns the markup).
            price = sum(CONFIG["experts"][e][0] for e in d.team)
            router.report_cost(d.decision_id, {"usd": markup * price})
            router.feedback(d.decision_id, max(SKILL[e] for e in d.team))
        t += TICK_S
    return settings


def spent_between(spends: list[tuple[float, float]], a: float, b: float) -> float:
    """Dollars spent from time a to time b, from (time, total spent) samples."""
    at = dict(spends)
    return at[b] - at[a]


def test_each_day_stays_within_its_budget_and_the_bound_moves_rarely(tmp_path: Path) -> None:
    budget = 30.0  # all-pricey traffic would cost about $62 a day, all-cheap $6
    plan = BudgetPlan(BudgetConfig(usd_per_day=budget, update_s=900), None, CHEAP * 1.001, None)
    router = Router(CONFIG)
    rng = np.random.default_rng(0)
    spends = [(DAY0, 0.0)]
    for day in range(2):
        start = DAY0 + day * 86400
        settings = simulate(plan, router, lambda t: 0.05, start, start + 86400, rng)
        spends.append((start + 86400, router.state()["spent"]["usd"]))
        used = spent_between(spends, start, start + 86400)
        assert 0.8 * budget < used <= budget, (day, used)
        assert settings["set"] <= 96  # at most every 15 minutes (most ticks change nothing)
    assert plan.report["periods"]["day"]["usd"] == budget


def test_a_spike_is_seen_within_a_tick_and_paid_back_the_same_day() -> None:
    budget = 30.0
    plan = BudgetPlan(BudgetConfig(usd_per_day=budget, update_s=900), None, CHEAP * 1.001, None)
    router = Router(CONFIG)
    rng = np.random.default_rng(1)
    simulate(plan, router, lambda t: 0.05, DAY0, DAY0 + 86400, rng)
    before = router.state()["spent"]["usd"]
    spike = (DAY0 + 86400 + 6 * 3600, DAY0 + 86400 + 8 * 3600)

    def rate(t: float) -> float:  # ten times the traffic for two hours
        return 0.5 if spike[0] <= t < spike[1] else 0.05

    simulate(plan, router, rate, DAY0 + 86400, DAY0 + 2 * 86400, rng)
    used = router.state()["spent"]["usd"] - before
    assert used <= budget * 1.02, used  # the spike's first tick is all it could overspend
    # The per-query bound fell during the spike (the forecast took the spike's rate).
    assert plan.report["periods"]["day"]["expected_queries"] >= 1


def test_a_restart_keeps_the_days_anchor_and_a_lost_plan_counts_the_day_as_spent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chat.db.budget.json"
    config = BudgetConfig(usd_per_day=30.0, update_s=900)
    plan = BudgetPlan(config, None, CHEAP * 1.001, path)
    router = Router(CONFIG)
    rng = np.random.default_rng(2)
    noon = DAY0 + 43200
    simulate(plan, router, lambda t: 0.05, DAY0, noon, rng)
    state = router.state()
    plan.observe(noon, state["decisions"], state["spent"]["usd"])
    again = BudgetPlan(config, None, CHEAP * 1.001, path)  # the gateway restarted
    again.observe(noon, state["decisions"], state["spent"]["usd"])
    assert again.report["periods"]["day"]["spent_usd"] == pytest.approx(
        plan.report["periods"]["day"]["spent_usd"], rel=1e-9
    )
    path.unlink()
    lost = BudgetPlan(config, None, CHEAP * 1.001, path)
    lost.observe(noon, state["decisions"], state["spent"]["usd"])
    assert lost.report["periods"]["day"]["spent_usd"] == pytest.approx(15.0)  # half the day
    fresh = BudgetPlan(config, None, CHEAP * 1.001, None)
    fresh.observe(noon, 0, 0.0)  # a new router: its whole budget
    assert fresh.report["periods"]["day"]["spent_usd"] == 0.0


def test_the_bound_respects_the_configured_cap_and_the_cheapest_expert() -> None:
    plan = BudgetPlan(BudgetConfig(usd_per_day=1e6), 0.004, CHEAP, None)
    assert plan.observe(DAY0, 0, 0.0) == 0.004  # a generous budget: the cap
    tight = BudgetPlan(BudgetConfig(usd_per_day=1.0), None, CHEAP, None)
    first = tight.observe(DAY0 + 60, 0, 0.0)
    assert first is not None
    tight.applied(first)
    # 1,000 queries in 140 s spent the day's dollar and more: the cheapest expert from now on.
    assert tight.observe(DAY0 + 200, 1000, 1.5) == CHEAP


@pytest.mark.parametrize(
    ("period", "when", "start", "end"),
    [
        ("day", "2026-03-10T13:45:00", "2026-03-10T00:00:00", "2026-03-11T00:00:00"),
        ("month", "2026-12-31T23:59:59", "2026-12-01T00:00:00", "2027-01-01T00:00:00"),
        ("month", "2028-02-15T00:00:00", "2028-02-01T00:00:00", "2028-03-01T00:00:00"),
    ],
)
def test_periods_are_utc_calendar_days_and_months(
    period: str, when: str, start: str, end: str
) -> None:
    def ts(text: str) -> float:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()

    assert period_bounds(period, ts(when)) == (ts(start), ts(end))
