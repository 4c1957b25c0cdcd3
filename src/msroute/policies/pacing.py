"""Pacing: bounds on the realized spend that hold in every run, whatever the learner does.

Approachability (Lemma 5) drives the *expected* surrogate cost into the box; it does not stop
one run's realized average from ending over a bound, and a learner can be wrong about its own
spend (a linearisation far from where it was taken, realized prices above the table, a mask
that leaves only dear experts, a bound lowered mid-run). So the guarantee is kept apart from the
learner, as ad platforms pace a campaign: a ``Pacer`` watches the realized spend of its runs and
restricts each decision's eligible experts to those whose worst-case team the remaining budget
can pay for. The learner's routing stays the target: the policy samples from its own
distribution renormalized over what the pacer leaves (the propensity logged is that of the
restricted distribution, so importance weights stay exact).

The accounting, per run and cost coordinate ``j``, after ``n`` decisions:

* ``spend_j``: each decision booked at its table cost when it is made (``book``), replaced by
  the realized cost when its feedback reports one (``settle``): the router's count.
* Packing bound ``u_j``: the room for decision ``n`` is ``n u_j - spend_j - reserve_j``, and an
  eligible set ``A`` is allowed only if its worst team fits: the sum of the ``min(M, |A|)``
  largest ``c_ij`` over ``A`` (each distinct expert is paid once).
* Covering bound ``l_j``: every member of ``A`` must have ``c_ij >= n l_j - spend_j +
  reserve_j`` (a team costs at least each of its members).
* The reserve covers what the table does not know: twice the largest excess of a realized cost
  over its booking seen so far, plus, for the decisions still open, the mean excess each
  (``excess`` and ``shortfall`` for the covering side).

Within that, the experts are dropped from the dearest (relative to the room) until the worst
team fits; if no expert fits (a bound lowered below what was spent, prices that rose, a covering
bound that needs mixing), the decision goes to the one eligible expert that leaves every bound
with the most room after it (each coordinate in its own unit), which moves the spend back
toward the box as fast as one decision can.

The guarantee (stated in docs/budgets.md): if the realized cost of every decision is its table
cost (or no larger than the booking plus the reserve) and some eligible expert is inside every
bound (a *safe* expert), every bound holds on the time-averaged spend after every decision, from
the first one on. A bound lowered below the average spent so far, or realized prices above
what the reserve covers, hold again after the decisions the safe expert needs to pay back the
excess.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.problem_batch import ProblemBatch

__all__ = ["Pacer"]

#: The pacer's rooms are kept this far (relative) inside the bounds, so that the rounding of
#: a sum of costs over a long run cannot carry an average a hair over a bound.
_REL_SLACK = 1e-9
#: The largest excess of a realized cost over its booking seen so far counts this many times.
_EXCESS_FACTOR = 2.0


class Pacer:
    """The realized-spend pacing of a policy's runs (see the module docstring).

    Parameters
    ----------
    batch : ProblemBatch
        The runs' costs (the table, which books each decision) and original bounds.

    Attributes
    ----------
    spend : ndarray, shape (R, d)
        Spend so far: decisions at their booking, replaced by realized costs when reported.
    open : ndarray, shape (R,)
        Decisions booked and not settled yet.
    restricted, recovered : ndarray of int, shape (R,)
        Decisions whose eligible set the pacer narrowed, and those among them sent to the one
        expert with the most room (no set fitted).
    """

    _state_attrs: ClassVar[tuple[str, ...]] = (
        "spend",
        "open",
        "excess_max",
        "excess_sum",
        "shortfall_max",
        "shortfall_sum",
        "n_reports",
        "restricted",
        "recovered",
    )
    _state_rules: ClassVar[dict[str, str]] = {
        "spend": "nonnegative",
        "open": "nonnegative",
        "excess_max": "nonnegative",
        "excess_sum": "nonnegative",
        "shortfall_max": "nonnegative",
        "shortfall_sum": "nonnegative",
        "n_reports": "nonnegative",
        "restricted": "nonnegative",
        "recovered": "nonnegative",
    }

    def __init__(self, batch: ProblemBatch) -> None:
        r, k, d = batch.n_runs, batch.n_experts, batch.n_costs
        self.m_draws = batch.m_draws
        self.costs: FloatArray = np.ascontiguousarray(batch.costs, dtype=np.float64)
        self.lo: FloatArray = np.asarray(batch.lo_ori, dtype=np.float64)
        self.hi: FloatArray = np.asarray(batch.hi_ori, dtype=np.float64)
        self._upper = np.isfinite(self.hi)
        self._lower = np.isfinite(self.lo)
        self._any_upper, self._any_lower = bool(self._upper.any()), bool(self._lower.any())
        top = np.sort(self.costs, axis=1)[:, ::-1][:, : min(self.m_draws, k)].sum(axis=1)
        #: The dearest team over every expert (R, d), and the least single expert: when the room
        #: covers these, no eligible set can break a bound (the fast path).
        self._worst_all: FloatArray = np.asarray(top, dtype=np.float64)
        self._least_all: FloatArray = self.costs.min(axis=1)
        unit = self.costs.max(axis=1)
        finite = np.where(self._upper, np.abs(self.hi), np.where(self._lower, self.lo, 0.0))
        self._unit: FloatArray = np.where(unit > 0, unit, np.where(finite > 0, finite, 1.0))
        self._rows = [row.tolist() for row in self.costs] if r == 1 else None
        # One run's bounds as (bound, dearest team) and (bound, least expert) pairs; an absent
        # bound as one nothing can break (the fast check of ``_clear_one``).
        self._upper_one = [
            (h, w) if math.isfinite(h) else (math.inf, -math.inf)
            for h, w in zip(self.hi[0].tolist(), self._worst_all[0].tolist(), strict=True)
        ]
        self._lower_one = [
            (v, least) if math.isfinite(v) else (0.0, math.inf)
            for v, least in zip(self.lo[0].tolist(), self._least_all[0].tolist(), strict=True)
        ]
        self.spend: FloatArray = np.zeros((r, d))
        self.open: FloatArray = np.zeros(r)
        self.excess_max: FloatArray = np.zeros((r, d))
        self.excess_sum: FloatArray = np.zeros((r, d))
        self.shortfall_max: FloatArray = np.zeros((r, d))
        self.shortfall_sum: FloatArray = np.zeros((r, d))
        self.n_reports: FloatArray = np.zeros(r)
        self.restricted: IntArray = np.zeros(r, dtype=np.int64)
        self.recovered: IntArray = np.zeros(r, dtype=np.int64)

    # ------------------------------------------------------------------ the restriction
    def rooms(self, n: int) -> tuple[FloatArray, FloatArray]:
        """What decision ``n`` (1-based) may cost: the packing room (R, d), ``inf`` where no
        upper bound, and the covering need (R, d), ``-inf`` where no lower bound."""
        reports = np.maximum(self.n_reports, 1.0)[:, None]
        open_ = self.open[:, None]
        with np.errstate(invalid="ignore"):  # an absent bound is infinite: inf - x stays inf
            room = (
                n * self.hi * (1.0 - _REL_SLACK)
                - self.spend
                - _EXCESS_FACTOR * self.excess_max
                - open_ * self.excess_sum / reports
            )
            need = (
                n * self.lo * (1.0 + _REL_SLACK)
                - self.spend
                + _EXCESS_FACTOR * self.shortfall_max
                + open_ * self.shortfall_sum / reports
            )
        return np.where(self._upper, room, np.inf), np.where(self._lower, need, -np.inf)

    def restrict(self, n: int, eligible: BoolArray | None) -> BoolArray | None:
        """The eligible set of decision ``n`` (1-based) after pacing: (R, K), or None where
        every expert stays eligible (``eligible`` None and nothing narrowed)."""
        if self._rows is not None and self._clear_one(n):
            return eligible  # one run with room for any team (the live router's common case)
        room, need = self.rooms(n)
        if bool(np.all(room >= self._worst_all)) and bool(np.all(need <= self._least_all)):
            return eligible  # no set of experts can break a bound: the common case
        r, k = self.costs.shape[:2]
        elig = np.ones((r, k), dtype=bool) if eligible is None else eligible
        fits = self._fitting(room, need, elig)
        narrowed = np.asarray((fits != elig).any(axis=1))
        if not narrowed.any():
            return eligible
        empty = np.asarray(~fits.any(axis=1))
        if empty.any():
            fits[empty] = self._most_room(room[empty], need[empty], elig[empty], empty)
            self.recovered += empty
        self.restricted += narrowed
        return fits

    def _clear_one(self, n: int) -> bool:
        """``rooms`` of one run against the dearest team and the least expert, in Python
        floats: whether no set of experts can break a bound at decision ``n``."""
        reports = max(float(self.n_reports[0]), 1.0)
        open_ = float(self.open[0])
        spend = self.spend[0].tolist()
        if self._any_upper:
            emax, esum = self.excess_max[0].tolist(), self.excess_sum[0].tolist()
            for j, (hi, worst) in enumerate(self._upper_one):
                room = n * hi * (1.0 - _REL_SLACK) - spend[j]
                if room - _EXCESS_FACTOR * emax[j] - open_ * esum[j] / reports < worst:
                    return False
        if self._any_lower:
            smax, ssum = self.shortfall_max[0].tolist(), self.shortfall_sum[0].tolist()
            for j, (lo, least) in enumerate(self._lower_one):
                need = n * lo * (1.0 + _REL_SLACK) - spend[j]
                if need + _EXCESS_FACTOR * smax[j] + open_ * ssum[j] / reports > least:
                    return False
        return True

    def _fitting(self, room: FloatArray, need: FloatArray, elig: BoolArray) -> BoolArray:
        """The largest set per run, from the least dear expert on, whose worst team fits."""
        costs = self.costs
        ok = elig.copy()
        if self._any_lower:
            ok &= np.all(costs >= need[:, None, :], axis=2)
        if not self._any_upper:
            return ok
        ok &= np.all(costs <= room[:, None, :], axis=2)
        if self.m_draws == 1:  # the worst team is its dearest member: each expert on its own
            return ok
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(self._upper[:, None, :], costs / room[:, None, :], 0.0)
        dear = np.where(ok, np.nan_to_num(rel, nan=0.0, posinf=np.inf).max(axis=2), np.inf)
        order = np.argsort(dear, axis=1, kind="stable")
        ranked = np.take_along_axis(costs, order[:, :, None], axis=1)  # (R, K, d)
        count = ok.sum(axis=1)
        lo, hi = np.zeros_like(count), count.copy()  # the largest prefix that fits is in [lo, hi]
        while bool(np.any(lo < hi)):
            mid = (lo + hi + 1) // 2
            inside = np.arange(costs.shape[1])[None, :] < mid[:, None]
            worst = self._worst_team(np.where(inside[:, :, None], ranked, 0.0))
            good = np.all(worst <= room, axis=1)
            lo = np.where(good, mid, lo)
            hi = np.where(good, hi, mid - 1)
        keep = np.arange(costs.shape[1])[None, :] < lo[:, None]
        out = np.zeros_like(ok)
        np.put_along_axis(out, order, keep, axis=1)
        return out & ok

    def _worst_team(self, costs: FloatArray) -> FloatArray:
        """The dearest team of M distinct experts among the nonzero rows: (R, K, d) -> (R, d)."""
        m = min(self.m_draws, costs.shape[1])
        top = -np.partition(-costs, m - 1, axis=1)[:, :m] if m < costs.shape[1] else costs
        return np.asarray(top.sum(axis=1), dtype=np.float64)

    def _most_room(
        self, room: FloatArray, need: FloatArray, elig: BoolArray, runs: BoolArray
    ) -> BoolArray:
        """Per run, the one eligible expert that leaves every bound the most room after it,
        each coordinate in its own unit: (R', K) one-hot."""
        costs = self.costs[runs]
        unit = self._unit[runs][:, None, :]
        upper = np.where(self._upper[runs][:, None, :], (room[:, None, :] - costs) / unit, np.inf)
        lower = np.where(self._lower[runs][:, None, :], (costs - need[:, None, :]) / unit, np.inf)
        score = np.minimum(upper, lower).min(axis=2)
        score = np.where(elig, score, -np.inf)
        best = np.argmax(score, axis=1)
        out = np.zeros_like(elig)
        out[np.arange(out.shape[0]), best] = True
        return out

    # ------------------------------------------------------------------ the accounting
    def book(self, draws: IntArray) -> FloatArray:
        """Book a decision of every run at its team's table cost (each distinct expert once):
        draws (R, M) -> the booking (R, d), read-only."""
        if self._rows is not None:  # one run: Python floats, added in draw order
            rows = self._rows[0]
            team = list(dict.fromkeys(draws[0].tolist()))
            total = rows[team[0]]
            for col in team[1:]:
                total = [a + b for a, b in zip(total, rows[col], strict=True)]
            cost = np.array([total], dtype=np.float64)
        else:
            mask = np.zeros(self.costs.shape[:2])
            mask[np.arange(draws.shape[0])[:, None], draws] = 1.0
            cost = np.asarray(np.matmul(mask[:, None, :], self.costs)[:, 0, :], dtype=np.float64)
        self.spend += cost
        self.open += 1.0
        cost.flags.writeable = False
        return cost

    def settle(self, booked: FloatArray, realized: FloatArray | None, was_open: bool) -> None:
        """A decision's outcome: its realized cost (R, d) replaces its booking (None: it stays
        at its booking), and an open decision closes.

        A realized cost that differs from the booking is a report: it feeds the reserve (the
        largest and the mean excess, or shortfall, of a report)."""
        if was_open:
            self.open = np.maximum(self.open - 1.0, 0.0)
        if realized is None:
            return
        diff = realized - booked
        if not np.count_nonzero(diff):
            return
        self.spend = np.maximum(self.spend + diff, 0.0)
        over, under = np.maximum(diff, 0.0), np.maximum(-diff, 0.0)
        self.excess_max = np.maximum(self.excess_max, over)
        self.shortfall_max = np.maximum(self.shortfall_max, under)
        self.excess_sum += over
        self.shortfall_sum += under
        self.n_reports += np.any(diff != 0.0, axis=1)
