"""A live router's decision and feedback with OMD at one run and one draw, as functions of
scalar loops (``msroute.policies.live_step``): in Python, and compiled by
``msroute.policies._compiled.live_step``, with the same IEEE operations in the same order (no
fastmath), so both give the floats of the policy's single-run Python path bit for bit.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from msroute._outcome import _leaf_sum
from msroute.core.qp._cut_rows import SOLVED, cut_rows
from msroute.policies._approach_rows import step_rows
from msroute.policies._philox import first_uniform
from msroute.policies.pacing import _EXCESS_FACTOR, _FORCED_FACTOR, _REL_SLACK

__all__ = [
    "aggregate_one",
    "clear_one",
    "feedback_one",
    "measure_rows",
    "qp_one",
    "restrict_one",
    "select_one",
    "settle_one",
]


def clear_one(
    n: int,
    est: Any,
    row: int,
    m: int,
    spend: Any,
    open_: Any,
    reports: Any,
    forced: Any,
    excess_max: Any,
    excess_sum: Any,
    shortfall_max: Any,
    shortfall_sum: Any,
    hi: Any,
    lo: Any,
    any_upper: bool,
    any_lower: bool,
) -> bool:
    """``Pacer._clear_one``: whether no set of experts can break a bound at decision ``n``
    (1-based) of the pacer's one run, its estimates on ``row`` of ``est`` (rows, K, d), ``m``
    draws, its spend and reserve (1, d), ``open_`` and ``reports`` (1,), ``forced`` (1, 2d),
    and the bounds ``hi``, ``lo`` (d,) (``inf``, ``-inf`` where absent)."""
    count = reports[0]
    if count < 1.0:  # Python's max(count, 1.0)
        count = 1.0
    pending = open_[0]
    k, d = est.shape[1], est.shape[2]
    if any_upper:
        for j in range(d):
            dearest = est[row, 0, j]
            for i in range(1, k):
                c = est[row, i, j]
                if c > dearest or c != c:  # numpy's max: NaN propagates
                    dearest = c
            room = n * hi[j] * (1.0 - _REL_SLACK) - spend[0, j] - pending * excess_sum[0, j] / count
            worst = m * dearest
            if room - _EXCESS_FACTOR * excess_max[0, j] - _FORCED_FACTOR * forced[0, j] < worst:
                return False
    if any_lower:
        for j in range(d):
            least = est[row, 0, j]
            for i in range(1, k):
                c = est[row, i, j]
                if c < least or c != c:  # numpy's min: NaN propagates
                    least = c
            need = (
                n * lo[j] * (1.0 + _REL_SLACK) - spend[0, j] + pending * shortfall_sum[0, j] / count
            )
            if (
                need + _EXCESS_FACTOR * shortfall_max[0, j] + _FORCED_FACTOR * forced[0, d + j]
                > least
            ):
                return False
    return True


def restrict_one(
    n: int,
    est: Any,
    spend: Any,
    open_: Any,
    reports: Any,
    forced: Any,
    excess_max: Any,
    excess_sum: Any,
    shortfall_max: Any,
    shortfall_sum: Any,
    hi: Any,
    lo: Any,
    upper: Any,
    lower: Any,
    elig: Any,
    restricted: Any,
    out: Any,
) -> int:
    """``Pacer.restrict`` of one run with one draw past ``_clear_one``: 0 where it leaves the
    eligible set as it is, 1 where it narrows it to ``out`` (1, K) (and counts it in
    ``restricted`` (1,)), 2 where no expert fits (nothing changed: the caller picks the one
    nearest the box in Python).

    ``rooms`` of decision ``n`` from the spend, reserve and bounds (1, d) (``forced`` (1, 2d),
    ``open_`` and ``reports`` (1,), ``upper``, ``lower`` the bounded sides), the estimates
    ``est`` (1, K, d) of the decision's context, the eligible ``elig`` (1, K). With one draw the
    worst team is the dearest expert, and ``_fitting_one``'s walk keeps every candidate (each
    within the room on its own), so the set is the candidates.
    """
    k, d = est.shape[1], est.shape[2]
    count = reports[0]
    if not (count > 1.0 or count != count):  # np.maximum(reports, 1.0)
        count = 1.0
    pending = open_[0]
    room = np.empty(d)
    need = np.empty(d)
    clear = True
    for j in range(d):
        room[j] = math.inf
        if upper[0, j]:
            room[j] = (
                n * hi[0, j] * (1.0 - _REL_SLACK)
                - spend[0, j]
                - _EXCESS_FACTOR * excess_max[0, j]
                - _FORCED_FACTOR * forced[0, j]
                - pending * excess_sum[0, j] / count
            )
        need[j] = -math.inf
        if lower[0, j]:
            need[j] = (
                n * lo[0, j] * (1.0 + _REL_SLACK)
                - spend[0, j]
                + _EXCESS_FACTOR * shortfall_max[0, j]
                + _FORCED_FACTOR * forced[0, d + j]
                + pending * shortfall_sum[0, j] / count
            )
        dearest, least = est[0, 0, j], est[0, 0, j]
        for i in range(1, k):
            c = est[0, i, j]
            if c > dearest or c != c:  # np.partition's top one, and numpy's min: NaN first
                dearest = c
            if c < least or c != c:
                least = c
        if not (room[j] >= dearest and need[j] <= least):
            clear = False
    if clear:
        return 0
    narrowed = False
    fits_any = False
    for i in range(k):
        fits = bool(elig[0, i])
        for j in range(d):
            c = est[0, i, j]
            if c < need[j] or c > room[j]:
                fits = False
        out[0, i] = fits
        narrowed = narrowed or fits != elig[0, i]
        fits_any = fits_any or fits
    if not narrowed:
        return 0
    if not fits_any:
        return 2
    restricted[0] += 1
    return 1


def select_one(
    probs: Any,
    key: Any,
    n: int,
    w: Any,
    measured: Any,
    scale: Any,
    lo: Any,
    hi: Any,
    pad_sd: float,
    pad_den: float,
    m2: Any,
    n_obs: int,
    cap: Any,
    lower: Any,
    upper: Any,
    tol: float,
    step: float,
    est: Any,
    row: int,
    spend: Any,
    open_: Any,
    w_out: Any,
    booked: Any,
) -> int:
    """``OMDApproachability._select`` of one run with one draw and no mask, then
    ``Pacer.book``; returns the drawn expert.

    The played distribution ``probs`` (1, K) is sampled with the decision's uniform (the first
    of decision ``n``'s stream under the Philox ``key``: ``_philox.first_uniform``) by the
    inverse CDF of its sequential cumulative sum (``sampling._sample_row``). The dual steps with
    ``measured`` (1, d), what it approaches for that distribution, and the arguments of
    ``step_rows`` (the new ``w`` into ``w_out``). The decision is booked at the drawn expert's
    estimate on ``row`` of the pacer's ``est`` (into ``booked`` (1, d), added to ``spend``
    (1, d)), and ``open_`` (1,) counts it.
    """
    k = probs.shape[1]
    total = 0.0
    for i in range(k):
        total += probs[0, i]
    target = first_uniform(key, n) * total
    drawn = 0
    cdf = 0.0
    while drawn < k - 1:  # how many CDF entries before the last one are <= target
        cdf += probs[0, drawn]
        if not cdf <= target:
            break
        drawn += 1
    step_rows(
        w, measured, scale, lo, hi, pad_sd, pad_den, m2, n_obs, cap, lower, upper, tol, step, w_out
    )
    for j in range(est.shape[2]):
        booked[0, j] = est[row, drawn, j]
        spend[0, j] += booked[0, j]
    open_[0] += 1.0
    return drawn


def qp_one(
    q: Any,
    grad: Any,
    x: int,
    den: float,
    gamma: float,
    est: Any,
    row: int,
    aggregate: bool,
    share: float,
    others: Any,
    w: Any,
    lo: Any,
    hi: Any,
    lower: Any,
    upper: Any,
    budget_margin: float,
    units: int,
    n_obs: int,
    m2: Any,
    cap: Any,
) -> bool:
    """The QP step (6) of one run's context ``x``: ``OMDApproachability._qp_step`` with the
    invariant dual's cuts (``ApproachabilityDual.cuts``, linear surrogate) and steps 1 and 2 of
    their projection (``cut_rows``); False, with nothing changed, where the projection needs
    more (a cut out of reach, step 3): the caller then steps in Python.

    ``q``, ``grad`` (1, X, K) the routing and the summed gradient estimates (row ``x`` moves
    to ``q + grad / den`` projected at floor ``gamma``, and its gradient restarts at 0); the
    cost estimates ``est`` (rows, K, d) on ``row``; with ``aggregate`` the context's share of
    the visits and the other contexts' spend ``others`` (1, d); the dual's ``w``, box ``lo``,
    ``hi``, bounded sides ``lower``, ``upper`` (1, d), and its margin (``budget_margin``
    standard deviations of the ``n_obs`` realized costs' moments ``m2`` per ``units``, at most
    ``cap``) as ``ApproachabilityDual.target`` takes it.
    """
    k, d = q.shape[2], w.shape[1]
    y = np.empty((1, k))
    a = np.empty((1, d, k))
    b = np.empty((1, d))
    for i in range(k):
        y[0, i] = q[0, x, i] + grad[0, x, i] / den
    for j in range(d):
        lo_j, hi_j = lo[0, j], hi[0, j]
        if budget_margin > 0.0 and n_obs > 1:
            sd = math.sqrt(m2[0, j] / (n_obs - 1))
            pad = budget_margin * sd / (units * math.sqrt(n_obs))
            if not (pad < cap[0, j] or pad != pad):  # np.minimum(pad, cap)
                pad = cap[0, j]
            lo_j, hi_j = lo_j + pad, hi_j - pad
        if not lower[0, j]:
            lo_j = -math.inf
        if not upper[0, j]:
            hi_j = math.inf
        if aggregate:
            lo_j, hi_j = lo_j - others[0, j], hi_j - others[0, j]
        w_j = w[0, j]
        sign = w_j  # np.sign: NaN stays NaN, either zero is 0.0
        if w_j > 0.0:
            sign = 1.0
        elif w_j < 0.0:
            sign = -1.0
        elif w_j == 0.0:
            sign = 0.0
        for i in range(k):
            normal = est[row, i, j]
            if aggregate:
                normal = normal * share
            a[0, j, i] = normal * sign
        b[0, j] = hi_j if w_j > 0.0 else (-lo_j if w_j < 0.0 else 0.0)
    q_new = np.empty((1, k))
    mu = np.zeros((1, d))
    status = np.zeros(1, dtype=np.int64)
    cut_rows(y, gamma, a, b, q_new, mu, status)
    if status[0] != SOLVED:
        return False
    for i in range(k):
        q[0, x, i] = q_new[0, i]
        grad[0, x, i] = 0.0
    return True


def _npmax(a: float, b: float) -> float:
    """``np.maximum(a, b)`` of two floats: ``b`` unless ``a`` is larger or NaN (so that
    ``np.maximum(-0.0, 0.0)`` is ``0.0`` and a NaN on either side propagates)."""
    return a if (a > b or a != a) else b


def _learn_cost(
    costs: Any,
    n_obs: Any,
    floor: Any,
    row: int,
    drawn: int,
    cost: Any,
    prior_weight: float,
    window: float,
) -> None:
    """``CostEstimate._update_one``: the drawn expert's estimate on ``row`` learns the
    realized ``cost`` (d,) of a round with one draw."""
    n_obs[row, drawn] += 1.0
    d = cost.shape[0]
    moved = False
    for j in range(d):
        if cost[j] - costs[row, drawn, j] != 0.0:
            moved = True
    if not moved:
        return
    counted = prior_weight + n_obs[row, drawn]
    if window < counted:  # Python's min(counted, window)
        counted = window
    for j in range(d):
        est = costs[row, drawn, j]
        resid = cost[j] - est
        weight = est + floor[row, 0, j]
        share = resid * weight / weight
        costs[row, drawn, j] = _npmax(est + share / counted, 0.0)


def feedback_one(
    drawn: int,
    x: int,
    reward: float,
    cost: Any,
    booked: Any,
    q_drawn: float,
    grad: Any,
    reward_sum: Any,
    visits: Any,
    cost_sum: Any,
    coef: Any,
    gram: Any,
    moment: Any,
    ix: float,
    est: Any,
    est_n: Any,
    est_floor: Any,
    est_row: int,
    est_weight: float,
    est_window: float,
    est_learns: bool,
    dual_n: int,
    mean: Any,
    m2: Any,
    pace_est: Any,
    pace_n: Any,
    pace_floor: Any,
    pace_row: int,
    pace_weight: float,
    pace_window: float,
    spend: Any,
    excess_max: Any,
    excess_sum: Any,
    shortfall_max: Any,
    shortfall_sum: Any,
    open_: Any,
    reports: Any,
) -> int:
    """One feedback of one run with one draw: ``OMDApproachability._update`` up to its QP step,
    then ``Pacer.settle`` of the decision; returns the context's visits after it.

    ``drawn`` the routed expert, ``x`` the context, ``reward``, the realized ``cost`` (d,),
    the decision's booking ``booked`` (d,) and its propensity ``q_drawn``. The state, each
    array the policy's own (run 0 of its leading axis), changed in place: OMD's ``grad``
    (1, X, K), ``reward_sum`` and ``visits`` (1, X), ``cost_sum`` (1, d); the model
    estimator's ``coef`` and ``moment`` (1, X, P), ``gram`` (1, X, P, P) and offset ``ix``;
    OMD's cost estimate ``est`` (rows, K, d), ``est_n`` (rows, K), ``est_floor`` (rows, 1, d),
    learned on row ``est_row`` with its prior weight and window (unless ``est_learns`` is
    false: mode "table"); the dual's
    ``dual_n`` observations counting this one (0: it keeps no moments) and its moments
    ``mean``, ``m2`` (1, d); the pacer's estimate likewise (``pace_*``), its ``spend`` and
    reserve (1, d each), ``open_`` and ``reports`` (1,).
    """
    k = grad.shape[2]
    d = cost.shape[0]
    # The model estimator (ModelGradient._estimate_one, then _accumulate_one).
    c_a = coef[0, x, drawn + 1]
    predicted = coef[0, x, 0] + c_a
    residual = (reward - predicted) * 1.0 / (q_drawn + ix)
    for i in range(k):
        if i == drawn:
            grad[0, x, i] += c_a * 1.0 + residual
        else:
            grad[0, x, i] += coef[0, x, i + 1] + 0.0
    f = drawn + 1
    gram[0, x, 0, 0] += 1.0
    gram[0, x, 0, f] += 1.0
    gram[0, x, f, 0] += 1.0
    gram[0, x, f, f] += 1.0
    moment[0, x, 0] += reward
    moment[0, x, f] += reward
    reward_sum[0, x] += reward
    seen = visits[0, x] + 1
    visits[0, x] = seen
    if est_learns:  # mode "distinct" or "draws" (one draw: the same update)
        _learn_cost(est, est_n, est_floor, est_row, drawn, cost, est_weight, est_window)
    if dual_n > 0:  # observe_rows: Welford's update of the realized cost's moments
        for j in range(d):
            delta = cost[j] - mean[0, j]
            new_mean = mean[0, j] + delta / dual_n
            mean[0, j] = new_mean
            m2[0, j] = m2[0, j] + delta * (cost[j] - new_mean)
    for j in range(d):
        cost_sum[0, j] += cost[j]
    # The pacer's settle: the decision closes, its estimates learn, the report feeds the reserve.
    settle_one(
        drawn,
        cost,
        booked,
        True,
        pace_est,
        pace_n,
        pace_floor,
        pace_row,
        pace_weight,
        pace_window,
        spend,
        excess_max,
        excess_sum,
        shortfall_max,
        shortfall_sum,
        open_,
        reports,
    )
    return int(seen)


def settle_one(
    drawn: int,
    cost: Any,
    booked: Any,
    was_open: bool,
    est: Any,
    est_n: Any,
    est_floor: Any,
    row: int,
    weight: float,
    window: float,
    spend: Any,
    excess_max: Any,
    excess_sum: Any,
    shortfall_max: Any,
    shortfall_sum: Any,
    open_: Any,
    reports: Any,
) -> None:
    """``Pacer.settle`` of one run whose decision drew one expert, ``drawn``, and realized
    ``cost`` (d,) against its booking ``booked`` (d,): an open decision closes (``was_open``),
    the pacer's estimate ``est`` (rows, K, d) learns on ``row`` (its counts ``est_n``, floor,
    prior weight and window), and a cost off the booking moves the ``spend`` and the reserve
    (1, d each) and counts in ``reports`` (1,)."""
    if was_open:
        open_[0] = _npmax(open_[0] - 1.0, 0.0)
    _learn_cost(est, est_n, est_floor, row, drawn, cost, weight, window)
    d = cost.shape[0]
    reported = False
    for j in range(d):
        if cost[j] - booked[j] != 0.0:
            reported = True
    if reported:
        for j in range(d):
            diff = cost[j] - booked[j]
            spend[0, j] = _npmax(spend[0, j] + diff, 0.0)
            over, under = _npmax(diff, 0.0), _npmax(-diff, 0.0)
            excess_max[0, j] = _npmax(excess_max[0, j], over)
            shortfall_max[0, j] = _npmax(shortfall_max[0, j], under)
            excess_sum[0, j] += over
            shortfall_sum[0, j] += under
        reports[0] += 1.0


def _fma(a: float, b: float, c: float) -> float:
    """``a * b + c`` rounded once (exact rationals here; ``msroute.policies._compiled.fma``
    compiled)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _dot(q: Any, x: int, costs: Any, j: int) -> float:
    """``sum_i q[x, i] costs[x, i, j]``, accumulated from 0 one fused multiply-add after
    another: OpenBLAS's dot product of a few entries on a CPU with FMA (where numpy's product
    sums otherwise, ``msroute.policies.live_step``'s probe keeps numpy's)."""
    s = 0.0
    for i in range(q.shape[1]):
        s = _fma(q[x, i], costs[x, i, j], s)
    return s


def measure_rows(q: Any, costs: Any, out: Any) -> None:
    """What the linear surrogate's dual measures, ``C^T q`` of each row: ``q`` (X, K), ``costs``
    (X, K, d) -> ``out`` (X, d) (``msroute.core.problem_batch.surrogate_cost``)."""
    for x in range(q.shape[0]):
        for j in range(costs.shape[2]):
            out[x, j] = _dot(q, x, costs, j)


def aggregate_one(q: Any, costs: Any, visits: Any, x: int, others: Any) -> float:
    """``OMDApproachability._aggregate_spend_one`` of the linear surrogate without a warm
    start's prior: context ``x``'s share (returned) and the other contexts' spend into
    ``others`` (1, d), from the contexts' routings ``q`` (X, K), cost estimates ``costs``
    (X, K, d) and visits (X,), at most 128 contexts. numpy's sums: the visits' and, at d = 1,
    the spend's pairwise (``_leaf_sum``); at d >= 2 the spend's rows one after another."""
    n_ctx, d = q.shape[0], costs.shape[2]
    v = np.empty(n_ctx)
    for y in range(n_ctx):
        v[y] = float(visits[y])
    total = _leaf_sum(v, 0, n_ctx)
    den = 1.0 if total < 1.0 else total  # np.maximum(total, 1.0): NaN propagates
    spend = np.empty(n_ctx)
    for j in range(d):
        for y in range(n_ctx):
            spend[y] = _dot(q, y, costs, j) * (v[y] / den)
        if d == 1:
            s = _leaf_sum(spend, 0, n_ctx)
        else:
            s = spend[0]
            for y in range(1, n_ctx):
                s += spend[y]
        others[0, j] = s - spend[x]
    return float(v[x] / den)
