"""OMD-Approachability (Algorithm 1) and its contextual form (Algorithm 2).

The primal keeps a routing policy ``q`` on the floored simplex ``{q >= gamma, sum q = 1}`` and
ascends an importance-weighted estimate of the gradient of the expected sum-max reward; each
step is the proximal QP (6), which is the Euclidean projection of ``q + g / eta`` onto the
floored simplex cut by the dual's half-space(s). The dual ``w`` (the approachability player,
Lemma 5) runs projected online gradient ascent on the unit ball against
``f_t(w) = w . (C^T q_t) - h_S(w)``; ``msroute.policies.duals`` holds it and its two
constructions (scale-invariant, one cut per active bound: the default; the paper's single cut
``(C w) . q <= h_S(w)``).

The contextual form keeps one ``q`` per context and one shared dual (Remark 2): every OMD takes
``n_contexts``; ``msroute.policies.omd_contextual.ContextualOMD`` is Algorithm 2 as printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from msroute._seeding import SeedArg
from msroute._validation import (
    SIMPLEX_ATOL,
    BoolArray,
    FloatArray,
    IntArray,
    check_positive_int,
)
from msroute.core.bounds import bound_report
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.core.qp.projection import project_step
from msroute.errors import InvalidStateError, InvalidValueError
from msroute.policies.base import (
    BasePolicy,
    Decision,
    check_hyper,
    draw_counts,
    sample_multinomial,
)
from msroute.policies.costs import CostEstimate, CostEstimateMode, check_cost_estimate
from msroute.policies.duals import (
    ApproachabilityDual,
    DualConstruction,
    Surrogate,
    aggregate_spend,
    check_construction,
    check_surrogate,
    cost_scale,
)
from msroute.policies.floors import choose_floors, choose_gamma
from msroute.policies.live_step import learn_one, route_one
from msroute.policies.omd_variants import (
    ESTIMATORS,
    FLOORS,
    VARIANTS,
    floor_at,
    make_estimator,
)
from msroute.policies.warm import RewardPrior

__all__ = ["ApproachabilityDual", "OMDApproachability"]

EtaSchedule = Literal["fixed", "anytime"]


class OMDApproachability(BasePolicy):
    """Online Mirror Descent with Approachability constraints (Algorithm 1), batched over runs.

    Every decision: draw M experts i.i.d. from ``q`` (steps d-e) and let the dual take one step
    with ``u_t = C^T q_t`` (steps a-b): the constraint side needs nothing but the played
    distribution, so it moves when the decision is made (docs/architecture.md). Every feedback:
    accumulate a gradient estimate at ``q_t``, the decision's own distribution (step g). With an
    eligibility mask the distribution played, logged and divided by is ``q`` restricted to the
    eligible experts and renormalized. After every ``B`` feedbacks of a context, solve the QP (6)
    with the batch-averaged gradient, the current dual and the floor of the step (step c).
    ``batch = 1`` is the plain per-round algorithm. With immediate feedback (``update`` after
    each ``select``) and ``variant="paper"`` this is Algorithm 1 exactly.

    The gradient estimator and the floor schedule are pieces a *variant* chooses
    (``msroute.policies.omd_variants``): ``variant="paper"`` is Algorithm 1 as printed (the
    importance-weighted ``(r_t - b_t) count_{t,i} / q_{t,i}`` with ``b_t`` the mean of all
    strictly earlier rewards of the context, and the fixed floor ``gamma``); the default
    ``"model"`` adds the exact gradient of a fitted reward model as a control variate and lets
    the floor decay as ``gamma / sqrt(n)``. Both keep the dual and the cut of every QP step,
    hence feasibility.

    The dual's construction is a choice (``dual=``): by default the scale-invariant one of
    ``msroute.policies.duals``, whose feasibility does not depend on the units a user picks
    for each cost; ``dual="paper"`` is the single cut ``(C w) . q <= h_S(w)`` as written.

    Parameters
    ----------
    problem : Problem or sequence of Problem
        One instance shared by all runs, or one per run.
    horizon : int
        T, used by the default ``eta``.
    n_runs : int, optional
    seed : int or SeedSequence, optional
    gamma : float, optional
        The exploration floor: every expert's share is at least ``gamma`` at every step (given,
        it holds under either floor schedule). By default it adapts to the bounds
        (``msroute.Problem.exploration_floor``): the paper's ``1/(10K)`` (Section 6.2)
        wherever that is feasible with slack, else half the largest floor at which Assumption 1
        holds, so that any bounds some routing with every share > 0 meets are accepted (a
        budget just above the cheapest routing, a $5 expert among cheap ones); with the
        decaying floor and no ``gamma``, no floor holds beyond the decaying one. A batch shares
        the smallest floor of its runs.
    explore : float, optional
        The decaying floor's start (``floor="decay"`` only): the n-th QP step's floor is
        ``max(gamma, explore / sqrt(n))``. Default: the adaptive floor above (or ``gamma``
        where that is larger). A floor that holds keeps every expert logged often enough for
        off-policy evaluation (``msroute.evaluate``) and costs about ``K gamma`` of the traffic
        routed at random; a decaying one costs nothing in the long run and supports
        estimates only of routings near the logged one (docs/router.md).
    eta : float, optional
        Proximal parameter; default ``eta_mult * sqrt(2 T K M (1/gamma + M - 1))``
        (Theorem 1's ``eta*`` scaled by ``eta_mult``).
    eta_mult : float, optional
        The multiplier; default the variant's: 0.05 for "paper" (Section 6.3; 0.03 in Section
        6.2), 0.001 for "model" (0.0003 with the anytime schedule).
    batch : int, default 10
        B, rounds per QP step.
    dual_step : float, default 0.05
        The dual OGD step ``eta_ogd``.
    dual : {"invariant", "paper"}, default "invariant"
        The approachability dual and its cut (``msroute.policies.duals``): per-coordinate
        normalized units and one cut per active bound, so that feasibility does not depend on
        the units of the costs; or Algorithm 1's single aggregated cut as written.
    cost_estimate : {"distinct", "draws", "table"}, default "distinct"
        Learn each expert's cost per call from the realized costs passed to ``update``
        (``msroute.policies.costs``), counting each distinct routed expert once or once per
        draw, and use the estimates in ``C``; "table" uses the table only (the paper).
    cost_prior_weight : float, default 10.0
        How many calls the table counts for in the estimates.
    surrogate : {"linear", "exact"}, optional
        What the dual approaches (``msroute.policies.duals``): the paper's ``C^T q`` in the
        surrogate box ``S`` (safe by the sandwich (2), and conservative), or the exact expected
        realized cost of the team in ``S_ori`` with a safety margin (spends up to the bounds).
        Default "linear" (Algorithms 1 and 2), except with more than one context, M >= 2 and
        the invariant dual: "exact". There the aggregate cut holds the contexts' total
        expected spend, and the linear surrogate's ``C^T q <= u / M`` keeps a team of M to a
        fraction of its budget (0.68-0.82 of it on the packaged LLM table at M = 2,
        docs/llm-routing.md).
    budget_margin : float, optional
        The box is shrunk by ``budget_margin`` standard deviations of the time-averaged
        realized cost so far, ``z sd / sqrt(n)`` after ``n`` rounds (divided by M in the linear
        surrogate's per-draw units; at most a tenth of each finite bound), so that the spend of
        a run that converges onto a bound ends at or below it rather than a hair above: a
        budget holds in every run, not only on average over runs. Default 3.0 with more than
        one context (the aggregate cut spends up to the bound), 0.0 without (the paper's
        Algorithm 1, whose linear surrogate is already conservative for M >= 2).
    margin : float, default 3.0
        The exact surrogate's safety margin when ``budget_margin`` is 0, in standard deviations
        of the time-averaged realized cost over the horizon.
    check_feasible : bool, default True
        Check Assumption 1 for every run at construction (an LP per distinct problem), so an
        impossible instance fails now with ``InfeasibleConstraintsError`` (naming the smallest
        feasible budget) instead of later inside a QP step. False skips the LPs, and the
        default floor is then ``1/(10K)``.
    n_contexts : int, default 1
    eta_schedule : {"fixed", "anytime"}, optional
    variant : {"model", "paper"}, optional
        The named choice of gradient estimator and floor schedule (default "model";
        ``msroute.policies.omd_variants.VARIANTS``).
    estimator : {"importance", "model"}, optional
        Overrides the variant's gradient estimator.
    floor : {"fixed", "decay"}, optional
        Overrides the variant's floor schedule.
    ix : float, optional
        Implicit-exploration offset of the model estimator's residual weights (>= 0; default
        ``ix_per_k / K``; 0 makes the estimate unbiased).
    ix_per_k : float, optional
        The offset times K where ``ix`` is not given (>= 0; default the variant's: 0.5 for
        "model"). Relative to K, it follows the expert set when a router adds or removes an
        expert; at 1 a residual weighs at most ``K``, what it weighs under uniform routing.
    model_fit : {"auto", "dense", "sparse"}, default "auto"
        How the model estimator fits its reward model: the exact dense solve of a (K + 1)^2
        Gram matrix, or sparse co-occurrence counts solved by conjugate gradient (memory and
        time grow with the pairs of experts routed together, not with K^2); "auto" is dense
        up to ``msroute.policies.omd_variants.DENSE_FIT_MAX_EXPERTS`` experts.

    Examples
    --------
    >>> from msroute import Constraints, Problem
    >>> p = Problem([[1.0], [0.0], [0.5]], m_draws=2, constraints=Constraints(upper=[1.0]))
    >>> pol = OMDApproachability(p, horizon=100, n_runs=4, seed=0)
    >>> pol.select().draws.shape
    (4, 2)
    """

    name: ClassVar[str] = "omd"
    has_propensity: ClassVar[bool] = True
    #: The learned state (persistence); pending decisions carry their own context and q.
    _state_attrs: ClassVar[tuple[str, ...]] = (
        "_q",
        "_grad",
        "_visits",
        "_steps",
        "_reward_sum",
        "dual",
        "cost_est",
        "_cost_sum",
        "_n_feedback",
        "estimator",
        "prior",
    )
    #: Per expert: the routing distribution and its gradient, shape (R, X, K). The reward
    #: estimator's arrays are sized by K but are not per expert: they start afresh.
    _expert_axes: ClassVar[dict[str, int]] = {"_q": -1, "_grad": -1}
    #: The approachability dual is learned against the bounds: it restarts when they change.
    _constraint_attrs: ClassVar[tuple[str, ...]] = ("dual",)
    #: Rewards and realized costs are ``>= 0`` (``check_state``; q is checked by
    #: ``validate_state``).
    _state_rules: ClassVar[dict[str, str]] = {
        "_reward_sum": "nonnegative",
        "_cost_sum": "nonnegative",
    }
    _default_schedule: ClassVar[EtaSchedule] = "fixed"
    _default_batch: ClassVar[int] = 10
    _default_eta_mult: ClassVar[float] = 0.05
    _default_variant: ClassVar[str] = "model"
    #: The surrogate when none is given; None: "exact" with contexts, M >= 2 and the invariant
    #: dual, else "linear".
    _default_surrogate: ClassVar[Surrogate | None] = None

    def __init__(
        self,
        problem: Problem | Sequence[Problem] | ProblemBatch,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        gamma: float | None = None,
        explore: float | None = None,
        eta: float | None = None,
        eta_mult: float | None = None,
        batch: int | None = None,
        dual_step: float = 0.05,
        check_feasible: bool = True,
        n_contexts: int = 1,
        eta_schedule: EtaSchedule | None = None,
        dual: DualConstruction = "invariant",
        cost_estimate: CostEstimateMode = "distinct",
        cost_prior_weight: float = 10.0,
        surrogate: Surrogate | None = None,
        margin: float = 3.0,
        budget_margin: float | None = None,
        variant: str | None = None,
        estimator: str | None = None,
        floor: str | None = None,
        ix: float | None = None,
        ix_per_k: float | None = None,
        model_fit: str = "auto",
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        k, m = self.n_experts, self.m_draws
        self.n_contexts = check_positive_int(n_contexts, "n_contexts")
        self.gamma = choose_gamma(self.problem_batch.problems, gamma, k, check_feasible)
        self.batch_size = check_positive_int(
            self._default_batch if batch is None else batch, "batch"
        )
        schedule = self._default_schedule if eta_schedule is None else eta_schedule
        if schedule not in ("fixed", "anytime"):
            raise InvalidValueError(f"eta_schedule == {schedule!r}, must be 'fixed' or 'anytime'")
        self.eta_schedule: EtaSchedule = schedule
        self.variant = self._default_variant if variant is None else variant
        if self.variant not in VARIANTS:
            raise InvalidValueError(
                f"variant == {self.variant!r}, must be one of {', '.join(VARIANTS)}"
            )
        spec = VARIANTS[self.variant]
        self.estimator_name = spec.estimator if estimator is None else estimator
        if self.estimator_name not in ESTIMATORS:
            raise InvalidValueError(
                f"estimator == {self.estimator_name!r}, must be one of {', '.join(ESTIMATORS)}"
            )
        self.floor = spec.floor if floor is None else floor
        if self.floor not in FLOORS:
            raise InvalidValueError(f"floor == {self.floor!r}, must be one of {', '.join(FLOORS)}")
        # Where a floor is given, its start is recorded with the constructor arguments
        # (``explore``): it tells a recorded ``gamma`` of this meaning from one saved before it
        # (``_recorded_kwargs``).
        self.gamma, self.floor_min = choose_floors(
            self.floor, self.gamma, gamma, explore, k, self.problem_batch.problems, check_feasible
        )
        if self.floor == "decay" and (gamma is not None or explore is not None):
            self._init_kwargs.setdefault("explore", self.gamma)
        if ix is None:
            per_k = spec.ix_per_k if ix_per_k is None else ix_per_k
            ix = check_hyper(per_k, "ix_per_k", strict=False) / k
        self.ix = check_hyper(ix, "ix", strict=False)
        variant_mult = spec.eta_mult if schedule == "fixed" else spec.anytime_eta_mult
        if eta_mult is None:
            eta_mult = self._default_eta_mult if variant_mult is None else variant_mult
        self.eta_mult = check_hyper(eta_mult, "eta_mult")
        g2 = k * m * (1.0 / self.gamma + m - 1.0)  # G^2 of Corollary 2's proof
        if eta is not None:
            self.eta = check_hyper(eta, "eta")
        elif schedule == "fixed":
            self.eta = self.eta_mult * float(np.sqrt(2.0 * self.horizon * g2))
        else:
            self.eta = self.eta_mult * 2.0 * float(np.sqrt(g2))  # a of Corollary 2
        self.dual_step = check_hyper(dual_step, "dual_step")
        r, x = self.n_runs, self.n_contexts
        self._q: FloatArray = self._start(check_feasible)
        self._grad: FloatArray = np.zeros((r, x, k))
        self._visits: IntArray = np.zeros((r, x), dtype=np.int64)
        self._steps: IntArray = np.zeros((r, x), dtype=np.int64)
        self._reward_sum: FloatArray = np.zeros((r, x))
        b = self.problem_batch
        self._cost_sum: FloatArray = np.zeros((r, b.n_costs))
        self._n_feedback = 0
        self._scale = cost_scale(b.costs, b.lo_ori, b.hi_ori)
        if budget_margin is None:
            budget_margin = 3.0 if self.n_contexts > 1 else 0.0
        self.budget_margin = float(budget_margin)
        if surrogate is None:
            surrogate = self._default_surrogate
        if surrogate is None:  # contexts spend on the aggregate; a team's cost is nonlinear
            aggregate = self.n_contexts > 1 and m > 1 and dual == "invariant"
            surrogate = "exact" if aggregate else "linear"
        # Saved with the policy, so that a file resumes with the surrogate it ran.
        self._init_kwargs.setdefault("surrogate", surrogate)
        self.dual = self._make_dual(check_construction(dual), check_surrogate(surrogate), margin)
        self._ctx0: IntArray = np.zeros(r, dtype=np.int64)  # the context of context-free runs
        # One cost estimate per (run, context), row r X + x: the table is every context's
        # prior, and each context learns its own prompts' costs.
        self.cost_est = CostEstimate(
            np.repeat(b.costs, x, axis=0) if x > 1 else b.costs,
            np.repeat(self._scale, x, axis=0) if x > 1 else self._scale,
            mode=check_cost_estimate(cost_estimate),
            prior_weight=cost_prior_weight,
        )
        self.estimator = make_estimator(self.estimator_name, r, x, k, m, self.ix, model_fit)
        self.prior = RewardPrior(r, x, k, self.batch_size, b.n_costs)  # ``warm_start``'s

    @classmethod
    def _recorded_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Recorded constructor arguments (a policy file's, a journal's) as this msroute reads
        them: those of a decaying floor recorded before ``explore`` existed name its start
        ``gamma``; it is their ``explore``, and no floor held beyond it."""
        kwargs = super()._recorded_kwargs(kwargs)
        variant = kwargs.get("variant") or cls._default_variant
        schedule = kwargs.get("floor") or (VARIANTS[variant].floor if variant in VARIANTS else "")
        if schedule == "decay" and "explore" not in kwargs and kwargs.get("gamma") is not None:
            return {**kwargs, "explore": kwargs["gamma"], "gamma": None}
        return kwargs

    def _start(self, check: bool) -> FloatArray:
        """The first q of every run and context, (R, X, K): uniform (Algorithm 1), or where the
        floor had to adapt the feasible point nearest to it (`msroute.Problem.start_point`);
        ``check=False`` starts uniform without an LP."""
        r, x, k = self.n_runs, self.n_contexts, self.n_experts
        if not check:
            return np.full((r, x, k), 1.0 / k)
        starts = {id(p): p.start_point() for p in self.problem_batch.problems}
        rows = np.stack([starts[id(p)] for p in self.problem_batch.problems])
        return np.repeat(rows[:, None, :], x, axis=1)

    def state(self) -> dict[str, object]:
        """What the router has done so far, in the user's units, per run.

        ``decisions`` and ``feedback`` (rounds with feedback), and per run ``bounds``: each
        bound's running average realized cost, its slack and whether it binds
        (``msroute.metrics.bound_report``), and ``enforced``: the bounds the dual's cut(s)
        currently enforce (+1 upper, -1 lower, 0 none, per cost coordinate).
        """
        b = self.problem_batch
        avg = self._cost_sum / max(self._n_feedback, 1)
        names = b.problems[0].cost_names
        return {
            "decisions": self.t,
            "feedback": self._n_feedback,
            "bounds": bound_report(avg, b.lo_ori, b.hi_ori, names),
            "enforced": self.dual.active().tolist(),
        }

    @classmethod
    def _legacy_kwargs(cls, format_version: int, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Files before format version 4 ran the linear surrogate in every case (the default
        then), and name no surrogate."""
        if format_version < 4 and "surrogate" not in kwargs:
            return {**kwargs, "surrogate": "linear"}
        return kwargs

    def _make_dual(
        self, construction: DualConstruction, surrogate: Surrogate, margin: float
    ) -> ApproachabilityDual:
        b = self.problem_batch
        if construction == "paper":
            if surrogate != "linear":
                raise InvalidValueError("surrogate='exact' needs dual='invariant'")
            tol = 1e-12 * max(1.0, b.cbar)
            return ApproachabilityDual(b.lo, b.hi, self.dual_step, tol, construction="paper")
        # The exact surrogate approaches the original box, the linear one the box S.
        lo, hi = (b.lo, b.hi) if surrogate == "linear" else (b.lo_ori, b.hi_ori)
        return ApproachabilityDual(
            lo,
            hi,
            self.dual_step,
            1e-12,
            construction="invariant",
            scale=self._scale,
            has_lower=np.isfinite(b.lo_ori),
            has_upper=np.isfinite(b.hi_ori),
            surrogate=surrogate,
            m_draws=self.m_draws,
            horizon=self.horizon,
            margin=margin,
            budget_margin=self.budget_margin,
        )

    # ------------------------------------------------------------------ diagnostics
    @property
    def q(self) -> FloatArray:
        """Current routing policies: (R, K), or (R, X, K) for more than one context (a copy)."""
        return self._q[:, 0, :].copy() if self.n_contexts == 1 else self._q.copy()

    def q_named(self, run: int = 0, context: int = 0) -> dict[str, float]:
        """One run's routing distribution as a mapping expert name -> probability."""
        return self.problem_batch.problems[run].named(self._q[run, context])

    @property
    def w(self) -> FloatArray:
        """Current approachability dual, shape (R, d) (a copy; normalized units by default)."""
        return self.dual.w.copy()

    def warm_start(
        self,
        q: FloatArray,
        w: FloatArray,
        costs: FloatArray,
        mean: FloatArray,
        spread: FloatArray,
        support: FloatArray,
        strength: float,
        runs: IntArray | None = None,
        price: FloatArray | None = None,
        fade: bool = False,
        explored: bool = False,
    ) -> None:
        """Start runs from an eval table, before any decision (``msroute.warmstart`` builds the
        arguments from a table; ``msroute.policies.warm`` says what each becomes).

        Parameters
        ----------
        q : ndarray, shape (R', X, K)
            Each context's first routing (the table's certified optimum, ``msroute.warmstart``).
        w : ndarray, shape (R', d)
            The dual's start (in its units: ``ApproachabilityDual.w``).
        costs : ndarray, shape (R', X, K, d)
            Each context's cost estimates (the table's mean per-call costs), counted as
            ``strength`` calls where the table has the context: OMD's and its pacer's.
        mean, spread, support : ndarray, shape (R', X, K), (R', X, K) and (R', X)
            The table's mean reward per expert and its variance, and its prompts per
            context.
        strength : float
            ``N``, the pseudo-counts (>= 0).
        runs : ndarray of int, optional
            The runs to start (default all, R' = R).
        price : ndarray, shape (R', d), optional
            The optimum's multipliers (reward per unit of each cost: > 0 where an upper bound
            binds, < 0 where a lower one does); given, the prior anchors the learner
            (``msroute.policies.warm``, "The anchor").
        fade : bool, default False
            The price fades with the spend's slack (``msroute.policies.warm``, "The margin").
        explored : bool, default False
            The decaying floor counts the prior's pseudo-rounds as explored
            (``msroute.policies.warm``, "The floor").
        """
        if self.t or self._n_feedback:
            raise InvalidStateError("warm_start: the policy has decided already; start it first")
        at = np.arange(self.n_runs) if runs is None else np.asarray(runs, dtype=np.int64)
        r, x, k = at.size, self.n_contexts, self.n_experts
        cold = self._q[at].copy()
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (r, x, k) or np.any(q < 0) or np.any(np.abs(q.sum(-1) - 1) > SIMPLEX_ATOL):
            raise InvalidValueError(f"warm_start: q must be {(r, x, k)} routing distributions")
        self._q[at] = q
        self.dual.w[at] = w
        counted = np.where(np.asarray(support) > 0, float(strength), 0.0)
        table_costs = np.asarray(costs, dtype=np.float64)
        self.cost_est.start_at(at, x, table_costs, counted)
        if self.pacer is not None:  # the pacer books each context at the table's costs too
            self.pacer.est.start_at(at, x, table_costs, counted)
        if price is not None:
            price = np.asarray(price, dtype=np.float64)
            if price.shape != (r, self.n_costs) or not np.all(np.isfinite(price)):
                raise InvalidValueError(
                    f"warm_start: price must be {(r, self.n_costs)} finite multipliers"
                )
        self.prior.set(
            at,
            np.asarray(mean),
            np.asarray(spread),
            np.asarray(support),
            strength,
            cold,
            price,
            fade,
            explored,
        )
        if self.prior.on and self.estimator_name == "model":  # the model starts at the table
            cells = np.repeat(at, x), np.tile(np.arange(x), r)
            self.estimator.refit(*cells, self.prior.cells(*cells))

    def validate_state(self, prefix: str) -> None:
        """A loaded q is a routing distribution on the floored simplex: ``q >= gamma``, the
        floor that holds (a decaying one, ``msroute.policies.omd_variants``, lets q go below
        its start while it stays positive) and each row sums to one
        (``msroute.policies.check_state``)."""
        q = self._q
        floor = self.floor_min
        k = q.shape[-1]
        worst = float(np.max(np.abs(q.sum(axis=-1) - 1.0))) if q.size else 0.0
        if q.size and (q.min() < floor - SIMPLEX_ATOL or worst > SIMPLEX_ATOL * max(1, k)):
            raise InvalidStateError(
                f"state entry {prefix + '_q'!r} is off the floored simplex (min {q.min():.6g} "
                f"against the floor {floor:.6g}, largest deviation of a sum from one {worst:.3g})"
            )

    def _after_resize(self, added: list[int]) -> None:
        """After ``resized``: the new experts at the floor gamma, the kept ones rescaled to the
        rest of the mass, then projected onto the floored simplex (exact, no cut), so that q is
        a routing distribution of the new expert set that keeps the learned proportions."""
        q = self._q
        kept = np.setdiff1d(np.arange(q.shape[-1]), added)
        out = np.empty_like(q)
        out[..., added] = self.gamma
        kept_mass = q[..., kept].sum(axis=-1, keepdims=True)
        out[..., kept] = q[..., kept] * ((1.0 - len(added) * self.gamma) / kept_mass)
        self._q = np.ascontiguousarray(project_step(out, self.gamma))

    # ------------------------------------------------------------------ algorithm
    def _cell(self, context: IntArray | None) -> tuple[slice, int] | tuple[IntArray, IntArray]:
        """The index of each run's (run, context) entry of the (R, X, ...) state: (R, ...).

        When every run is in the same context (context-free, or one run) it is basic indexing,
        a view: cheaper than gathering, and an in-place update writes through.
        """
        if context is None:
            return (slice(None), 0)
        if self.n_runs == 1:
            return (slice(None), int(context[0]))
        return (self._rows, context)

    def _select(
        self, context: IntArray | None, eligible: BoolArray | None
    ) -> tuple[IntArray, FloatArray]:
        q = self._q[self._cell(context)]
        if eligible is None:
            q = q.copy()  # the decision's own distribution
        else:
            q = q * eligible
            q /= q.sum(axis=1, keepdims=True)
        draws = sample_multinomial(self.streams.uniform(self.m_draws), q, eligible)
        self.dual.step(self.dual.measure(q, self._costs_in(context)))
        return draws, q

    def _context_costs(self, runs: IntArray, ctx: IntArray) -> FloatArray:
        """Costs (R, K, d): each run's estimates for the context of its QP step (context 0 for
        the runs without one)."""
        if self.n_runs == 1:  # basic indexing: the context's row, a view
            x = int(ctx[0])
            return self.cost_est.costs[x : x + 1]
        r, x = self.n_runs, self.n_contexts
        by_ctx = self.cost_est.costs.reshape(r, x, *self.cost_est.costs.shape[1:])
        at = self._ctx0.copy()
        at[runs] = ctx
        return np.asarray(by_ctx[self._rows, at])

    def _aggregate_spend(self, runs: IntArray, ctx: IntArray) -> tuple[FloatArray, FloatArray]:
        """The aggregate cut of the runs' QP steps: the context's share ``p_x`` (R',) and the
        other contexts' spend ``O = sum_{y != x} p_y u_y(q_y)`` (R', d), ``u`` what the dual
        measures (``C^T q``, or the team's expected cost ``e(q)``).

        Algorithm 2's cut ``w . u_x(q) <= h_S(w)`` holds each context's own spend to the box
        whenever the dual is active: one budget per context, a smaller class than the
        contextual comparator (``msroute.core.oracle.contextual_opt``), whose budget is on the
        aggregate. With the contexts' shares ``p_y`` (visits so far), the cut for the context
        ``x`` being updated holds ``p_x u_x(q) + O`` instead (``ApproachabilityDual.cuts``): a
        cheap context may then route to a dear expert where the others leave room; a cut out
        of reach is moved to its reach by the projection.
        """
        r, x = self.n_runs, self.n_contexts
        k, d = self.cost_est.costs.shape[1:]
        if r == 1:  # views of the run's rows, not gathers
            return self._aggregate_spend_one(int(ctx[0]))
        by_ctx = self.cost_est.costs.reshape(r, x, k, d)[runs]
        visits = self._visits[runs].astype(np.float64)
        if self.prior.on:  # a warm start's pseudo-visits in the table's proportions
            visits = visits + self.prior.share[runs]
        share = visits / np.maximum(visits.sum(axis=1, keepdims=True), 1.0)  # (R', X)
        measured = self.dual.measure(self._q[runs].reshape(-1, k), by_ctx.reshape(-1, k, d))
        spend = measured.reshape(runs.shape[0], x, d) * share[..., None]
        own = np.arange(runs.shape[0])
        return share[own, ctx], spend.sum(axis=1) - spend[own, ctx]

    def _aggregate_spend_one(self, x: int) -> tuple[FloatArray, FloatArray]:
        """``_aggregate_spend`` of one run on views of its rows: the batch's floats (tested)."""
        visits = self._visits[0].astype(np.float64)  # (X,)
        if self.prior.on:
            visits = visits + self.prior.share[0]
        by_ctx = self.cost_est.costs.reshape(self.n_contexts, *self.cost_est.costs.shape[1:])
        return aggregate_spend(self._q[0], by_ctx, visits, x, self.dual.measure)

    def _costs_in(self, context: IntArray | None) -> FloatArray:
        """The cost estimates (R, K, d) of each run's context (context 0 where None)."""
        if self.n_contexts == 1:
            return self.cost_est.costs
        if self.n_runs == 1 and context is not None:  # basic indexing: row x, a view
            x = int(context[0])
            return self.cost_est.costs[x : x + 1]
        r, x = self.n_runs, self.n_contexts
        by_ctx = self.cost_est.costs.reshape(r, x, *self.cost_est.costs.shape[1:])
        if context is None:
            return np.asarray(by_ctx[:, 0])
        return np.asarray(by_ctx[self._rows, context])

    def _update(self, decision: Decision, reward: FloatArray, cost: FloatArray) -> None:
        q_play = decision.probs
        if q_play is None or q_play.shape != (self.n_runs, self.n_experts):
            raise InvalidValueError(
                f"decision.probs must be the (R, K) = {(self.n_runs, self.n_experts)} "
                "distribution the draws came from (OMD divides by it)"
            )
        ctx = self._ctx0 if decision.context is None else decision.context
        cell = self._cell(decision.context)
        visits = self._visits[cell]
        baseline = None
        if self.estimator.uses_baseline:
            baseline = np.where(visits > 0, self._reward_sum[cell] / np.maximum(visits, 1), 0.0)
        visits = visits + 1
        counts = draw_counts(decision.draws, self.n_experts)
        damp = None
        if self.prior.on and self.estimator_name == "model" and self.prior.anchor.any():
            damp = self.prior.damping(self._rows, ctx)  # an anchored prior's residuals
        self._grad[cell] += self.estimator.estimate(
            self._rows, ctx, q_play, decision.draws, counts, reward, baseline, damp
        )
        self._reward_sum[cell] += reward
        if self.prior.on:
            self.prior.observe(self._rows, ctx, decision.draws, reward)
        self._visits[cell] = visits
        if self.n_contexts == 1:
            self.cost_est.update(decision.draws, cost, counts)
        else:
            rows = ctx if self.n_runs == 1 else self._rows * self.n_contexts + ctx  # row r X + x
            self.cost_est.update(decision.draws, cost, counts, rows)
        self.dual.observe(cost)
        self._cost_sum += cost
        self._n_feedback += 1
        due = (visits % self.batch_size == 0).nonzero()[0]
        if due.size:
            self._qp_step(due, ctx[due])

    def select_trusted(self, context: IntArray | None, eligible: BoolArray | None) -> Decision:
        """``BasePolicy.select_trusted``; one run at M = 1 decides in one compiled call once the
        live router has loaded it (``msroute.policies.live_step``: the same floats)."""
        decision = route_one(self, context, eligible)
        return super().select_trusted(context, eligible) if decision is None else decision

    def update_trusted(self, decision: Decision, reward: FloatArray, cost: FloatArray) -> None:
        """``BasePolicy.update_trusted``; one run at M = 1 learns in one compiled call once the
        live router has loaded it (``msroute.policies.live_step``: the same floats)."""
        if not learn_one(self, decision, reward, cost):
            super().update_trusted(decision, reward, cost)

    def _qp_step(self, runs: IntArray, ctx: IntArray) -> None:
        """The proximal QP (6) for the given runs' current contexts."""
        self._steps[runs, ctx] += 1
        if self.eta_schedule == "fixed":
            eta: FloatArray | float = self.eta
        else:  # Corollary 2: eta = a sqrt(n_x) at the n-th step of context x
            eta = (self.eta * np.sqrt(self._step_count(runs, ctx) + 1.0))[:, None]
        y = self._q[runs, ctx] + self._grad[runs, ctx] / (self.batch_size * eta)
        q0 = self._q[runs, ctx]
        costs, aggregate = self.cost_est.costs, None
        if self.n_contexts > 1:
            costs, aggregate = self._context_costs(runs, ctx), self._aggregate_spend(runs, ctx)
        if self.prior.on and self.prior.anchor.any():  # an anchored prior's price
            y = y - self.prior.priced(runs, ctx, self.dual, q0, costs[runs], aggregate) / eta
        if self.floor == "fixed":
            self._q[runs, ctx] = self.dual.project(y, self.gamma, costs, runs, q0, aggregate)
        else:  # one projection per floor: the runs at the same step share theirs
            steps = self._floor_count(runs, ctx)
            for step in np.unique(steps):
                sel = np.flatnonzero(steps == step)
                gamma = max(self.floor_min, floor_at(self.gamma, self.floor, float(step)))
                part = None if aggregate is None else (aggregate[0][sel], aggregate[1][sel])
                self._q[runs[sel], ctx[sel]] = self.dual.project(
                    y[sel], gamma, costs, runs[sel], q0[sel], part
                )
        self._grad[runs, ctx] = 0.0
        if self.prior.on:
            refuted = self.prior.refresh(runs, ctx)
            if refuted.any():  # the context restarts cold
                back = runs[refuted], ctx[refuted]
                self._q[back] = project_step(self.prior.cold[back], self.floor_min)
            self.estimator.refit(runs, ctx, self.prior.cells(runs, ctx))
        else:
            self.estimator.refit(runs, ctx)

    def _floor_count(self, runs: IntArray, ctx: IntArray) -> FloatArray | IntArray:
        """The QP steps the decaying floor of the runs' contexts counts, a warm start's included
        (``RewardPrior.floor_offset``)."""
        steps = self._steps[runs, ctx]
        if not self.prior.on:
            return steps
        return np.asarray(steps + self.prior.floor_offset(runs, ctx, self.gamma), dtype=np.float64)

    def _step_count(self, runs: IntArray, ctx: IntArray) -> FloatArray | IntArray:
        """The QP steps of the runs' contexts, a warm start's included (``RewardPrior``)."""
        steps = self._steps[runs, ctx]
        if not self.prior.on:
            return steps
        return np.asarray(steps + self.prior.offset[runs, ctx], dtype=np.float64)
