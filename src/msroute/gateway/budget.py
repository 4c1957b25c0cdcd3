"""Budgets in dollars per day or per month, turned into the per-query bound a router enforces.

A router's bounds hold on the time-averaged spend per query since it started (its pacer keeps
``spend(n) <= n u`` after every decision ``n``). A budget of ``B`` dollars for a period (a UTC
calendar day or month) becomes such a bound: with ``S`` dollars spent and ``N`` decisions made
since the router started, ``R = B - (dollars spent since the period began)`` left, and ``Q``
queries expected in the rest of the period,

    u = (S + R) / (N + Q)

so that if ``Q`` queries come, the pacer ends the period having spent at most ``S + R``: the
period's budget, whatever the router spent before it. ``Q`` is the expected query rate times the
time left, the rate being the larger of an exponentially weighted average of the queries per
second (time constant ``RATE_TAU_S``) and the rate since the bound was last set. The bound is the
least over the configured periods, at most the configured dollars per query, and at least what
the cheapest expert costs (below that no routing meets it). It is set with
``Router.set_bounds`` (journaled) at most every ``update_s`` seconds, and only when it moves by
more than ``TOLERANCE`` (each change restarts the policy's dual).

**A traffic spike.** Until the bound is set again, the queries above the forecast are paid at
the current bound: the overrun of a period is at most those queries times ``u``. The spike is
seen early: once ``SPIKE_MIN`` queries and twice the forecast have come since the last setting
(checked every ``TICK_S`` seconds, and no sooner than ``MIN_UPDATE_S`` after it), the bound is
set again from the new rate, and the pacer pays back what was spent above it (docs/gateway.md).

The anchors of each period (the spend and the count when it began) and the rate are kept next
to the journal (``<journal>.budget.json``, written atomically at each setting). Without it, a
router that already has traffic counts the period as spent at the budget's pace so far
(conservative); a new router starts each period with its whole budget.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msroute._atomic import write_text_atomic
from msroute.gateway.config import BudgetConfig

__all__ = [
    "MIN_UPDATE_S",
    "RATE_TAU_S",
    "SPIKE_MIN",
    "TICK_S",
    "TOLERANCE",
    "BudgetPlan",
    "period_bounds",
]

_log = logging.getLogger("msroute.gateway")

#: Time constant of the query rate's moving average, in seconds.
RATE_TAU_S = 3600.0
#: Seconds between two looks at a router's counts.
TICK_S = 10.0
#: The least time between two settings of the bound, in seconds (a spike's).
MIN_UPDATE_S = 10.0
#: Queries since the last setting that can reveal a spike (with twice the forecast).
SPIKE_MIN = 50
#: The relative change of the bound below which it is not set again.
TOLERANCE = 0.05


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """The start and end (Unix seconds) of the UTC day or month holding ``now``."""
    t = datetime.fromtimestamp(now, UTC)
    if period == "day":
        start = t.replace(hour=0, minute=0, second=0, microsecond=0)
        return start.timestamp(), start.timestamp() + 86400.0
    start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start.timestamp(), start.replace(year=year, month=month).timestamp()


@dataclass
class _Period:
    """Where one period began: its start time, and the router's spend and count then."""

    start: float
    spent: float
    decisions: int


@dataclass
class _State:
    periods: dict[str, _Period] = field(default_factory=dict)
    rate: float | None = None  # queries per second, moving average
    seen_at: float | None = None  # the last look
    seen_n: int = 0
    set_at: float | None = None  # the last setting of the bound
    set_n: int = 0
    set_rate: float = 0.0  # the forecast rate then
    bound: float | None = None


class BudgetPlan:
    """The per-query bound of one router under its budgets (see the module docstring).

    Parameters
    ----------
    config : BudgetConfig
        Dollars per day and per month, and the seconds between two settings.
    cap : float or None
        The configured dollars per query: the bound never exceeds it.
    floor : float
        The least bound any routing can meet (the cheapest expert's booking).
    path : Path or None
        Where the plan is kept between runs (None: not kept).
    """

    def __init__(
        self, config: BudgetConfig, cap: float | None, floor: float, path: Path | None
    ) -> None:
        self.config = config
        self.cap = cap
        self.floor = floor
        self.path = path
        self.budgets = {
            name: value
            for name, value in (("day", config.usd_per_day), ("month", config.usd_per_month))
            if value is not None
        }
        self._state = self._load()
        self._fresh = not self._state.periods  # nothing kept: see _anchor
        self.report: dict[str, Any] = {}

    def _load(self) -> _State:
        if self.path is None or not self.path.exists():
            return _State()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            periods = {k: _Period(**v) for k, v in raw.pop("periods").items()}
            return _State(periods=periods, **raw)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            _log.warning("%s: cannot read the budget's anchors (%s); starting anew", self.path, exc)
            return _State()

    def save(self) -> None:
        """Keep the plan next to the journal (atomically)."""
        if self.path is not None:
            write_text_atomic(self.path, json.dumps(asdict(self._state)))

    @property
    def bound(self) -> float | None:
        """The per-query bound last set."""
        return self._state.bound

    def _anchor(self, name: str, now: float, decisions: int, spent: float) -> _Period:
        start, end = period_bounds(name, now)
        kept = self._state.periods.get(name)
        if kept is not None and kept.start == start:
            return kept
        # A new period, seen first now. Had the plan never been kept, a router with traffic
        # has spent an unknown part of this period: count it as spent at the budget's pace.
        already = 0.0
        if self._fresh and decisions > 0:
            already = self.budgets[name] * (now - start) / (end - start)
        period = _Period(start, spent - already, decisions)
        self._state.periods[name] = period
        return period

    def observe(self, now: float, decisions: int, spent: float) -> float | None:
        """Take the router's counts at ``now``: the new per-query bound to set, or None.

        Parameters
        ----------
        now : float
            Unix time.
        decisions : int
            Decisions made since the router started.
        spent : float
            Dollars spent since the router started (``state()["spent"]["usd"]``).
        """
        st = self._state
        if st.seen_at is not None and now > st.seen_at:
            dt = now - st.seen_at
            current = max(decisions - st.seen_n, 0) / dt
            alpha = 1.0 - math.exp(-dt / RATE_TAU_S)
            st.rate = current if st.rate is None else st.rate + alpha * (current - st.rate)
        st.seen_at, st.seen_n = now, decisions
        recent = 0.0
        if st.set_at is not None and now > st.set_at:
            recent = max(decisions - st.set_n, 0) / (now - st.set_at)
        rate = max(st.rate or 0.0, recent)
        bounds = {}
        report: dict[str, Any] = {"rate_per_s": rate, "periods": {}}
        for name, budget in self.budgets.items():
            period = self._anchor(name, now, decisions, spent)
            end = period_bounds(name, now)[1]
            used = spent - period.spent
            expected = max(1.0, rate * (end - now))
            bounds[name] = (spent + budget - used) / (decisions + expected)
            report["periods"][name] = {
                "usd": budget,
                "spent_usd": used,
                "start": period.start,
                "end": end,
                "expected_queries": expected,
                "query_bound": bounds[name],
            }
        self._fresh = False  # every period is anchored from here on
        target = min(bounds.values())
        if self.cap is not None:
            target = min(target, self.cap)
        target = max(target, self.floor)
        report["query_bound"] = target
        self.report = report
        if not self._due(now, decisions):
            return None
        st.set_at, st.set_n, st.set_rate = now, decisions, rate
        self.save()
        if st.bound is not None and abs(target - st.bound) <= TOLERANCE * st.bound:
            return None
        return target

    def _due(self, now: float, decisions: int) -> bool:
        st = self._state
        if st.set_at is None or st.bound is None:
            return True
        since = now - st.set_at
        if since >= self.config.update_s:
            return True
        extra = decisions - st.set_n
        forecast = st.set_rate * since
        return since >= MIN_UPDATE_S and extra >= max(SPIKE_MIN, 2.0 * forecast)

    def applied(self, bound: float) -> None:
        """The router now enforces ``bound``: keep it (and the plan)."""
        self._state.bound = bound
        self.save()
