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

* Each expert's cost per call is *estimated* from the realized costs fed back
  (``msroute.policies.costs.CostEstimate``, the table as its prior, over about the last
  ``COST_WINDOW`` calls so that a price that changed is booked at its new level; one estimate
  per context for a contextual policy, since a task's prompts can be longer than another's).
* ``spend_j``: each decision booked at its team's estimated cost when it is made (``book``),
  replaced by the realized cost when its feedback reports one (``settle``): what a router counts.
* Packing bound ``u_j``: the room for decision ``n`` is ``n u_j - spend_j - reserve_j``, and an
  eligible set ``A`` is allowed only if its worst team fits: the sum of the ``min(M, |A|)``
  largest estimated ``c_ij`` over ``A`` (each distinct expert is paid once).
* Covering bound ``l_j``: every member of ``A`` must have ``c_ij >= n l_j - spend_j +
  reserve_j`` (a team costs at least each of its members).
* The reserve covers what the estimates do not know: twice the largest excess of a realized
  cost over its booking seen so far, plus, for the decisions still open, the mean excess each
  (``excess`` and ``shortfall`` for the covering side); and what the decisions no expert
  fitted forced: eight times the most such a decision overspent (or fell short of a floor)
  where its eligibility mask left only experts beyond the room (masked requests come in
  runs), once the most where no single expert fits the bounds (bounds that only a mixture of
  experts meets: these come one at a time, between decisions that pay it back), so that the
  other decisions keep room for the next one (``forced``).

Within that, the experts are dropped from the dearest (relative to the room) until the worst
team fits; if no expert fits (a bound lowered below what was spent, prices that rose, bounds
that only a mixture of experts meets), the decision goes to the one eligible expert that leaves
the spend nearest the box (the least sum of squared shortfalls, each in its coordinate's unit: a
greedy step of Blackwell's approachability on the realized spend).

The guarantee (stated in docs/budgets.md): if some eligible expert is inside every bound on its
own (a *safe* expert) and no call costs more above its booking than the reserve, every bound
holds on the time-averaged spend after every decision, from the first one on. A bound lowered
below the average spent so far, or prices that rise until the estimates learn them, hold again
after the decisions the safe expert needs to pay back the excess. Where no expert is safe but a
mixture of them keeps every bound, the pacer alternates between them on the boundary, and the
reserve of one overshoot keeps the alternation inside the bounds once the mixture's slack has
grown past it (a burn-in).
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable
from typing import ClassVar, Literal

import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.core.problem_batch import ProblemBatch
from msroute.policies.costs import CostEstimate

__all__ = ["Pacer"]

#: The pacer's rooms are kept this far (relative) inside the bounds, so that the rounding of
#: a sum of costs over a long run cannot carry an average a hair over a bound.
_REL_SLACK = 1e-9
#: The pacer's cost estimates average over about this many calls of an expert at most
#: (``CostEstimate``'s window): a price that rises is booked at its new level within tens of
#: calls, not after as many calls again as came before it.
COST_WINDOW = 20.0
#: The largest excess of a realized cost over its booking seen so far counts this many times.
_EXCESS_FACTOR = 2.0
#: The most a mask forced a decision beyond the room counts this many times: masked requests
#: come in runs (eight in a row at a third of the traffic masked: 1 in 7,000).
_FORCED_FACTOR = 8.0
#: ``restrict`` of one run with one draw in one compiled call
#: (``msroute.policies._live_rows.restrict_one``, the same floats), set by the thread that
#: loads a live router's compiled step (``msroute.policies.live_step``); None: in Python.
restrict_kernel: Callable[..., int] | None = None
#: ``settle`` of one run whose decision drew one expert, in one compiled call
#: (``msroute.policies._live_rows.settle_one``, the same floats), set likewise; None: in Python.
settle_kernel: Callable[..., None] | None = None


class Pacer:
    """The realized-spend pacing of a policy's runs (see the module docstring).

    Parameters
    ----------
    batch : ProblemBatch
        The runs' cost tables (the estimates' prior) and original bounds.
    scale : ndarray, shape (R, d)
        The unit of each cost coordinate (``msroute.policies.duals.cost_scale``).
    n_contexts : int, default 1
        Contexts the policy tells apart: the estimates are learned per (run, context).
    window : float, default ``COST_WINDOW``
        The most calls of an expert its estimate averages over (``inf``: all of them).
    mixtures : bool, default True
        Keep a reserve for the decisions no single expert fits while the run is inside its
        bounds, without a mask as well as with one, and for what they fell short of a floor as
        well as what they overshot a cap (False: as pacers recorded before it, only a mask's
        overshoot of a cap).

    Attributes
    ----------
    est : CostEstimate
        Each expert's estimated cost per call, rows ``r X + x`` (run, context).
    spend : ndarray, shape (R, d)
        Spend so far: decisions at their booking, replaced by realized costs when reported.
    open : ndarray, shape (R,)
        Decisions booked and not settled yet.
    restricted, recovered : ndarray of int, shape (R,)
        Decisions whose eligible set the pacer narrowed, and those among them sent to the one
        expert that leaves the spend nearest the box (no set fitted).
    """

    _state_attrs: ClassVar[tuple[str, ...]] = (
        "est",
        "spend",
        "open",
        "excess_max",
        "excess_sum",
        "shortfall_max",
        "shortfall_sum",
        "n_reports",
        "forced",
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
        "forced": "nonnegative",
        "restricted": "nonnegative",
        "recovered": "nonnegative",
    }

    def __init__(
        self,
        batch: ProblemBatch,
        scale: FloatArray,
        n_contexts: int = 1,
        window: float = COST_WINDOW,
        mixtures: bool = True,
    ) -> None:
        r, d = batch.n_runs, batch.n_costs
        self.mixtures = mixtures
        self.m_draws = batch.m_draws
        self.n_contexts = n_contexts
        x = n_contexts
        self.est = CostEstimate(
            np.repeat(batch.costs, x, axis=0) if x > 1 else batch.costs,
            np.repeat(scale, x, axis=0) if x > 1 else scale,
            mode="distinct",
            window=window,
        )
        self.lo: FloatArray = np.asarray(batch.lo_ori, dtype=np.float64)
        self.hi: FloatArray = np.asarray(batch.hi_ori, dtype=np.float64)
        self._upper = np.isfinite(self.hi)
        self._lower = np.isfinite(self.lo)
        self._any_upper, self._any_lower = bool(self._upper.any()), bool(self._lower.any())
        unit = batch.costs.max(axis=1)
        finite = np.where(self._upper, np.abs(self.hi), np.where(self._lower, self.lo, 0.0))
        self._unit: FloatArray = np.where(unit > 0, unit, np.where(finite > 0, finite, 1.0))
        self._one_run = r == 1
        # One run's bounds (an absent one as one nothing can break): ``_clear_one``.
        self._hi_one = [h if math.isfinite(h) else math.inf for h in self.hi[0].tolist()]
        self._lo_one = [v if math.isfinite(v) else -math.inf for v in self.lo[0].tolist()]
        self.bounds_one = (np.array(self._hi_one), np.array(self._lo_one))  # for live_step
        self._runs = np.arange(r)
        self.spend: FloatArray = np.zeros((r, d))
        self.open: FloatArray = np.zeros(r)
        self.excess_max: FloatArray = np.zeros((r, d))
        self.excess_sum: FloatArray = np.zeros((r, d))
        self.shortfall_max: FloatArray = np.zeros((r, d))
        self.shortfall_sum: FloatArray = np.zeros((r, d))
        self.n_reports: FloatArray = np.zeros(r)
        #: Per run and coordinate, the most a decision its mask forced beyond the room spent,
        #: or an eighth of what one no single expert fitted did (columns d..2d: fell short of
        #: a covering bound); the rooms keep ``_FORCED_FACTOR`` times it.
        self.forced: FloatArray = np.zeros((r, 2 * d))
        self.restricted: IntArray = np.zeros(r, dtype=np.int64)
        self.recovered: IntArray = np.zeros(r, dtype=np.int64)

    # ------------------------------------------------------------------ the estimates
    def _rows(self, context: IntArray | None) -> IntArray | None:
        """The estimate row of each run's decision (None: the runs' own rows, one context)."""
        if self.n_contexts == 1:
            return None
        ctx = np.zeros(self._runs.size, dtype=np.int64) if context is None else context
        return np.asarray(self._runs * self.n_contexts + ctx, dtype=np.int64)

    def costs(self, context: IntArray | None) -> FloatArray:
        """The estimated cost of each expert per call for each run's decision: (R, K, d)."""
        rows = self._rows(context)
        est = self.est.costs
        if rows is None:
            return est
        if self._one_run:  # basic indexing: a view
            return est[int(rows[0]) : int(rows[0]) + 1]
        return np.asarray(est[rows])

    # ------------------------------------------------------------------ the restriction
    def rooms(self, n: int) -> tuple[FloatArray, FloatArray]:
        """What decision ``n`` (1-based) may cost: the packing room (R, d), ``inf`` where no
        upper bound, and the covering need (R, d), ``-inf`` where no lower bound."""
        reports = np.maximum(self.n_reports, 1.0)[:, None]
        open_ = self.open[:, None]
        d = self.spend.shape[1]
        with np.errstate(invalid="ignore"):  # an absent bound is infinite: inf - x stays inf
            room = (
                n * self.hi * (1.0 - _REL_SLACK)
                - self.spend
                - _EXCESS_FACTOR * self.excess_max
                - _FORCED_FACTOR * self.forced[:, :d]
                - open_ * self.excess_sum / reports
            )
            need = (
                n * self.lo * (1.0 + _REL_SLACK)
                - self.spend
                + _EXCESS_FACTOR * self.shortfall_max
                + _FORCED_FACTOR * self.forced[:, d:]
                + open_ * self.shortfall_sum / reports
            )
        return np.where(self._upper, room, np.inf), np.where(self._lower, need, -np.inf)

    def restrict(
        self, n: int, eligible: BoolArray | None, context: IntArray | None = None
    ) -> BoolArray | None:
        """The eligible set of decision ``n`` (1-based) after pacing: (R, K), or None where
        every expert stays eligible (``eligible`` None and nothing narrowed)."""
        costs = self.costs(context)
        if self._one_run and self._clear_one(n, costs[0]):
            return eligible  # one run with room for any team (the live router's common case)
        if self._one_run and self.m_draws == 1 and restrict_kernel is not None:
            narrowed = self._restrict_compiled(restrict_kernel, n, costs, eligible)
            if narrowed is not False:
                return narrowed
        room, need = self.rooms(n)
        worst = self._worst_team(costs)  # the dearest team of all
        if bool(np.all(room >= worst)) and bool(np.all(need <= costs.min(axis=1))):
            return eligible  # no set of experts can break a bound
        r, k = costs.shape[:2]
        elig = np.ones((r, k), dtype=bool) if eligible is None else eligible
        fits = self._fitting(costs, room, need, elig)
        narrowed = np.asarray((fits != elig).any(axis=1))
        if not narrowed.any():
            return eligible
        empty = np.asarray(~fits.any(axis=1))
        if empty.any():
            picked = self._toward_box(costs[empty], room[empty], need[empty], elig[empty], empty)
            fits[empty] = picked
            self.recovered += empty
            if eligible is not None:  # a mask forced it: the other decisions keep room for it
                self._note_forced(costs[empty][picked], room[empty], need[empty], empty)
            elif self.mixtures:  # only a mixture fits: one such overshoot is kept in reserve
                share = 1.0 / _FORCED_FACTOR
                self._note_forced(costs[empty][picked], room[empty], need[empty], empty, share)
        self.restricted += narrowed
        return fits

    def _restrict_compiled(
        self,
        kernel: Callable[..., int],
        n: int,
        costs: FloatArray,
        eligible: BoolArray | None,
    ) -> BoolArray | Literal[False] | None:
        """``restrict`` of one run with one draw in ``kernel``: the eligible set, or False
        (nothing changed) where no expert fits or the arrays do not fit its signature."""
        k = costs.shape[1]
        out = np.zeros((1, k), dtype=bool)
        elig = np.ones((1, k), dtype=bool) if eligible is None else eligible
        try:
            code = kernel(
                n,
                costs,
                self.spend,
                self.open,
                self.n_reports,
                self.forced,
                self.excess_max,
                self.excess_sum,
                self.shortfall_max,
                self.shortfall_sum,
                self.hi,
                self.lo,
                self._upper,
                self._lower,
                elig,
                self.restricted,
                out,
            )
        except TypeError:  # numba matched no signature (before running)
            return False
        return eligible if code == 0 else out if code == 1 else False

    def _note_forced(
        self,
        cost: FloatArray,
        room: FloatArray,
        need: FloatArray,
        runs: BoolArray,
        share: float = 1.0,
    ) -> None:
        """Record what the chosen expert's cost (R', d) takes beyond the room (or falls short
        of the need) of runs that were within their bounds, times ``share``: what a mask (or
        bounds only a mixture meets) forced, in units of the reserve's ``_FORCED_FACTOR``.

        A run was within a floor if its average before this decision met it (``need <= l``); a
        pacer recorded before ``mixtures`` asked ``need <= 0``, under which no cost falls short,
        so it never reserved for a floor."""
        d = cost.shape[1]
        within_floor = need <= (self.lo[runs] if self.mixtures else 0.0)
        with np.errstate(invalid="ignore"):
            over = share * np.where(room >= 0.0, np.maximum(cost - room, 0.0), 0.0)
            short = share * np.where(within_floor, np.maximum(need - cost, 0.0), 0.0)
        forced = self.forced[runs]
        forced[:, :d] = np.maximum(forced[:, :d], np.nan_to_num(over, posinf=0.0))
        forced[:, d:] = np.maximum(forced[:, d:], np.nan_to_num(short, posinf=0.0))
        self.forced[runs] = forced

    def _clear_one(self, n: int, costs: FloatArray) -> bool:
        """``rooms`` of one run against M times its dearest expert and its least one, in
        Python floats: whether no set of experts can break a bound at decision ``n``."""
        reports = max(float(self.n_reports[0]), 1.0)
        open_ = float(self.open[0])
        spend = self.spend[0].tolist()
        forced = self.forced[0].tolist()
        d = len(spend)
        if self._any_upper:
            emax, esum = self.excess_max[0].tolist(), self.excess_sum[0].tolist()
            dearest = costs.max(axis=0).tolist()
            for j, hi in enumerate(self._hi_one):
                room = n * hi * (1.0 - _REL_SLACK) - spend[j] - open_ * esum[j] / reports
                worst = self.m_draws * dearest[j]
                if room - _EXCESS_FACTOR * emax[j] - _FORCED_FACTOR * forced[j] < worst:
                    return False
        if self._any_lower:
            smax, ssum = self.shortfall_max[0].tolist(), self.shortfall_sum[0].tolist()
            least = costs.min(axis=0).tolist()
            for j, lo in enumerate(self._lo_one):
                need = n * lo * (1.0 + _REL_SLACK) - spend[j] + open_ * ssum[j] / reports
                if need + _EXCESS_FACTOR * smax[j] + _FORCED_FACTOR * forced[d + j] > least[j]:
                    return False
        return True

    def _fitting(
        self, costs: FloatArray, room: FloatArray, need: FloatArray, elig: BoolArray
    ) -> BoolArray:
        """The largest set per run, from the least dear expert on, whose worst team fits."""
        if self._one_run:
            return _fitting_one(
                costs[0].tolist(),
                room[0].tolist(),
                need[0].tolist(),
                elig[0].tolist(),
                self._upper[0].tolist(),
                self.m_draws,
            )
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
        lo = self._largest_prefixes(costs, order, ok.sum(axis=1), room)
        k = costs.shape[1]
        keep = np.arange(k)[None, :] < lo[:, None]
        out = np.zeros_like(ok)
        np.put_along_axis(out, order, keep, axis=1)
        return out & ok

    def _largest_prefixes(
        self, costs: FloatArray, order: IntArray, count: IntArray, room: FloatArray
    ) -> IntArray:
        """Per run, the largest prefix of ``order`` (of the first ``count``) whose dearest team
        fits the room, by bisection (the dearest team grows with the prefix)."""
        ranked = np.take_along_axis(costs, order[:, :, None], axis=1)  # (R, K, d)
        positions = np.arange(costs.shape[1])[None, :]
        lo, hi = np.zeros_like(count), count.copy()  # the largest prefix that fits is in [lo, hi]
        while bool(np.any(lo < hi)):
            mid = (lo + hi + 1) // 2
            inside = positions < mid[:, None]
            worst = self._worst_team(np.where(inside[:, :, None], ranked, 0.0))
            good = np.all(worst <= room, axis=1)
            lo = np.where(good, mid, lo)
            hi = np.where(good, hi, mid - 1)
        return lo

    def _worst_team(self, costs: FloatArray) -> FloatArray:
        """The dearest team of M distinct experts among the nonzero rows: (R, K, d) -> (R, d)."""
        m = min(self.m_draws, costs.shape[1])
        top = -np.partition(-costs, m - 1, axis=1)[:, :m] if m < costs.shape[1] else costs
        return np.asarray(top.sum(axis=1), dtype=np.float64)

    def _toward_box(
        self,
        costs: FloatArray,
        room: FloatArray,
        need: FloatArray,
        elig: BoolArray,
        runs: BoolArray,
    ) -> BoolArray:
        """Per run, the one eligible expert whose decision leaves the spend nearest the box:
        the least sum over bounds of the squared amount (in each coordinate's unit) by which
        it would exceed a packing room or fall short of a covering need; among equals, the
        one that spends least where it is bounded above and most where below. A greedy step
        on that potential is Blackwell's: where a mixture of experts keeps every bound (the
        instance can be kept), the debts stay bounded and the average returns to the box.
        (R', K) one-hot."""
        unit = self._unit[runs][:, None, :]
        upper = self._upper[runs][:, None, :]
        lower = self._lower[runs][:, None, :]
        with np.errstate(invalid="ignore"):
            over = np.where(upper, np.maximum(costs - room[:, None, :], 0.0) / unit, 0.0)
            short = np.where(lower, np.maximum(need[:, None, :] - costs, 0.0) / unit, 0.0)
        potential = np.where(elig, (over * over + short * short).sum(axis=2), np.inf)
        lean = (np.where(upper, costs, 0.0) - np.where(lower, costs, 0.0)) / unit
        least = potential.min(axis=1, keepdims=True)
        ties = potential <= least * (1.0 + 1e-12)
        best = np.argmin(np.where(ties, lean.sum(axis=2), np.inf), axis=1)
        out = np.zeros_like(elig)
        out[np.arange(out.shape[0]), best] = True
        return out

    # ------------------------------------------------------------------ the accounting
    def book(self, draws: IntArray, context: IntArray | None = None) -> FloatArray:
        """Book a decision of every run at its team's estimated cost (each distinct expert
        once): draws (R, M) -> the booking (R, d), read-only."""
        costs = self.costs(context)
        if self._one_run:  # one run: Python floats, added in draw order
            team = list(dict.fromkeys(draws[0].tolist()))
            rows = costs[0]
            total = rows[team[0]].tolist()
            for col in team[1:]:
                total = [a + b for a, b in zip(total, rows[col].tolist(), strict=True)]
            cost = np.array([total], dtype=np.float64)
        else:
            mask = np.zeros(costs.shape[:2])
            mask[np.arange(draws.shape[0])[:, None], draws] = 1.0
            cost = np.asarray(np.matmul(mask[:, None, :], costs)[:, 0, :], dtype=np.float64)
        self.spend += cost
        self.open += 1.0
        cost.flags.writeable = False
        return cost

    def settle(
        self,
        booked: FloatArray,
        realized: FloatArray | None,
        was_open: bool,
        draws: IntArray | None = None,
        context: IntArray | None = None,
    ) -> None:
        """A decision's outcome: its realized cost (R, d) replaces its booking (None: it stays
        at its booking), and an open decision closes.

        A realized cost that differs from the booking is a report: it feeds the reserve (the
        largest and the mean excess, or shortfall, of a report) and, with the decision's
        ``draws`` (R, M), the experts' estimated costs."""
        if (
            settle_kernel is not None
            and realized is not None
            and draws is not None
            and draws.shape == (1, 1)
            and self._one_run
            and self._settle_compiled(settle_kernel, booked, realized, was_open, draws, context)
        ):
            return
        if was_open:
            self.open = np.maximum(self.open - 1.0, 0.0)
        if realized is None:
            return
        if draws is not None:
            self.est.update(draws, realized, rows=self._rows(context))
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

    def _settle_compiled(
        self,
        kernel: Callable[..., None],
        booked: FloatArray,
        realized: FloatArray,
        was_open: bool,
        draws: IntArray,
        context: IntArray | None,
    ) -> bool:
        """``settle`` of one run whose decision drew one expert in ``kernel``; False (nothing
        changed) for estimates that do not learn, or arrays that do not fit its signature."""
        est = self.est
        if est.mode == "table":
            return False
        row = 0 if self.n_contexts == 1 or context is None else int(context[0])  # ``_rows``
        try:
            kernel(
                int(draws[0, 0]),
                realized[0],
                booked[0],
                was_open,
                est.costs,
                est.n_obs,
                est._floor,
                row,
                est.prior_weight,
                est.window,
                self.spend,
                self.excess_max,
                self.excess_sum,
                self.shortfall_max,
                self.shortfall_sum,
                self.open,
                self.n_reports,
            )
        except TypeError:  # numba matched no signature (before running)
            return False
        return True


def _fitting_one(
    costs: list[list[float]],
    room: list[float],
    need: list[float],
    elig: list[bool],
    upper: list[bool],
    m: int,
) -> BoolArray:
    """``Pacer._fitting`` of one run in Python floats (a live router's decision): the
    candidates (eligible, each within the room and meeting every need), ranked by their
    largest share of a packing room (stably), then the walk that keeps each coordinate's
    ``m`` largest costs so far and stops at the first expert that makes the dearest team break
    the room (the dearest team only grows along the walk)."""
    ranked: list[tuple[float, int]] = []
    for i, row in enumerate(costs):
        if not elig[i] or any(c < v for c, v in zip(row, need, strict=True)):
            continue
        if any(c > r for c, r in zip(row, room, strict=True)):
            continue
        share = (
            max(
                (c / r if r > 0.0 else (math.inf if c > 0.0 else 0.0))
                for c, r, u in zip(row, room, upper, strict=True)
                if u
            )
            if any(upper)
            else 0.0
        )
        ranked.append((share, i))
    ranked.sort()  # by share, then index: argsort's stable order
    out = np.zeros((1, len(costs)), dtype=bool)
    tops: list[list[float]] = [[] for _ in room]
    for _, i in ranked:
        for j, c in enumerate(costs[i]):
            top = tops[j]
            if len(top) < m:
                insort(top, c)
            elif c > top[0]:
                top.pop(0)
                insort(top, c)
            if sum(top) > room[j]:
                return out
        out[0, i] = True
    return out
