"""Online estimates of each expert's cost per call: the table as the prior, realized costs after.

``update(..., cost)`` passes the cost a round actually incurred (tokens spent, minutes worked).
When an expert's real cost per call differs from its table value, the bounds must hold on what
was spent, so the policies use an online estimate ``C_hat`` in place of the table ``C``.

Only the team's total cost is observed, so each round's *residual* ``e = x_t - sum_{i in A_t}
c_hat_i`` (per coordinate) is attributed to the routed experts in proportion to their current
estimates (plus a small floor, so that an expert the table calls free can still be found to cost
something), and each expert's estimate is the running mean of what it was attributed:

    c_hat_i <- c_hat_i + share_i / (n0 + n_i),    share_i = e * m_i c_hat_i / sum_k m_k c_hat_k

with ``m_i`` the number of times expert ``i`` was counted in the round (once per distinct routed
expert, or once per draw) and ``n_i`` its calls so far; the table counts as ``n0`` calls
(``prior_weight``). With a ``window`` ``W`` the step is ``share_i / min(n0 + n_i, W)``: the
running mean of the first calls, then an exponentially weighted mean of about the last ``W``,
which follows a price that changed (the pacer books the next call at what calls cost now; a
mean over all calls would take as many calls again as were made before the change).

The true costs are a fixed point (their residual is zero) and the update is a stochastic
approximation of it (preconditioned least squares on the team totals); a round
whose realized cost equals the prediction exactly leaves the estimate unchanged, bit for bit, so
a policy fed table costs decides exactly as one that ignores realized costs.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, get_args

import numpy as np

from msroute._validation import FloatArray, IntArray
from msroute.core.problem_batch import draws_cost, team_cost
from msroute.core.reward import draw_counts
from msroute.errors import InvalidValueError

__all__ = ["COST_ESTIMATES", "CostEstimate", "CostEstimateMode", "check_cost_estimate"]

CostEstimateMode = Literal["distinct", "draws", "table"]
#: The accepted values of ``cost_estimate``.
COST_ESTIMATES: tuple[str, ...] = get_args(CostEstimateMode)
#: Attribution floor, as a fraction of the coordinate's unit.
_FLOOR = 1e-3


def check_cost_estimate(value: object) -> CostEstimateMode:
    """Validate the ``cost_estimate`` keyword."""
    for mode in COST_ESTIMATES:
        if value == mode:
            return mode  # type: ignore[return-value]
    raise InvalidValueError(
        f"cost_estimate == {value!r}, must be 'distinct' (a realized cost counts each distinct "
        "routed expert once), 'draws' (once per draw) or 'table' (ignore realized costs)"
    )


class CostEstimate:
    """Per-run, per-expert cost estimates (R, K, d), learned from realized team costs.

    Parameters
    ----------
    prior : ndarray, shape (R, K, d)
        The cost table of each run (the prior, and the estimate until costs differ from it).
    scale : ndarray, shape (R, d)
        Unit of each coordinate (``msroute.policies.duals.cost_scale``); sets the
        attribution floor, so the estimates scale with the units of the costs.
    mode : {"distinct", "draws", "table"}, default "distinct"
        How a realized cost counts the routed experts (as in ``msroute.simulate``'s
        ``cost_count``), or "table": never learn (the paper's policies use the table).
    prior_weight : float, default 10.0
        How many calls the table counts for.
    window : float, optional
        The most calls an estimate averages over (module docstring; default: all of them).

    Attributes
    ----------
    costs : ndarray, shape (R, K, d)
        The current estimates.
    n_obs : ndarray, shape (R, K)
        Calls counted per expert.
    """

    _state_attrs: ClassVar[tuple[str, ...]] = ("costs", "n_obs")
    #: Per expert: ``costs`` (R, K, C), ``n_obs`` (R, K).
    _expert_axes: ClassVar[dict[str, int]] = {"costs": -2, "n_obs": -1}
    #: Costs and their counts are ``>= 0`` (``check_state``).
    _state_rules: ClassVar[dict[str, str]] = {"costs": "nonnegative", "n_obs": "nonnegative"}

    def __init__(
        self,
        prior: FloatArray,
        scale: FloatArray,
        *,
        mode: CostEstimateMode = "distinct",
        prior_weight: float = 10.0,
        window: float = math.inf,
    ) -> None:
        self.mode: CostEstimateMode = check_cost_estimate(mode)
        w = float(prior_weight)
        if not np.isfinite(w) or w <= 0.0:
            raise InvalidValueError(
                f"cost_prior_weight == {prior_weight}, must be a finite number > 0"
            )
        self.prior_weight = w
        if not float(window) >= 1.0:  # NaN included
            raise InvalidValueError(f"window == {window}, must be at least 1 call")
        self.window = float(window)
        self.prior = prior
        self.costs: FloatArray = np.array(prior, dtype=np.float64)
        self.n_obs: FloatArray = np.zeros(prior.shape[:2])
        self._floor = (_FLOOR * scale)[:, None, :]

    def reprice(self, experts: list[int]) -> None:
        """Start these experts' estimates afresh from the prior (their table price changed)."""
        if experts:
            self.costs[:, experts] = self.prior[:, experts]
            self.n_obs[:, experts] = 0.0

    def start_at(
        self, runs: IntArray, n_contexts: int, costs: FloatArray, counted: FloatArray
    ) -> None:
        """Start some runs' estimates elsewhere than the table (a warm start's per-context
        costs): rows ``r X + x`` of run ``r`` in context ``x`` take ``costs[.., x]`` (R', X, K, d)
        as ``counted[.., x]`` calls (R', X) where that is > 0, and keep the table elsewhere."""
        k, d = self.costs.shape[1:]
        has = counted > 0
        est = self.costs.reshape(-1, n_contexts, k, d)
        est[runs] = np.where(has[:, :, None, None], costs, est[runs])
        n_obs = self.n_obs.reshape(-1, n_contexts, k)
        n_obs[runs] = np.where(has[:, :, None], counted[:, :, None], n_obs[runs])

    def surrogate(self, q: FloatArray) -> FloatArray:
        """``C_hat^T q`` per run: q (R, K) -> (R, d)."""
        return np.asarray(np.matmul(q[:, None, :], self.costs)[:, 0, :], dtype=np.float64)

    def update(
        self,
        draws: IntArray,
        cost: FloatArray,
        counts: FloatArray | None = None,
        rows: IntArray | None = None,
    ) -> None:
        """Learn from one round: the draws (R, M) and the realized costs (R, d).

        ``counts``: ``draw_counts`` of the draws, when the caller has it already. ``rows``
        (R,): the estimate row each run's round belongs to, when the estimates have more rows
        than runs (one per run and context: ``OMDApproachability`` learns each context's
        costs apart, since a task's prompts can be longer or shorter than the average).
        """
        if self.mode == "table":
            return
        if draws.shape == (1, 1):
            self._update_one(0 if rows is None else int(rows[0]), int(draws[0, 0]), cost)
            return
        self._update_batch(draws, cost, counts, rows)

    def _update_one(self, row: int, drawn: int, cost: FloatArray) -> None:
        """``update`` of one round with one draw (a live router's round at M = 1) on the
        estimate row ``row``: the batched form's floats, on the drawn expert's entries only.

        The mask is one-hot, so the prediction is the drawn expert's estimate (a sum with one
        nonzero term), its weight is its estimate plus the floor, the weights' sum is that
        weight, and every other expert's share is a zero that leaves its estimate as it is."""
        self.n_obs[row, drawn] += 1.0
        est = self.costs[row, drawn]
        resid = cost[0] - est
        if not np.count_nonzero(resid):
            return
        weight = est + self._floor[row, 0]
        share = resid * weight / weight
        self.costs[row, drawn] = np.maximum(
            est + share / min(self.prior_weight + self.n_obs[row, drawn], self.window), 0.0
        )

    def _update_batch(
        self,
        draws: IntArray,
        cost: FloatArray,
        counts: FloatArray | None = None,
        rows: IntArray | None = None,
    ) -> None:
        """``update`` of any batch, in numpy (or a compiled loop)."""
        if rows is not None:
            self._update_rows(rows, draws, cost, counts)
            return
        k = self.costs.shape[1]
        compiled = self._count_compiled(draws, cost) if self.mode == "distinct" else None
        if compiled is not None:  # predicted and counted already
            moved, predicted = compiled
            if not moved:  # every cost as predicted: nothing to learn
                return
            m = np.minimum(draw_counts(draws, k) if counts is None else counts, 1.0)
        else:
            if counts is None:
                counts = draw_counts(draws, k)
            if self.mode == "distinct":
                m = np.minimum(counts, 1.0)  # the routed experts' 0/1 mask, as floats
                predicted = _distinct_cost(draws, m, self.costs)
            else:
                predicted = draws_cost(draws, self.costs)
                m = counts
            self.n_obs += m
        resid = cost - predicted
        if not np.count_nonzero(resid):  # faster than .any()
            return
        weight = m[:, :, None] * (self.costs + self._floor)  # (R, K, d)
        share = resid[:, None, :] * weight / weight.sum(axis=1, keepdims=True)
        self.costs = np.maximum(self.costs + share / self._counted(self.n_obs)[:, :, None], 0.0)

    def _update_rows(
        self, rows: IntArray, draws: IntArray, cost: FloatArray, counts: FloatArray | None
    ) -> None:
        """``update`` of the estimate rows ``rows`` (one per run), in numpy; one row (a live
        router's run) by basic indexing, whose views read and write in place."""
        k = self.costs.shape[1]
        at: IntArray | slice = rows
        if rows.size == 1:
            at = slice(int(rows[0]), int(rows[0]) + 1)
        if counts is None:
            counts = draw_counts(draws, k)
        costs = self.costs[at]
        if self.mode == "distinct":
            m = np.minimum(counts, 1.0)
            predicted = team_cost(m, costs)
        else:
            m = counts
            predicted = draws_cost(draws, costs)
        n_obs = self.n_obs[at] + m
        self.n_obs[at] = n_obs
        resid = cost - predicted
        if not np.count_nonzero(resid):
            return
        weight = m[:, :, None] * (costs + self._floor[at])
        share = resid[:, None, :] * weight / weight.sum(axis=1, keepdims=True)
        self.costs[at] = np.maximum(costs + share / self._counted(n_obs)[:, :, None], 0.0)

    def _counted(self, n_obs: FloatArray) -> FloatArray:
        """The calls each estimate averages over: the prior's and the experts', at most the
        window."""
        counted = self.prior_weight + n_obs
        return counted if self.window == math.inf else np.minimum(counted, self.window)

    def _count_compiled(self, draws: IntArray, cost: FloatArray) -> tuple[bool, FloatArray] | None:
        """Mode "distinct" for a batch in one compiled loop (``msroute._outcome.
        credit_distinct``), where it gives numpy's floats: ``n_obs`` counted, and (whether some
        cost differs from its prediction, the prediction (R, d)). None where the loop does not
        apply (one run, d not 2 or 3, another BLAS order): nothing done."""
        costs = self.costs
        if not (
            draws.shape[0] > 1
            and costs.shape[2] in (2, 3)
            and costs.flags.c_contiguous
            and self.n_obs.flags.c_contiguous
            and self.n_obs.flags.writeable
        ):
            return None
        from msroute import _outcome  # numba: imported on first use

        if not _outcome.blas_pairs_order():
            return None
        predicted = np.empty((draws.shape[0], costs.shape[2]))
        moved = _outcome.credit_distinct(
            np.asarray(draws, dtype=np.int64),
            costs,
            np.ascontiguousarray(cost, dtype=np.float64),
            predicted,
            self.n_obs,
        )
        return bool(moved), predicted


def _distinct_cost(draws: IntArray, mask: FloatArray, costs: FloatArray) -> FloatArray:
    """``team_cost(mask, costs)`` of the draws' (R, M) 0/1 mask: a batch's (R, K, 2 or 3) costs
    in one compiled loop where that gives the product's floats (``msroute._outcome``)."""
    if draws.shape[0] > 1 and costs.shape[2] in (2, 3) and costs.flags.c_contiguous:
        from msroute import _outcome  # numba: imported on first use

        if _outcome.blas_pairs_order():
            out = np.empty((draws.shape[0], costs.shape[2]))
            _outcome.pair_costs(np.asarray(draws, dtype=np.int64), costs, out)
            return out
    return team_cost(mask, costs)
