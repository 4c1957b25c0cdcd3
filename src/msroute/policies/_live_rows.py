"""The live router's feedback to OMD at one run and one draw, as one function of scalar loops
(``msroute.policies.live_step``): in Python, and compiled by ``msroute.policies._compiled.
live_step``, with the same IEEE operations in the same order (no fastmath), so both give the
floats of the policy's single-run Python path bit for bit.
"""

from __future__ import annotations

from typing import Any

__all__ = ["feedback_one"]


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
    open_[0] = _npmax(open_[0] - 1.0, 0.0)
    _learn_cost(pace_est, pace_n, pace_floor, pace_row, drawn, cost, pace_weight, pace_window)
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
    return int(seen)
