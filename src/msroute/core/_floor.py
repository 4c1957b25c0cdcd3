"""The linear programs behind the adaptive exploration floor and the smallest feasible budget.

`msroute.core.problem.Problem` asks two questions of the surrogate box ``S`` of Section 4.2
(``lo <= C^T q <= hi`` on the bounds the user gave):

* `max_floor`: the largest floor ``gamma`` such that some ``q >= gamma`` on the simplex has
  ``C^T q`` in ``S`` (Assumption 1 holds for every floor up to it, and for none above);
* `extreme_cost`: the least (or greatest) value of one bounded coordinate over the floored
  simplex with every *other* bound held: the budget that would work, which the error message of
  an infeasible budget names in the user's units.

Each cost coordinate's rows are divided by that coordinate's largest cost, so that the solver's
absolute tolerances are relative to the user's units: a budget of 0.001 usd per query is decided
as precisely as one of 1,000 workload units.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from msroute._validation import FloatArray
from msroute.errors import InfeasibleConstraintsError

__all__ = ["BoundRow", "extreme_cost", "max_floor"]

#: One bound of the surrogate box: (cost coordinate, "upper" or "lower", value of C^T q).
BoundRow = tuple[int, str, float]


def _rows(costs: FloatArray, bounds: Sequence[BoundRow]) -> tuple[FloatArray, FloatArray]:
    """``A q <= b`` for the bounds, each row scaled by its coordinate's largest cost."""
    k = costs.shape[0]
    scale = costs.max(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    a = np.empty((len(bounds), k))
    b = np.empty(len(bounds))
    for r, (j, side, value) in enumerate(bounds):
        sign = 1.0 if side == "upper" else -1.0
        a[r] = sign * costs[:, j] / scale[j]
        b[r] = sign * value / scale[j]
    return a, b


def _solve(
    objective: FloatArray,
    a_ub: FloatArray,
    b_ub: FloatArray,
    a_eq: FloatArray,
    bounds: list[tuple[float, float | None]],
) -> FloatArray | None:
    """HiGHS on ``min objective . x``; None when infeasible."""
    from scipy.optimize import linprog  # scipy loads only when an LP is solved

    res = linprog(
        objective,
        A_ub=a_ub if a_ub.size else None,
        b_ub=b_ub if a_ub.size else None,
        A_eq=a_eq,
        b_eq=[1.0],
        bounds=bounds,
        method="highs",
    )
    if res.status == 2:
        return None
    if res.status != 0:  # bounded variables, so never unbounded: numbers HiGHS cannot solve
        largest = max(float(np.abs(x).max()) for x in (objective, a_ub, b_ub, a_eq) if x.size)
        raise InfeasibleConstraintsError(
            f"feasibility LP failed: {res.message} (costs and bounds as large as {largest:.3g} "
            "in absolute value: state them in units where they are not extreme)"
        )
    return np.asarray(res.x, dtype=np.float64)


def max_floor(costs: FloatArray, bounds: Sequence[BoundRow]) -> tuple[float, FloatArray] | None:
    """The largest ``gamma <= 1/K`` with some ``q >= gamma`` on the simplex meeting ``bounds``.

    Parameters
    ----------
    costs : ndarray, shape (K, d)
    bounds : sequence of (j, side, value)
        The bounds of the surrogate box ``S`` on ``(C^T q)_j``.

    Returns
    -------
    (gamma_max, q) or None
        The largest floor and a routing that has it (``q >= gamma_max``); None when no routing
        at all (not even one that leaves experts out) meets the bounds.
    """
    k = costs.shape[0]
    a, b = _rows(costs, bounds)
    # Variables (q, g): maximise g subject to g - q_i <= 0 and the bounds.
    a_ub = np.block([[-np.eye(k), np.ones((k, 1))], [a, np.zeros((a.shape[0], 1))]])
    b_ub = np.concatenate([np.zeros(k), b])
    a_eq = np.concatenate([np.ones(k), [0.0]])[None, :]
    objective = np.concatenate([np.zeros(k), [-1.0]])
    x = _solve(objective, a_ub, b_ub, a_eq, [(0.0, 1.0)] * k + [(0.0, 1.0 / k)])
    if x is None:
        return None
    return max(0.0, float(x[k])), x[:k]


def extreme_cost(
    costs: FloatArray, bounds: Sequence[BoundRow], drop: int, floor: float
) -> float | None:
    """The best value ``bounds[drop]`` could ask for: the least ``(C^T q)_j`` (an upper bound)
    or the greatest (a lower bound) over ``q >= floor`` on the simplex with every other bound
    held; None when the other bounds cannot be met together."""
    k = costs.shape[0]
    j, side, _ = bounds[drop]
    others = [row for i, row in enumerate(bounds) if i != drop]
    a, b = _rows(costs, others)
    sign = 1.0 if side == "upper" else -1.0
    x = _solve(sign * costs[:, j], a, b, np.ones((1, k)), [(floor, 1.0)] * k)
    if x is None:
        return None
    return float(costs[:, j] @ x)
