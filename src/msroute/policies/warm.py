"""A warm start's prior inside OMD: pseudo-counts from an eval table, and the check that
shrinks them where the traffic contradicts them.

An eval table graded before launch tells, per context, each expert's mean reward and cost. A
warm-started OMD (``OMDApproachability.warm_start``; ``msroute.warmstart`` builds its arguments
from a table) starts each context at the table's certified best routing and keeps the table's
knowledge as pseudo-counts of a stated strength ``N``:

* the reward model of the "model" gradient estimator fits each expert's coefficient with a
  prior: ``N`` pseudo-rounds at the table's mean reward (a ridge toward the table's mean
  instead of toward 0, ``msroute.policies.reward_model``), so the model's exact gradient, the
  main term of each step's estimate, points where the table does until the traffic says
  otherwise;
* the proximal step counts steps already taken in the context (Corollary 2's ``eta = a
  sqrt(n)`` and the decaying floor at step ``n`` start there), so the first steps move as after
  them, not as from scratch;
* the cost estimates (OMD's and its pacer's, which books each decision at them) count ``N``
  calls at the table's per-context costs, and the aggregate cut
  weighs the contexts by ``N X`` pseudo-visits in the table's proportions.

None of it is traffic: the time-averaged spend, the pacer's, the feedback counts and the dual's
moments start at zero.

The anchor
----------
A warm start *anchored* (the default of ``msroute.warmstart.warm_start`` and of a router's
``warm_start``) keeps a good start where it is; without it, a router started at the table's
optimum drifts off it within its first hundreds of decisions, for three reasons that the anchor
removes, each in proportion to the prior's weight (so a prior the bias check shrinks lets go,
and a refuted one is gone):

* **the importance-weighted residual** of the model estimator, ``(r - rhat) / (q_i + ix)``, is
  what corrects the model where it is wrong. At an expert the routing leaves at its floor it is
  weighed ~``1 / ix`` (2K), so one surprising reward of a rarely routed expert moves the routing
  most of the way to it at the next step, whatever the table knew. Anchored, the residual of a
  round of expert ``i`` is damped by the traffic's share of what is known about ``i``, ``(n_i +
  1) / (n_i + 1 + weight_i)`` (``n_i`` the earlier live rounds of ``i``): the table's pseudo-rounds
  already hold the correction the first rounds would make, and the damping fades as the
  traffic outgrows the prior;
* **the step count** starts at ``N`` QP steps (``N B`` rounds), not ``N / B`` (``N`` rounds): the
  early steps of ``eta = a sqrt(n)`` are the largest, and a prior of ``N`` pseudo-rounds of each
  of the ``K`` experts holds ``N K`` outcomes of the context, where a step learns from ``B``
  (the same order for ``K`` near ``B``, 10 by default);
* **the budget's price**: the dual's cut holds the aggregate spend, but any split of the budget
  between the contexts meets it, and the projected steps drift among those splits (no force
  pulls a context's spend back where the table's optimum put it). Anchored, the gradient of
  each step is the reward's less the optimum's multipliers times the context's cost estimates
  (``lambda . C_x``, the Lagrangian of ``OPT^ctx``), so a context that spends beyond its share
  at the table's price pays for it. The price is on while the dual enforces the bound (``w_j``
  of the multiplier's sign): a router that spends below its budget, where the traffic's
  rewards differ from the table's, is free to spend up to it.

The margin
----------
A live router approaches its bounds shrunk by a budget margin
(``msroute.policies.duals.ApproachabilityDual.target``), at its cap, a tenth of each finite bound,
while its realized costs are few. A warm start that keeps the margin (``fade``, the default of
``msroute.warmstart.warm_start`` and of a router's ``warm_start``; ``margin = true``) plans for it
and prices by it:

* **the start** is the table's optimum for the bounds shrunk by the margin's cap, the box the
  dual approaches at its first decisions, not for the bounds themselves. An optimum on the bound
  itself is a tenth over that box: the aggregate cut (``msroute.policies.omd``) then makes each
  context's first QP step take the whole excess, ``1 / p_x`` times its share of it, projected
  toward its cheapest experts whatever their rewards, and the first contexts to step leave the
  table's pick for a worse routing, which the later steps only partly win back;
* **the price** of a bound fades with the aggregate spend's distance inside the box the dual
  approaches now (the cut's ``p_x u_x(q) + O`` at the step's routing): the optimum's multiplier on
  that side of the box or beyond it, none a margin's cap (a tenth of the bound) or more inside,
  linearly between. At the multiplier the context that mixes two experts at the optimum is
  indifferent between them, so a priced routing stays wherever its spend is; faded, the spend
  left free as the margin shrinks draws the routing back up to the box (on the ``w_j`` gate
  above, which the noise of single decisions keeps on most of the time, it stayed where it
  started).

A warm start that does not keep it (a journal or policy file from before it, or ``margin =
false``) plans for the bounds and gates the price by ``w_j``.

A warm start that is not anchored (a journal or policy file from before the anchor, or
``anchor = false``) runs as the paragraphs above the anchor describe, with the step count at ``N /
B``.

The floor
---------
The decaying floor (``msroute.policies.omd_variants``) routes each expert at least ``gamma /
sqrt(n)`` at a context's n-th QP step, so that a learner starting from nothing sees every expert:
after ``n`` steps of ``B`` rounds, about ``2 B gamma sqrt(n)`` rounds each. A prior of ``N``
pseudo-rounds of every expert has seen each of them ``N`` times already. A warm start that counts
them as explored (``explored``, the default of ``msroute.warmstart.warm_start`` and of a router's
``warm_start``; ``explored = true``) starts the floor where a cold learner's would have given each
expert as many rounds: at step ``(N / (2 B gamma))^2`` (the step count of the anchor, if larger),
with the bias check's factor on ``N`` as everywhere else, so a shrunk prior explores more and a
refuted one as a cold context. Counted as the anchor's ``N`` steps instead, the floor kept about
``K gamma / sqrt(N)`` of a context's traffic (a hundredth on the packaged LLM table) on experts the
table already graded, most of them poor: 0.002 of reward at every budget
(``benchmarks/bench_warm_start.py``, docs/llm-routing.md). A warm start that does not count them
(a journal or policy file from before it, or ``explored = false``) keeps the anchor's count for
the floor as for the step.

The bias check
--------------
Each feedback of a warm-started context is compared with the table's prediction of the team that
answered (one expert: its mean in the table; a team: its best member's mean, a lower bound of the
team's own). Per (context, expert) the residuals ``d = r - predicted`` of the rounds the expert took
part in give ``z = mean(d) / se``, ``se^2 = s^2 (1/n + 1/P_x)`` with ``s^2`` the larger of their
variance and the expert's variance in the table (so that a few rounds are not taken for certainty),
``n`` the rounds and ``P_x`` the table's prompts of the context (the table's own sampling error). At
each QP step of the context its prior's weight is ``N min_i min(1, (c / z_i)^2)`` with ``c =
BIAS_Z``, for every expert, for the step count and for the price (each times the same factor): a
prior the traffic agrees with within ``c`` standard errors keeps its full weight, one it
contradicts on any expert shrinks as ``1 / z^2``, to nothing as the evidence grows, on every expert
of the context (a table wrong about the expert it routes to is not trusted about the others, which
the traffic has barely tried). The check reads every round of each expert, so a prior once
contradicted stays so when the routing has moved away from it.

A prior off by ``REFUTE_Z`` standard errors or more on some expert is refuted: the context restarts
cold (its routing back at the policy's own start, no pseudo-count left), keeping what its traffic
taught the reward model; from a table that routes each context to its worst expert, waiting for the
shrunk prior to let go would cost far more than the rounds it takes to refute it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.errors import InvalidStateError
from msroute.policies.duals import ApproachabilityDual
from msroute.policies.reward_model import Prior

__all__ = ["BIAS_Z", "REFUTE_Z", "RewardPrior"]

#: Standard errors within which the traffic may differ from the table without shrinking it.
BIAS_Z = 2.0
#: Standard errors beyond which a context's prior is refuted and the context restarts cold.
REFUTE_Z = 4.0
#: The least variance of the residuals the check assumes (where the table's and the traffic's
#: rewards are all the same).
_VAR_FLOOR = 1e-4


class RewardPrior:
    """The pseudo-counts of a warm start and its bias check, per (run, context, expert).

    All zeros (``on`` False) until ``set``: a policy that was not warm-started carries it
    unused. See the module docstring.

    Attributes
    ----------
    strength : ndarray, shape (R, X, K)
        ``N`` where the table has the context, else 0.
    mean : ndarray, shape (R, X, K)
        The table's mean reward of each expert alone in each context.
    spread : ndarray, shape (R, X, K)
        The variance of those rewards over the table's prompts.
    weight : ndarray, shape (R, X, K)
        The prior's weight now (``strength`` times the bias check's factor).
    support : ndarray, shape (R, X)
        The table's prompts per context.
    n, resid, resid2 : ndarray, shape (R, X, K)
        Per expert: the live rounds it took part in, and the sum of their residuals and of
        their squares.
    offset : ndarray, shape (R, X)
        QP steps counted for the prior in each context.
    cold : ndarray, shape (R, X, K)
        The routing each context would have started from without the table.
    share : ndarray, shape (R, X)
        Pseudo-visits of each context (the aggregate cut's weights).
    anchor : ndarray of bool, shape (R,)
        Whether each run's prior anchors its learner (module docstring).
    price : ndarray, shape (R, d)
        The table optimum's multipliers (reward per unit of each cost, ``OPT^ctx``'s: > 0 where
        an upper bound binds, < 0 where a lower one does; 0 unless anchored).
    fade : ndarray of bool, shape (R,)
        Whether each run's price fades with the spend's slack (module docstring, "The margin").
    explored : ndarray of bool, shape (R,)
        Whether each run's decaying floor counts the prior as explored (module docstring, "The
        floor").
    """

    _state_attrs: ClassVar[tuple[str, ...]] = (
        "on",
        "strength",
        "mean",
        "spread",
        "weight",
        "support",
        "n",
        "resid",
        "resid2",
        "offset",
        "share",
        "cold",
        "anchor",
        "price",
        "fade",
        "explored",
    )
    _expert_axes: ClassVar[dict[str, int]] = {
        "strength": -1,
        "mean": -1,
        "spread": -1,
        "weight": -1,
        "n": -1,
        "resid": -1,
        "resid2": -1,
        "cold": -1,
    }
    _state_rules: ClassVar[dict[str, str]] = {
        "strength": "nonnegative",
        "spread": "nonnegative",
        "weight": "nonnegative",
        "support": "nonnegative",
        "n": "nonnegative",
        "resid2": "nonnegative",
        "offset": "nonnegative",
        "share": "nonnegative",
    }

    def __init__(
        self, n_runs: int, n_contexts: int, n_experts: int, batch: int, n_costs: int
    ) -> None:
        shape = (n_runs, n_contexts, n_experts)
        self.batch = batch
        self.on = False
        self.strength: FloatArray = np.zeros(shape)
        self.mean: FloatArray = np.zeros(shape)
        self.spread: FloatArray = np.zeros(shape)
        self.weight: FloatArray = np.zeros(shape)
        self.support: FloatArray = np.zeros(shape[:2])
        self.n: FloatArray = np.zeros(shape)
        self.resid: FloatArray = np.zeros(shape)
        self.resid2: FloatArray = np.zeros(shape)
        self.offset: FloatArray = np.zeros(shape[:2])
        self.share: FloatArray = np.zeros(shape[:2])
        self.cold: FloatArray = np.zeros(shape)
        self.anchor: BoolArray = np.zeros(n_runs, dtype=bool)
        self.price: FloatArray = np.zeros((n_runs, n_costs))
        self.fade: BoolArray = np.zeros(n_runs, dtype=bool)
        self.explored: BoolArray = np.zeros(n_runs, dtype=bool)

    def set(
        self,
        runs: IntArray,
        mean: FloatArray,
        spread: FloatArray,
        support: FloatArray,
        strength: float,
        cold: FloatArray,
        price: FloatArray | None = None,
        fade: bool = False,
        explored: bool = False,
    ) -> None:
        """Give runs ``runs`` the table's ``mean`` and ``spread`` (R', X, K) and ``support``
        (R', X) at strength ``N``, and the routing ``cold`` (R', X, K) a refuted context
        restarts from; ``price`` (R', d): the optimum's multipliers, given: the prior anchors
        the learner; ``fade``: the price fades with the spend's slack; ``explored``: the
        decaying floor counts the prior as explored (module docstring). The bias check starts
        afresh."""
        has = support > 0
        self.strength[runs] = np.where(has[:, :, None], strength, 0.0)
        self.mean[runs] = mean
        self.spread[runs] = spread
        self.cold[runs] = cold
        self.weight[runs] = self.strength[runs]
        self.support[runs] = support
        for arr in (self.n, self.resid, self.resid2):
            arr[runs] = 0.0
        self.anchor[runs] = price is not None
        self.price[runs] = 0.0 if price is None else price
        self.fade[runs] = fade
        self.explored[runs] = explored
        self.offset[runs] = np.where(has, self.steps_of(strength, self.anchor[runs, None]), 0.0)
        total = np.maximum(support.sum(axis=1, keepdims=True), 1.0)
        self.share[runs] = strength * support.shape[1] * support / total
        self.on = bool(np.any(self.strength > 0))

    def steps_of(self, weight: FloatArray | float, anchor: BoolArray | bool) -> FloatArray:
        """The QP steps a prior of ``weight`` pseudo-rounds counts for: ``weight`` anchored,
        else ``weight / B``."""
        return np.asarray(np.where(anchor, weight, np.divide(weight, self.batch)))

    def explored_steps(self, weight: FloatArray | float, gamma: float) -> FloatArray:
        """The QP steps after which the decaying floor ``gamma / sqrt(n)`` has given each expert
        about ``weight`` rounds (``2 B gamma sqrt(n)``): ``(weight / (2 B gamma))^2`` (module
        docstring, "The floor"). A weight too large for its square is infinitely many steps
        (the floor at its least), without numpy's overflow warning."""
        with np.errstate(over="ignore"):
            return np.asarray(np.square(np.divide(weight, 2.0 * self.batch * gamma)))

    def floor_offset(self, runs: IntArray, ctx: IntArray, gamma: float) -> FloatArray:
        """The QP steps (R',) the decaying floor of the runs' contexts counts for their prior
        (floor start ``gamma``): ``offset``, or where the prior is explored the steps that gave
        each expert as many rounds as the prior's weight, if more."""
        offset = self.offset[runs, ctx]
        seen = self.explored_steps(self.weight[runs, ctx].max(axis=1), gamma)
        return np.asarray(np.where(self.explored[runs], np.maximum(offset, seen), offset))

    def damping(self, rows: IntArray, ctx: IntArray) -> FloatArray:
        """The factor (R, K) of each expert's importance-weighted residual in a round of the
        runs ``rows`` in contexts ``ctx`` (one per run): ``(n + 1) / (n + 1 + weight)``
        where anchored, 1 elsewhere (module docstring)."""
        n = self.n[rows, ctx] + 1.0
        weight = np.where(self.anchor[rows, None], self.weight[rows, ctx], 0.0)
        return np.asarray(n / (n + weight))

    def price_of(self, runs: IntArray, ctx: IntArray) -> FloatArray:
        """The price (R', d) of the runs' contexts at a QP step: the optimum's multipliers times
        the bias check's factor (0 where not anchored or refuted)."""
        strength = self.strength[runs, ctx].max(axis=1)
        factor = self.weight[runs, ctx].max(axis=1) / np.where(strength > 0, strength, 1.0)
        return np.asarray(self.price[runs] * factor[:, None])

    def priced(
        self,
        runs: IntArray,
        ctx: IntArray,
        dual: ApproachabilityDual,
        q: FloatArray,
        costs: FloatArray,
        aggregate: tuple[FloatArray, FloatArray] | None,
    ) -> FloatArray:
        """The price term (R', K) of the runs' QP steps: ``lambda . C_x``, with ``lambda``
        (``price_of``, per unit of the cost ``dual`` measures, which ``OPT^ctx`` bounds) on the
        bounds the dual enforces now, or faded by the spend's slack (module docstring), and
        ``C_x`` the cost estimates ``costs`` (R', K, d) of the steps' contexts, whose routings
        before the step are ``q`` (R', K) and aggregate cut ``aggregate`` (``None``: one
        context)."""
        price = self.price_of(runs, ctx)
        gated = np.where(price * dual.w[runs] > 0.0, price, 0.0)
        fade = self.fade[runs]
        if fade.any():
            spend = dual.measure(q, costs)  # the cut's: the contexts' aggregate where several
            if aggregate is not None:
                spend = aggregate[0][:, None] * spend + aggregate[1]
            lo, hi = dual.target()
            inside = np.where(price > 0.0, hi[runs] - spend, spend - lo[runs])
            with np.errstate(divide="ignore", invalid="ignore"):
                near = 1.0 - inside / dual.pad_cap[runs]  # 1 on the box's side, 0 a cap in
            near = np.clip(np.where(inside <= 0.0, 1.0, near), 0.0, 1.0)
            gated = np.where(fade[:, None], price * near, gated)
        return np.asarray(np.einsum("rkd,rd->rk", costs, gated))

    def observe(self, rows: IntArray, ctx: IntArray, draws: IntArray, reward: FloatArray) -> None:
        """Count one feedback per run: the residual of each run's team against the table's
        prediction, credited to each distinct member."""
        means = self.mean[rows, ctx]  # (R, K)
        if draws.shape[1] == 1:
            drawn = draws[:, 0]
            d = reward - means[np.arange(rows.size), drawn]
            self.n[rows, ctx, drawn] += 1.0
            self.resid[rows, ctx, drawn] += d
            self.resid2[rows, ctx, drawn] += d * d
            return
        d = reward - np.take_along_axis(means, draws, axis=1).max(axis=1)
        member = np.zeros(means.shape)
        np.put_along_axis(member, draws, 1.0, axis=1)
        self.n[rows, ctx] += member
        self.resid[rows, ctx] += member * d[:, None]
        self.resid2[rows, ctx] += member * (d * d)[:, None]

    def refresh(self, runs: IntArray, ctx: IntArray) -> BoolArray:
        """The bias check at a QP step of ``runs`` in contexts ``ctx``: each expert's weight
        and the context's step offset (module docstring). Returns which of the cells (R',) were
        refuted now: their prior is gone, and their routing is to restart at ``cold``."""
        n = self.n[runs, ctx]
        seen = n >= 2.0
        count = np.maximum(n, 1.0)
        dbar = self.resid[runs, ctx] / count
        var = np.maximum(self.resid2[runs, ctx] / count - dbar * dbar, self.spread[runs, ctx])
        var = np.maximum(var, _VAR_FLOOR)
        support = np.maximum(self.support[runs, ctx], 1.0)[:, None]
        z2 = dbar * dbar / (var * (1.0 / count + 1.0 / support))
        with np.errstate(divide="ignore"):
            factor = np.where(seen, np.minimum(1.0, BIAS_Z**2 / z2), 1.0)
        shrink = factor.min(axis=1)  # the context's: its most contradicted expert's
        strength = self.strength[runs, ctx]
        refuted = (shrink < (BIAS_Z / REFUTE_Z) ** 2) & (strength.max(axis=1) > 0)
        strength[refuted] = 0.0
        self.strength[runs, ctx] = strength
        self.weight[runs, ctx] = strength * shrink[:, None]
        self.offset[runs, ctx] = self.steps_of(strength.max(axis=1) * shrink, self.anchor[runs])
        if refuted.any():
            self.on = bool(np.any(self.strength > 0))
        return np.asarray(refuted, dtype=bool)

    def cells(self, runs: IntArray, ctx: IntArray) -> Prior:
        """The prior of the reward model's cells ``(runs, ctx)``: (weight, mean), each (R', K)."""
        return self.weight[runs, ctx], self.mean[runs, ctx]

    def validate_state(self, prefix: str) -> None:
        """A loaded prior's weights are at most its strength, and it is on exactly when some
        strength is positive."""
        if np.any(self.weight > self.strength):
            raise InvalidStateError(f"state entry {prefix + 'weight'!r} exceeds the strength")
        if self.on != bool(np.any(self.strength > 0)):
            raise InvalidStateError(
                f"state entry {prefix + 'on'!r} must say whether any strength is positive"
            )
