"""The approachability dual of OMD (Algorithms 1 and 2) and the cut it imposes on the QP (6).

Two constructions, chosen with ``construction=``:

``"invariant"`` (the default)
    Feasibility does not depend on the units of the cost coordinates, by design:

    * **The dual lives in normalized units.** Coordinate ``j`` is divided by its scale ``s_j``
      (``cost_scale``, the largest cost of the column), so ``w`` runs online gradient ascent
      on the unit ball against ``f_t(w) = w . (u_t / s) - h_{S/s}(w)``. Multiplying a cost
      column and its bounds by any factor leaves every quantity the dual sees unchanged.
      Lemma 5 holds as written in these units: the average surrogate cost approaches ``S`` in the
      weighted distance ``|(u - x) / s|``, which is unit-free.
    * **A weight may only point where a bound is.** ``w_j >= 0`` where coordinate ``j`` has no
      lower bound and ``w_j <= 0`` where it has no upper bound (the maximiser of Lemma 4 always
      lies in this cone, because ``0 <= u_j <= cbar``), so a coordinate without the matching
      bound never carries weight.
    * **One cut per active bound.** Where ``w_j > 0`` the QP gets the half-space
      ``C_j . q <= hi_j``, where ``w_j < 0`` the half-space ``C_j . q >= lo_j``; where ``w_j = 0``
      none. The paper's single cut ``sum_j w_j (C_j . q - x*_j) <= 0`` is their weighted sum, so
      every point that meets the cuts meets the paper's cut: ``f_t(w_t) <= 0`` at the projected
      ``q``, which is all Lemma 5's proof uses. But the sum also lets the slack of one bound pay
      for the violation of another (a coordinate far inside its box, with a small weight of the
      wrong size for its units, cancels part of the budget's term): the separate cuts cannot.
      Each cut is unit-free (it scales with its own column), and only the *sign* of ``w_j``
      decides it, so the weight's size in its units no longer matters.

``"paper"``
    Algorithm 1 as written: ``w`` in the units of the costs, the single aggregated half-space
    ``(C w) . q <= h_S(w)``. Kept for the record; it reproduces the paper's construction bit for
    bit, including its dependence on the units.

The cost the dual approaches, chosen with ``surrogate=`` (with the invariant construction):

``"linear"`` (the default)
    The paper's surrogate ``u = C^T q`` and box ``S`` of Section 4.2 (``[0, u_j / M]``,
    ``[l_j, cbar]``). The sandwich (2) makes it safe, and loose: the realized cost of a team
    counts each distinct expert once, so it is usually well below ``M C^T q``.
``"exact"``
    The exact expected realized cost of the team, ``e_j(q) = sum_i c_ij (1 - (1 - q_i)^M)``,
    approached in the original box ``S_ori`` itself, shrunk by a safety margin of ``margin``
    standard deviations of the time average (``z sd(x_j) / sqrt(T)``, with ``sd`` the running
    standard deviation of the realized cost) so that the noise of the realized average does not
    carry it over a bound. ``e_j`` is concave, so a covering bound ``e_j(q) >= l_j`` is a
    convex constraint and a packing bound ``e_j(q) <= u_j`` is not. The QP cuts each active
    bound by the tangent of ``e_j`` at the current ``q``: for a packing bound the tangent lies
    above ``e_j``, so the cut is a convex inner approximation (every point meeting it meets the
    bound exactly); for a covering bound it is the outer linearisation of a convex set, exact to
    second order in the step, and the dual, which sees the exact ``e_j`` of the played ``q``,
    corrects what remains.

Tie rule (docs/architecture.md, "Decided readings"), in both: where ``w_j == 0`` every point of
``S_j`` maximizes; we take ``x*_j = clip(u_j, S_j)``, so the dual stays exactly at zero while the
surrogate cost is inside ``S``, and a cost within ``tol`` of the box counts as inside (rounding in
``C^T q`` cannot switch a bound on).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Literal, get_args

import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.core.bounds import support_box, support_point_box
from msroute.core.problem_batch import surrogate_cost
from msroute.core.qp.projection import _project_step_unchecked
from msroute.core.qp.projection_cuts import solve_cuts, surely_empty
from msroute.errors import EmptyFeasibleSetError, InvalidValueError
from msroute.policies._approach_rows import observe_rows, step_rows

__all__ = [
    "DUAL_CONSTRUCTIONS",
    "SURROGATES",
    "ApproachabilityDual",
    "DualConstruction",
    "Surrogate",
    "aggregate_spend",
    "check_construction",
    "check_surrogate",
    "cost_scale",
    "expected_team_cost",
]

DualConstruction = Literal["invariant", "paper"]
Surrogate = Literal["linear", "exact"]
#: The accepted values of ``surrogate``.
SURROGATES: tuple[str, ...] = get_args(Surrogate)
#: The accepted values of ``construction``.
DUAL_CONSTRUCTIONS: tuple[str, ...] = get_args(DualConstruction)


def check_construction(value: object) -> DualConstruction:
    """Validate the ``dual`` / ``construction`` keyword ("invariant" or "paper")."""
    if value == "invariant":
        return "invariant"
    if value == "paper":
        return "paper"
    raise InvalidValueError(
        f"dual == {value!r}, must be 'invariant' (per-coordinate units, one cut per active "
        "bound) or 'paper' (Algorithm 1 as written: one aggregated cut)"
    )


def check_surrogate(value: object) -> Surrogate:
    """Validate the ``surrogate`` keyword ("linear" or "exact")."""
    if value == "linear":
        return "linear"
    if value == "exact":
        return "exact"
    raise InvalidValueError(
        f"surrogate == {value!r}, must be 'linear' (the paper's C^T q in the box S) or 'exact' "
        "(the expected realized cost of the team in S_ori, with a safety margin)"
    )


def expected_team_cost(q: FloatArray, costs: FloatArray, m_draws: int) -> FloatArray:
    """``E[l] = sum_i c_i (1 - (1 - q_i)^M)``, each distinct expert of the team once: (R, d)."""
    with np.errstate(divide="ignore"):  # q_i = 1 (one eligible expert): log1p(-1) = -inf, hit 1
        hit = -np.expm1(m_draws * np.log1p(-np.minimum(q, 1.0)))
    return np.asarray(np.matmul(hit[:, None, :], costs)[:, 0, :], dtype=np.float64)


def expected_team_cost_grad(q: FloatArray, costs: FloatArray, m_draws: int) -> FloatArray:
    """The gradient of ``expected_team_cost``: ``M c_ij (1 - q_i)^(M-1)``, shape (R, K, d)."""
    slope = m_draws * (1.0 - q) ** (m_draws - 1)
    return np.asarray(costs * slope[:, :, None], dtype=np.float64)


def cost_scale(costs: FloatArray, lo_ori: FloatArray, hi_ori: FloatArray) -> FloatArray:
    """The unit of each cost coordinate of each run: its largest cost, shape (R, d).

    It scales with the column: multiplying ``costs[:, :, j]`` and the bounds of ``j`` by ``a > 0``
    multiplies ``s_j`` by ``a``. A column of zeros falls back to its largest finite bound, and to
    1 when it has none (a coordinate that no routing can move).

    Parameters
    ----------
    costs : ndarray, shape (R, K, d)
    lo_ori, hi_ori : ndarray, shape (R, d)
        The original bounds (infinite where absent).
    """
    top = costs.max(axis=1)
    bounds = np.maximum(
        np.where(np.isfinite(lo_ori), np.abs(lo_ori), 0.0),
        np.where(np.isfinite(hi_ori), np.abs(hi_ori), 0.0),
    )
    out = np.where(top > 0.0, top, np.where(bounds > 0.0, bounds, 1.0))
    return np.asarray(out, dtype=np.float64)


class ApproachabilityDual:
    """The dual player of Algorithm 1: projected online gradient ascent on the unit ball.

    Each round it receives the surrogate cost ``u_t = C^T q_t`` (in the user's units) and takes
    one step on ``f_t(w) = w . u_t - h_S(w)`` (in normalized units under ``"invariant"``), whose
    supergradient is ``u_t - x*`` with ``x*`` a maximizer of ``w . x`` over the box ``S``.
    Lemma 4 makes ``max_{|w| <= 1} f(w)`` the distance of ``u`` to ``S``, so a no-regret ``w``
    drives the average surrogate cost into ``S`` (Lemma 5). ``project`` is the QP (6) with
    the cut(s) of the current ``w``. See the module docstring for the two constructions.

    Parameters
    ----------
    lo, hi : ndarray, shape (R, d)
        The surrogate box ``S`` of each run (``ProblemBatch.lo``, ``.hi``).
    step : float
        OGD step size (the paper's ``eta_ogd = 0.05``).
    tol : float
        Width of the "on the bound" band of the tie rule (in the dual's units).
    construction : {"invariant", "paper"}, default "invariant"
    scale : ndarray, shape (R, d), optional
        Units of the coordinates (``cost_scale``); required with ``"invariant"``.
    has_lower, has_upper : ndarray of bool, shape (R, d), optional
        Which coordinates have a lower / upper bound (required with ``"invariant"``).
    surrogate : {"linear", "exact"}, default "linear"
        What the dual approaches: ``C^T q`` in ``S``, or the team's expected realized cost
        (``lo, hi`` then the original bounds).
    m_draws, horizon : int
        M, and T for the exact surrogate's margin over the horizon.
    margin : float, default 3.0
        That margin, in standard deviations (used when ``budget_margin`` is 0).
    budget_margin : float, default 0.0
        The anytime margin: ``budget_margin`` standard deviations of the time-averaged
        realized cost so far (per draw for the linear surrogate), at most a tenth of each
        finite bound (``target``).

    Attributes
    ----------
    w : ndarray, shape (R, d)
        The dual; under ``"invariant"`` in normalized units (``w_j`` weighs ``u_j / s_j``).
    """

    #: What changes as the dual learns (persistence; the rest comes from the constructor).
    _state_attrs: ClassVar[tuple[str, ...]] = ("w", "_n_obs", "_cost_mean", "_cost_m2")

    def __init__(
        self,
        lo: FloatArray,
        hi: FloatArray,
        step: float,
        tol: float,
        *,
        construction: DualConstruction = "paper",
        scale: FloatArray | None = None,
        has_lower: np.ndarray | None = None,
        has_upper: np.ndarray | None = None,
        surrogate: Surrogate = "linear",
        m_draws: int = 1,
        horizon: int = 1,
        margin: float = 3.0,
        budget_margin: float = 0.0,
    ) -> None:
        self.construction: DualConstruction = check_construction(construction)
        self.surrogate: Surrogate = check_surrogate(surrogate)
        if self.surrogate == "exact" and self.construction != "invariant":
            raise InvalidValueError("surrogate='exact' needs the invariant dual (dual='invariant')")
        self.m_draws = m_draws
        self.horizon = horizon
        self.margin = float(margin)
        if not np.isfinite(self.margin) or self.margin < 0:
            raise InvalidValueError(f"margin == {margin}, must be a finite number >= 0")
        self.budget_margin = float(budget_margin)
        self._units = m_draws if self.surrogate == "linear" else 1  # the margin's divisor
        if not np.isfinite(self.budget_margin) or self.budget_margin < 0:
            raise InvalidValueError(
                f"budget_margin == {budget_margin}, must be a finite number >= 0"
            )
        # Running moments of the realized cost (the exact surrogate's safety margin).
        self._n_obs = 0
        self._cost_mean: FloatArray = np.zeros_like(lo)
        self._cost_m2: FloatArray = np.zeros_like(lo)
        self.step_size = step
        self.tol = tol
        self.lo = lo
        self.hi = hi
        # The budget margin's cap, a tenth of each finite bound (the margin never exceeds it).
        finite_hi, finite_lo = (
            np.where(np.isfinite(hi), hi, 0.0),
            np.where(np.isfinite(lo), lo, 0.0),
        )
        self.pad_cap: FloatArray = 0.1 * np.maximum(np.abs(finite_hi), np.abs(finite_lo))
        if self.construction == "invariant":
            if scale is None or has_lower is None or has_upper is None:
                raise InvalidValueError("the invariant dual needs scale, has_lower and has_upper")
            self.scale: FloatArray = scale
            self._lower = np.asarray(has_lower, dtype=bool)
            self._upper = np.asarray(has_upper, dtype=bool)
            self._lower_cone = _Cone(self._lower)
            self._upper_cone = _Cone(self._upper)
            if lo.shape[-1] > 128:
                raise InvalidValueError(
                    f"the invariant dual takes at most 128 cost coordinates, got {lo.shape[-1]}"
                )
            # The open sides never move.
            self._open_lo = _OpenSide(self._lower, -np.inf)
            self._open_hi = _OpenSide(self._upper, np.inf)
            # What the step reads, as (R, d) arrays, and for one run as lists (``step_rows``).
            self._step_args = tuple(
                np.ascontiguousarray(np.broadcast_to(x, lo.shape))
                for x in (
                    scale,
                    self._open_lo(lo),
                    self._open_hi(hi),
                    self.pad_cap,
                    self._lower,
                    self._upper,
                )
            )
            self._step_lists = tuple(x.tolist() for x in self._step_args)
        self.w: FloatArray = np.zeros_like(lo)

    # ------------------------------------------------------------------ what it approaches
    def measure(self, q: FloatArray, costs: FloatArray) -> FloatArray:
        """The cost vector the dual approaches for routing ``q`` (R, K): ``C^T q`` or ``E[l]``."""
        if self.surrogate == "linear":
            return surrogate_cost(q, costs)
        return expected_team_cost(q, costs, self.m_draws)

    def observe(self, cost: FloatArray) -> None:
        """Record a realized cost (R, d): the exact surrogate's margin follows its spread."""

        if self.surrogate == "linear" and self.budget_margin == 0.0:
            return
        self._n_obs += 1
        mean, m2 = self._cost_mean, self._cost_m2
        if mean.shape[0] == 1:  # one run: Python floats (a live router imports no numba)
            mean_l, m2_l = [[0.0] * mean.shape[1]], [[0.0] * mean.shape[1]]
            observe_rows(cost.tolist(), mean.tolist(), m2.tolist(), self._n_obs, mean_l, m2_l)
            self._cost_mean, self._cost_m2 = np.array(mean_l), np.array(m2_l)
            return
        from msroute.policies._compiled.dual import observe_cost  # numba, on first use

        self._cost_mean, self._cost_m2 = np.empty_like(mean), np.empty_like(m2)
        observe_cost(
            np.ascontiguousarray(cost, dtype=np.float64),
            mean,
            m2,
            self._n_obs,
            self._cost_mean,
            self._cost_m2,
        )

    def target(self) -> tuple[FloatArray, FloatArray]:
        """The box the dual currently approaches, in the user's units (margin included).

        A side without a bound is open (infinite) under the invariant construction.
        """
        if self.construction == "paper":
            return self.lo, self.hi
        lo, hi = self.lo, self.hi
        if self.budget_margin > 0.0:
            if self._n_obs > 1:
                # z sd / sqrt(n) of the time-averaged realized cost so far, in the box's units
                # (per draw for the linear surrogate: the realized cost is at most M C^T q),
                # capped at a tenth of each finite bound.
                sd = np.sqrt(self._cost_m2 / (self._n_obs - 1))
                pad = self.budget_margin * sd / (self._units * np.sqrt(self._n_obs))
                pad = np.minimum(pad, self.pad_cap)
                lo, hi = lo + pad, hi - pad
        elif self.surrogate == "exact":
            sd = np.sqrt(self._cost_m2 / max(self._n_obs - 1, 1))
            pad = self.margin * sd / np.sqrt(self.horizon)
            lo, hi = lo + pad, hi - pad
        return self._open_lo(lo), self._open_hi(hi)

    # ------------------------------------------------------------------ the dual's step
    def step(self, u: FloatArray) -> None:
        """One ascent step for every run with surrogate costs ``u`` (R, d), in the user's units."""
        if self.construction == "invariant":
            self._step_invariant(u)
            return
        w = self.w
        grad = u - support_point_box(w, u, self.lo, self.hi)
        grad[(w == 0.0) & (np.abs(grad) <= self.tol)] = 0.0
        w = w + self.step_size * grad
        norm = np.sqrt((w * w).sum(axis=1, keepdims=True))
        self.w = w / np.maximum(norm, 1.0)  # inside the ball: w / 1.0, which is w exactly

    def _step_invariant(self, u: FloatArray) -> None:
        """The invariant construction's step (``msroute.policies._approach_rows``): in Python
        floats for one run, compiled for a batch; the target box is the step's own (margin
        included)."""
        scale, lo, hi, cap, lower, upper = self._step_args
        pad_sd, pad_den = 0.0, 1.0
        if self.budget_margin > 0.0:
            if self._n_obs > 1:
                pad_sd, pad_den = self.budget_margin, self._units * math.sqrt(self._n_obs)
        elif self.surrogate == "exact":  # the margin over the horizon
            lo, hi = self.target()
        w = self.w
        if w.shape[0] == 1:  # one run: Python floats (a live router imports no numba)
            scale_l, lo_l, hi_l, cap_l, lower_l, upper_l = self._step_lists
            if self.surrogate == "exact" and self.budget_margin == 0.0:
                lo_l, hi_l = lo.tolist(), hi.tolist()
            out = [[0.0] * w.shape[1]]
            step_rows(
                w.tolist(),
                u.tolist(),
                scale_l,
                lo_l,
                hi_l,
                pad_sd,
                pad_den,
                self._cost_m2.tolist(),
                self._n_obs,
                cap_l,
                lower_l,
                upper_l,
                self.tol,
                self.step_size,
                out,
            )
            self.w = np.array(out)
            return
        from msroute.policies._compiled.dual import approach_step  # numba, on first use

        out_a = np.empty_like(w)
        approach_step(
            w,
            np.ascontiguousarray(u, dtype=np.float64),
            scale,
            np.ascontiguousarray(np.broadcast_to(lo, w.shape)),
            np.ascontiguousarray(np.broadcast_to(hi, w.shape)),
            pad_sd,
            pad_den,
            self._cost_m2,
            self._n_obs,
            cap,
            lower,
            upper,
            self.tol,
            self.step_size,
            out_a,
        )
        self.w = out_a

    # ------------------------------------------------------------------ the cut(s)
    def halfspace(self, costs: FloatArray, runs: IntArray) -> tuple[FloatArray, FloatArray]:
        """The paper's QP cut ``a . q <= b`` of some runs: ``a = C w`` (R', K), ``b = h_S(w)``."""
        w = self.w[runs]
        a = np.matmul(costs[runs], w[:, :, None])[:, :, 0]
        b = support_box(w, self.lo[runs], self.hi[runs])
        return np.asarray(a, dtype=np.float64), b

    def cuts(
        self,
        costs: FloatArray,
        runs: IntArray,
        q0: FloatArray | None = None,
        aggregate: tuple[FloatArray, FloatArray] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """One cut per active bound of some runs: ``a`` (R', d, K), ``b`` (R', d).

        Linear surrogate: row ``j`` is ``C_j . q <= hi_j`` where ``w_j > 0``,
        ``-C_j . q <= -lo_j`` where ``w_j < 0`` and the empty cut ``0 . q <= 0`` where
        ``w_j = 0``. Exact surrogate: the same with ``e_j`` replaced by its tangent at ``q0``
        (R', K), the routing before the step. The box is shrunk by the margin. With
        ``aggregate = (p, O)`` (a context's share (R',) and the other contexts' spend
        (R', d)) the bound holds the contexts' aggregate ``p u(q) + O`` instead of ``u(q)``.
        """
        w = self.w[runs]
        sign = np.sign(w)  # (R', d)
        lo, hi = self.target()
        lo, hi = lo[runs], hi[runs]
        if self.surrogate == "linear":
            normal = np.swapaxes(costs[runs], 1, 2)
            if aggregate is not None:  # p C . q + O <= bound
                share, others = aggregate
                normal = normal * share[:, None, None]
                lo, hi = lo - others, hi - others
        else:
            if q0 is None:
                raise InvalidValueError("the exact surrogate's cuts need q0, the current routing")
            grad = expected_team_cost_grad(q0, costs[runs], self.m_draws)  # (R', K, d)
            normal = np.swapaxes(grad, 1, 2)
            # e(q) ~ e(q0) + g . (q - q0): the bound on e becomes g . q <= bound - e(q0) + g . q0.
            offset = np.einsum("rjk,rk->rj", normal, q0) - expected_team_cost(
                q0, costs[runs], self.m_draws
            )
            if aggregate is not None:  # p (e(q0) + g . (q - q0)) + O <= bound
                share, others = aggregate
                normal = normal * share[:, None, None]
                offset = offset * share[:, None] - others
            lo, hi = lo + offset, hi + offset
        a = normal * sign[:, :, None]
        with np.errstate(invalid="ignore"):  # an open side (inf) is never selected
            b = np.where(w > 0, hi, np.where(w < 0, -lo, 0.0))
        return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)

    def project(
        self,
        y: FloatArray,
        gamma: float,
        costs: FloatArray,
        runs: IntArray,
        q0: FloatArray | None = None,
        aggregate: tuple[FloatArray, FloatArray] | None = None,
    ) -> FloatArray:
        """The QP (6) of some runs: the projection of ``y`` (R', K) under the current cut(s).

        Parameters
        ----------
        y : ndarray, shape (R', K)
        gamma : float
        costs : ndarray, shape (R, K, d)
            The cost matrices of all runs (the table, or the online estimates).
        runs : ndarray of int, shape (R',)
        q0 : ndarray, shape (R', K), optional
            The routing before the step (the exact surrogate linearizes there).
        aggregate : (ndarray (R',), ndarray (R', d)), optional
            The aggregate over contexts (``cuts``).
        """
        if self.construction == "paper":
            a1, b1 = self.halfspace(costs, runs)
            try:
                return _project_step_unchecked(y, gamma, a1, b1)
            except EmptyFeasibleSetError:  # the cut at its reach: the face nearest to it
                return _project_step_unchecked(y, gamma, a1, np.maximum(b1, _reach(a1, gamma)))
        a, b = self.cuts(costs, runs, q0, aggregate)
        try:
            return solve_cuts(y, gamma, a, b)[0]
        except EmptyFeasibleSetError:
            if q0 is not None:
                a, b = self._toward_reach(a, b, gamma, costs, runs, q0, aggregate)
            return self._project_unreachable(y, gamma, a, b)

    def _toward_reach(
        self,
        a: FloatArray,
        b: FloatArray,
        gamma: float,
        costs: FloatArray,
        runs: IntArray,
        q0: FloatArray,
        aggregate: tuple[FloatArray, FloatArray] | None,
    ) -> tuple[FloatArray, FloatArray]:
        """The cuts of a step whose cuts miss the floored simplex: each cut out of reach is
        replaced by one on the *true* cost (``C_j . q``, the aggregate's where there is one)
        that asks the step to close half the gap between the routing's cost and the least
        cost the floor allows, ``C_j . q0 - (C_j . q0 - reach_j) / 2``.

        A tangent of the exact surrogate out of reach says nothing about where the cost is
        lower: at a routing near a dear expert's vertex its slope on that expert is near 0
        (``M c_i (1 - q_i)^(M-1)``), so the tangent's cheapest expert is the dear one. The
        true cost's cheapest expert is the cheap one, and half the gap per step moves the
        routing toward feasibility without jumping to a vertex (the spend itself is held by
        the pacer, ``msroute.policies.pacing``, meanwhile)."""
        reach = _reach(a, gamma)
        out = b < reach
        sign = np.sign(self.w[runs])[:, :, None]
        normal = np.swapaxes(costs[runs], 1, 2) * sign  # (R', d, K): the true cost, signed
        if aggregate is not None:
            normal = normal * aggregate[0][:, None, None]
        now = np.einsum("rjk,rk->rj", normal, q0)
        least = _reach(normal, gamma)
        a = np.where(out[:, :, None], normal, a)
        b = np.where(out, now - 0.5 * np.maximum(now - least, 0.0), b)
        return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)

    @staticmethod
    def _project_unreachable(
        y: FloatArray, gamma: float, a: FloatArray, b: FloatArray
    ) -> FloatArray:
        """The step when the (estimated) costs put a bound out of reach: get as close as possible.

        Learned costs can make a bound unreachable that the table met (Assumption 1 is checked
        on the table): realized costs above the bounds round after round are valid feedback and
        must not crash a step. Each cut is then moved to the nearest value it can reach (as
        ``project`` does with the paper's single cut), which routes as much as the floor
        allows toward meeting it; if the bounds still conflict, the cut of the bound broken
        most (in its own units) is kept alone.

        A row with one cut out of reach whose cheapest expert is unique has a single point
        that meets it as nearly as the floor allows, the vertex ``gamma`` everywhere and the
        rest of the mass on that expert: where the other cuts hold there, that vertex is the
        step (the limit of the projection as the moved cut tends to its reach). Solving the
        moved cut numerically instead is a nearly degenerate QP, whose multiplier grows as
        the inverse of the distance to the reach. Where the cut kept alone is still too close
        to its reach for the solver (cheapest experts tied), the step is that limit on the
        face of the tied experts (``_cheapest_face``).
        """
        width = np.abs(a).max(axis=-1)
        reach = _reach(a, gamma)
        out_of_reach = b < reach
        b = np.maximum(b, reach + 1e-9 * width)
        vertex = _cheapest_vertex(a, gamma, out_of_reach, b)
        if vertex is not None and bool(np.all(np.isfinite(vertex[:, 0]))):
            return vertex
        try:
            if surely_empty(gamma, a, b):  # what solve_cuts would raise after a long search
                raise EmptyFeasibleSetError("the moved cuts miss the floored simplex together")
            q = solve_cuts(y, gamma, a, b)[0]
            if vertex is not None:  # the rows the vertex settles keep it
                done = np.isfinite(vertex[:, 0])
                q[done] = vertex[done]
            return q
        except EmptyFeasibleSetError:
            q0 = solve_cuts(y, gamma, a[:, :0], b[:, :0])[0]
            gap = (np.einsum("rjk,rk->rj", a, q0) - b) / np.where(width > 0, width, 1.0)
            keep = gap.argmax(axis=-1)
            rows = np.arange(y.shape[0])
            single, bound = a[rows, keep][:, None], b[rows, keep][:, None]
            try:
                return solve_cuts(y, gamma, single, bound)[0]
            except EmptyFeasibleSetError:  # within the solver's tolerance of its reach
                return _cheapest_face(y, single[:, 0], gamma)

    def active(self) -> np.ndarray:
        """Which bounds the dual currently enforces: (R, d) ints, +1 upper, -1 lower, 0 none."""
        return np.sign(self.w).astype(np.int64)


def _cheapest_vertex(
    a: FloatArray, gamma: float, out_of_reach: BoolArray, b: FloatArray
) -> FloatArray | None:
    """Per row (R', K), the floored simplex's vertex on the cheapest expert of its one cut out
    of reach, where that expert is unique and every cut holds there (``b``: the moved
    bounds); NaN rows elsewhere, None when no row has one."""
    one = out_of_reach.sum(axis=-1) == 1
    if not one.any():
        return None
    k = a.shape[-1]
    rows = np.arange(a.shape[0])
    cut = a[rows, out_of_reach.argmax(axis=-1)]  # (R', K): each row's cut out of reach
    cheapest = cut.argmin(axis=-1)
    unique = (cut == cut[rows, cheapest][:, None]).sum(axis=-1) == 1
    q = np.full(cut.shape, gamma)
    q[rows, cheapest] += max(1.0 - k * gamma, 0.0)
    holds = np.all(np.einsum("rjk,rk->rj", a, q) <= b, axis=-1)
    ok = one & unique & holds
    if not ok.any():
        return None
    q[~ok] = np.nan
    return q


def _cheapest_face(y: FloatArray, cut: FloatArray, gamma: float) -> FloatArray:
    """Per row, the projection of ``y`` (R', K) onto the face of the floored simplex where the
    cut ``cut`` (R', K) is at its reach: ``gamma`` off the experts of least cost, and the rest
    of the mass on those (the projection of their ``y`` onto the simplex of that mass). The
    limit of the projection under the cut as its bound tends to its reach."""
    k = y.shape[1]
    mass = max(1.0 - k * gamma, 0.0)
    q = np.full(y.shape, gamma)
    for r in range(y.shape[0]):
        tied = np.flatnonzero(cut[r] == cut[r].min())
        q[r, tied] += _simplex_projection(y[r, tied] - gamma, mass)
    return q


def _simplex_projection(v: FloatArray, mass: float) -> FloatArray:
    """The Euclidean projection of ``v`` (n,) onto ``{p >= 0, sum p = mass}`` (sorting)."""
    if mass <= 0.0:
        return np.zeros_like(v)
    u = np.sort(v)[::-1]
    excess = np.cumsum(u) - mass
    rho = int(np.flatnonzero(u - excess / np.arange(1, v.size + 1) > 0)[-1])
    return np.asarray(np.maximum(v - excess[rho] / (rho + 1), 0.0), dtype=np.float64)


def _reach(a: FloatArray, gamma: float) -> FloatArray:
    """The smallest ``a . q`` over the floored simplex, per cut: ``a`` (..., K) -> (...)."""
    k = a.shape[-1]
    out = gamma * a.sum(axis=-1) + max(1.0 - k * gamma, 0.0) * a.min(axis=-1)
    return np.asarray(out, dtype=np.float64)


class _OpenSide:
    """``x -> where(bounded, x, fill)`` for a fixed mask of bounded coordinates: ``x`` itself
    where every coordinate is bounded, one constant array where none is (the common cases)."""

    def __init__(self, bounded: BoolArray, fill: float) -> None:
        self.bounded = bounded
        self.fill = fill
        self.every = bool(bounded.all())
        self.open: FloatArray | None = None
        if not bounded.any():  # shared by every call: read-only, so no caller can change it
            self.open = np.full(bounded.shape, fill)
            self.open.setflags(write=False)

    def __call__(self, x: FloatArray) -> FloatArray:
        if self.every:
            return x
        if self.open is not None:
            return self.open
        return np.where(self.bounded, x, self.fill)


class _Cone:
    """``w -> where(bounded, w, clamp(w, 0))`` for a fixed mask of bounded coordinates, skipping
    the mask when all sides agree (the common case: every bound present, or none on that side).
    """

    def __init__(self, bounded: BoolArray) -> None:
        self.bounded = bounded
        self.every = bool(bounded.all())
        self.none = not bounded.any()

    def __call__(self, w: FloatArray, clamp: np.ufunc) -> FloatArray:
        if self.every:
            return w
        if self.none:
            return np.asarray(clamp(w, 0.0), dtype=np.float64)
        return np.where(self.bounded, w, clamp(w, 0.0))


def aggregate_spend(
    q: FloatArray,
    costs: FloatArray,
    visits: FloatArray,
    x: int,
    measure: Callable[[FloatArray, FloatArray], FloatArray],
) -> tuple[FloatArray, FloatArray]:
    """The aggregate cut of one run's QP step in context ``x`` (``OMDApproachability.
    _aggregate_spend``): the context's share ``p_x`` (1,) and the other contexts' spend
    ``sum_{y != x} p_y u_y(q_y)`` (1, d), from the contexts' routings ``q`` (X, K), cost
    estimates ``costs`` (X, K, d), visits (X,) as floats and what the dual ``measure``s."""
    share = visits / np.maximum(visits.sum(), 1.0)
    spend = measure(q, costs) * share[:, None]  # (X, d)
    return share[x : x + 1], (spend.sum(axis=0) - spend[x])[None, :]
