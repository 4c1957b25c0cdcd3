"""The constrained MSR problem: costs, constraint boxes, support function and feasibility.

Section 4.2 of the paper replaces the original target box ``S_ori`` on the *expected realized*
cost by a box ``S`` on the *linear surrogate* cost ``C^T q``, which the sandwich (2)
``C^T q <= E[l_t] <= M C^T q`` makes a safe inner approximation:

* upper-bound coordinate ``(-inf, u_j]`` becomes ``[0, u_j / M]``;
* lower-bound coordinate ``[l_j, inf)`` becomes ``[l_j, cbar]``;
* a coordinate with both bounds becomes ``[l_j, u_j / M]``, one with none ``[0, cbar]``.

Lemma 2 then transfers distances: ``dist(phi, S_ori) <= M dist(varphi, S)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from msroute._validation import (
    COST_MAX,
    MIN_FLOOR,
    FloatArray,
    adaptive_gamma,
    as_float_array,
    as_real,
    check_cost_range,
    check_gamma,
    check_positive_int,
    default_gamma,
)
from msroute.core._floor import BoundRow, extreme_cost
from msroute.core._floor import max_floor as max_floor_lp
from msroute.core.bounds import (
    box_distance,
    floored_reach,
    support_box,
    support_point_box,
    unreachable_bounds,
)
from msroute.errors import InfeasibleConstraintsError, InvalidTypeError, InvalidValueError

__all__ = ["Constraints", "Problem"]

Bound = float | None
_REAL = (int, float, np.integer, np.floating)


def _bound_tuple(values: Sequence[Bound] | ArrayLike | None, name: str) -> tuple[Bound, ...] | None:
    if values is None:
        return None
    if isinstance(values, int | float):
        raise InvalidTypeError(f"{name} must be a sequence with one entry per cost coordinate")
    out: list[Bound] = []
    for j, v in enumerate(values):  # type: ignore[arg-type]
        if v is None:
            out.append(None)
            continue
        if isinstance(v, bool | np.bool_) or not isinstance(v, _REAL):
            raise InvalidTypeError(f"{name}[{j}] must be a number or None, got {v!r}")
        fv = float(v)
        if not np.isfinite(fv):
            # NaN is never "no bound": a NaN that reached a bound is a bug upstream.
            raise InvalidValueError(f"{name}[{j}] == {fv}; use None for 'no bound'")
        out.append(check_cost_range(fv, f"{name}[{j}]"))
    return tuple(out)


@dataclass(frozen=True)
class Constraints:
    """Long-term bounds on the time-averaged realized cost vector (the box ``S_ori``).

    Parameters
    ----------
    upper : sequence of float or None, length d, optional
        Packing bounds ``u_j`` ("at most"); ``None`` entries mean no upper bound. A bound lies
        in the range of costs and bounds, ``|u_j| <= 1e12`` in the cost's own unit.
    lower : sequence of float or None, length d, optional
        Covering bounds ``l_j`` ("at least"); ``None`` entries mean no lower bound (same range).
    names : sequence of str, optional
        Names of the cost coordinates, used in messages and reports.

    Examples
    --------
    >>> c = Constraints(upper=[2.4, 2.0])
    >>> c.n_costs
    2
    >>> Constraints(upper=[1.0, None], lower=[None, 0.5]).upper_array().tolist()
    [1.0, inf]
    """

    upper: Sequence[Bound] | None = None
    lower: Sequence[Bound] | None = None
    names: Sequence[str] | None = field(default=None)

    def __post_init__(self) -> None:
        upper = _bound_tuple(self.upper, "upper")
        lower = _bound_tuple(self.lower, "lower")
        if upper is None and lower is None:
            raise InvalidValueError("Constraints needs at least one of upper= or lower=")
        if upper is not None and lower is not None and len(upper) != len(lower):
            raise InvalidValueError(
                f"upper has {len(upper)} entries and lower has {len(lower)}; "
                "give one entry (or None) per cost coordinate in both"
            )
        d = len(upper) if upper is not None else len(lower)  # type: ignore[arg-type]
        if d == 0:
            raise InvalidValueError("Constraints need at least one cost coordinate")
        names = None if self.names is None else tuple(str(n) for n in self.names)
        if names is not None and len(names) != d:
            raise InvalidValueError(f"names has {len(names)} entries for {d} cost coordinates")
        if names is not None and len(set(names)) != d:
            twice = sorted({n for n in names if names.count(n) > 1})
            raise InvalidValueError(
                f"names: each cost coordinate needs its own name; {twice} repeat"
            )
        object.__setattr__(self, "upper", upper)
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "names", names)
        lo, hi = self.lower_array(), self.upper_array()
        bad = np.flatnonzero(lo > hi)
        if bad.size:
            j = int(bad[0])
            raise InvalidValueError(
                f"lower bound {lo[j]} is above upper bound {hi[j]} on cost coordinate "
                f"{self.coordinate_name(j)}"
            )

    @property
    def n_costs(self) -> int:
        """Number of cost coordinates d."""
        ref = self.upper if self.upper is not None else self.lower
        assert ref is not None  # guaranteed by __post_init__
        return len(ref)

    def upper_array(self) -> FloatArray:
        """Upper bounds as an array, ``+inf`` where there is none."""
        if self.upper is None:
            return np.full(self.n_costs, np.inf)
        return np.array([np.inf if v is None else v for v in self.upper], dtype=np.float64)

    def lower_array(self) -> FloatArray:
        """Lower bounds as an array, ``-inf`` where there is none."""
        if self.lower is None:
            return np.full(self.n_costs, -np.inf)
        return np.array([-np.inf if v is None else v for v in self.lower], dtype=np.float64)

    def coordinate_name(self, j: int) -> str:
        """Human-readable name of cost coordinate ``j``."""
        return f"{j} ({self.names[j]})" if self.names is not None else str(j)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (round-trips through ``Constraints(**d)``)."""
        return {
            "upper": None if self.upper is None else list(self.upper),
            "lower": None if self.lower is None else list(self.lower),
            "names": None if self.names is None else list(self.names),
        }


class Problem:
    """One constrained MSR instance: K experts with cost vectors, M draws, and constraints.

    Parameters
    ----------
    costs : array_like, shape (K, d)
        Cost vector ``c_i`` of each expert, entries in ``[0, cbar]``; ``cbar`` and every bound
        of ``constraints`` lie in the range of costs and bounds, ``|x| <= 1e12`` in the cost's
        own unit (``msroute._validation.COST_MAX``; docs/budgets.md).
    m_draws : int
        Number of i.i.d. draws M from the routing policy each round.
    constraints : Constraints
        The original box ``S_ori``.
    cbar : float, optional
        Upper end of the cost range (Section 4.2); defaults to the largest cost (or 1 if all
        costs are zero).
    expert_names : sequence of str, optional
        One distinct name per expert (row of ``costs``); ``named`` then reads a routing
        distribution as a mapping name -> probability.
    cost_names : sequence of str, optional
        One name per cost coordinate (column), e.g. ``["usd", "in_house"]``; the same as
        ``Constraints(names=...)`` (give either, or both equal).

    Examples
    --------
    >>> p = Problem([[1.0, 1.0], [0.2, 0.0]], m_draws=2, constraints=Constraints(upper=[1.0, 1.0]))
    >>> p.surrogate_box()[1].tolist()
    [0.5, 0.5]
    >>> float(p.support([1.0, -1.0]))
    0.5
    """

    def __init__(
        self,
        costs: ArrayLike,
        m_draws: int,
        constraints: Constraints,
        cbar: float | None = None,
        *,
        expert_names: Sequence[str] | None = None,
        cost_names: Sequence[str] | None = None,
    ) -> None:
        c = as_float_array(costs, "costs", ndim_min=2, ndim_max=2)
        if c.shape[0] < 1 or c.shape[1] < 1:
            raise InvalidValueError(f"costs must have shape (K, d) with K, d >= 1, got {c.shape}")
        if np.any(c < 0):
            i, j = np.argwhere(c < 0)[0]
            raise InvalidValueError(f"costs must be >= 0; costs[{i}, {j}] == {c[i, j]}")
        if np.any(c > COST_MAX):
            i, j = np.argwhere(c > COST_MAX)[0]
            check_cost_range(float(c[i, j]), f"costs[{i}, {j}]")
        if not isinstance(constraints, Constraints):
            raise InvalidTypeError(
                f"constraints must be a Constraints, got {type(constraints).__name__}"
            )
        if constraints.n_costs != c.shape[1]:
            raise InvalidValueError(
                f"constraints have {constraints.n_costs} cost coordinates but costs has "
                f"{c.shape[1]} columns"
            )
        self.costs: FloatArray = c
        self.costs.setflags(write=False)
        self.m_draws = check_positive_int(m_draws, "m_draws")
        self.constraints = constraints
        top = float(c.max())
        if cbar is None:
            cbar = top if top > 0 else 1.0
        cbar = as_real(cbar, "cbar")
        if not np.isfinite(cbar) or cbar < top:
            raise InvalidValueError(f"cbar == {cbar}, must be finite and >= the largest cost {top}")
        self.cbar = check_cost_range(cbar, "cbar")
        lo_ori, hi_ori = constraints.lower_array(), constraints.upper_array()
        self._lo = np.where(np.isfinite(lo_ori), lo_ori, 0.0)
        self._hi = np.where(np.isfinite(hi_ori), hi_ori / self.m_draws, cbar)
        self._lo.setflags(write=False)
        self._hi.setflags(write=False)
        self.expert_names = _names(expert_names, self.n_experts, "expert_names", "experts")
        names = _names(cost_names, self.n_costs, "cost_names", "cost coordinates")
        given = None if constraints.names is None else tuple(constraints.names)
        if names is not None and given is not None and names != given:
            raise InvalidValueError(
                f"cost_names {list(names)} differ from the constraints' names {list(given)}"
            )
        self.cost_names: tuple[str, ...] | None = names if names is not None else given

    # ------------------------------------------------------------------ basic facts
    def named(self, q: ArrayLike) -> dict[str, float]:
        """A routing distribution ``q`` (K,) as a mapping expert name -> probability.

        Experts without names are called ``"0"``, ``"1"``, ...
        """
        qa = as_float_array(q, "q", ndim_min=1, ndim_max=1)
        if qa.shape != (self.n_experts,):
            raise InvalidValueError(f"q must have shape (K,) = ({self.n_experts},), got {qa.shape}")
        names = self.expert_names or tuple(str(i) for i in range(self.n_experts))
        return {n: float(v) for n, v in zip(names, qa.tolist(), strict=True)}

    @property
    def n_experts(self) -> int:
        """Number of experts K."""
        return int(self.costs.shape[0])

    @property
    def n_costs(self) -> int:
        """Number of cost coordinates d."""
        return int(self.costs.shape[1])

    def __repr__(self) -> str:
        return (
            f"Problem(n_experts={self.n_experts}, n_costs={self.n_costs}, "
            f"m_draws={self.m_draws}, constraints={self.constraints!r})"
        )

    def surrogate_box(self) -> tuple[FloatArray, FloatArray]:
        """The surrogate box ``S`` of Section 4.2 as ``(lo, hi)``, each shape (d,)."""
        return self._lo, self._hi

    def original_box(self) -> tuple[FloatArray, FloatArray]:
        """The original box ``S_ori`` as ``(lo, hi)`` with infinite ends where unbounded."""
        return self.constraints.lower_array(), self.constraints.upper_array()

    # ------------------------------------------------------------------ support function
    def support(self, w: ArrayLike) -> FloatArray:
        """Support function ``h_S(w) = max_{x in S} w . x`` (decomposes per coordinate).

        Parameters
        ----------
        w : array_like, shape (..., d)

        Returns
        -------
        ndarray, shape (...)
        """
        wa = as_float_array(w, "w", ndim_min=1)
        self._check_last(wa, "w")
        return support_box(wa, self._lo, self._hi)

    def support_point(self, w: ArrayLike, u: ArrayLike) -> FloatArray:
        """A maximizer ``x* in argmax_{x in S} w . x`` with the tie rule of docs/architecture.md.

        Where ``w_j > 0`` it is ``hi_j``, where ``w_j < 0`` it is ``lo_j``; where ``w_j == 0``
        every point of ``S_j`` maximizes, and we take ``clip(u_j, S_j)`` so that the dual stays
        still while the surrogate cost ``u`` is inside ``S``.
        """
        wa = as_float_array(w, "w", ndim_min=1)
        ua = as_float_array(u, "u", ndim_min=1)
        self._check_last(wa, "w")
        self._check_last(ua, "u")
        return support_point_box(wa, ua, self._lo, self._hi)

    # ------------------------------------------------------------------ distances
    def surrogate_distance(self, u: ArrayLike) -> FloatArray:
        """Euclidean distance of surrogate cost vectors ``u`` (..., d) to ``S``."""
        ua = as_float_array(u, "u", ndim_min=1)
        self._check_last(ua, "u")
        return box_distance(ua, self._lo, self._hi)

    def original_distance(self, x: ArrayLike) -> FloatArray:
        """Euclidean distance of cost vectors ``x`` (..., d) to ``S_ori`` (eq. 5's ``dist``)."""
        xa = as_float_array(x, "x", ndim_min=1)
        self._check_last(xa, "x")
        lo, hi = self.original_box()
        return box_distance(xa, lo, hi)

    def _check_last(self, arr: FloatArray, name: str) -> None:
        if arr.shape[-1] != self.n_costs:
            raise InvalidValueError(
                f"{name} must have {self.n_costs} entries on its last axis (one per cost "
                f"coordinate), got shape {arr.shape}"
            )

    # ------------------------------------------------------------------ feasibility
    def default_gamma(self) -> float:
        """The paper's exploration floor ``gamma = 1/(10K)``."""
        return default_gamma(self.n_experts)

    def _bound_rows(self) -> list[BoundRow]:
        """The bounds the user gave, as bounds of the surrogate box ``S`` on ``C^T q``."""
        lo_ori, hi_ori = self.original_box()
        rows: list[BoundRow] = []
        for j in range(self.n_costs):
            if np.isfinite(hi_ori[j]):
                rows.append((j, "upper", float(self._hi[j])))
            if np.isfinite(lo_ori[j]):
                rows.append((j, "lower", float(self._lo[j])))
        return rows

    def _floor_lp(self) -> tuple[float, FloatArray] | None:
        """`msroute.core._floor.max_floor` of this problem, solved once (the problem is
        immutable)."""
        if not hasattr(self, "_floor_cache"):
            self._floor_cache = max_floor_lp(self.costs, self._bound_rows())
        return self._floor_cache

    def max_floor(self) -> float:
        """The largest floor ``gamma`` at which Assumption 1 holds.

        Assumption 1 at floor ``gamma`` (some ``q >= gamma`` on the simplex with ``C^T q`` in
        ``S``) holds for every floor up to this one and for none above it; it is at most
        ``1/K`` (uniform routing), and 0.0 when only routings that never call some expert meet
        the bounds. Solved as a linear program (scipy's HiGHS), once per problem.

        Raises
        ------
        InfeasibleConstraintsError
            When no routing at all meets the bounds; the message names the smallest feasible
            budget (or largest feasible lower bound) in the user's units.

        Examples
        --------
        >>> p = Problem([[0.001], [0.002], [5.0]], 1, Constraints(upper=[0.0011], names=["usd"]))
        >>> round(p.max_floor(), 12)  # 0.001 + g (0.001 + 4.999) <= 0.0011
        2e-05
        """
        found = self._floor_lp()
        if found is None:
            raise InfeasibleConstraintsError(self._infeasibility_message(None))
        return found[0]

    def accepts_a_floor(self) -> bool:
        """Whether ``exploration_floor`` has one to give (it raises exactly when this is
        False), without composing its error message, which solves further LPs."""
        found = self._floor_lp()
        return found is not None and found[0] >= MIN_FLOOR

    def exploration_floor(self) -> float:
        """The exploration floor msroute uses by default: ``min(1/(10K), max_floor() / 2)``.

        The paper's ``gamma = 1/(10K)`` wherever it is feasible with slack (at most half the
        largest feasible floor: every paper instance), bit for bit; otherwise the floor shrinks
        to half the largest feasible one, so that a budget just above the cheapest routing, or
        an expert far costlier than the rest, is accepted: the floor's forced spend takes at
        most half the room between the cheapest routing and the budget, and the policy learns
        in the other half (docs/concepts.md, "Budgets near the floor").

        Raises
        ------
        InfeasibleConstraintsError
            When no routing with every expert's share above ``MIN_FLOOR`` (1e-9) meets the
            bounds; the message names the smallest feasible budget in the user's units.

        Examples
        --------
        >>> p = Problem([[0.001], [0.002], [5.0]], 1, Constraints(upper=[0.0011], names=["usd"]))
        >>> round(p.exploration_floor(), 12), round(p.default_gamma(), 6)
        (1e-05, 0.033333)
        """
        gamma_max = self.max_floor()
        if gamma_max < MIN_FLOOR:
            raise InfeasibleConstraintsError(self._infeasibility_message(None))
        return adaptive_gamma(self.n_experts, gamma_max)

    def start_point(self) -> FloatArray:
        """Where a learner starts: uniform routing, unless the floor had to adapt, and then
        the point nearest to uniform on the segment from uniform to a routing with the
        largest floor that meets the bounds.

        Wherever the paper's floor ``1/(10K)`` is feasible with slack the start is uniform
        routing (Algorithm 1), so nothing changes there, bit for bit (uniform routing may then
        break a bound for the first batch: the dual corrects it). Under a budget near the
        cheapest routing, or with an expert far costlier than the rest, uniform routing would
        overspend by far (one call of a $5 expert is a thousand queries' worth of a $0.005
        budget); the start meets the bounds instead, and every share stays
        ``>= min(1/K, max_floor())``, above the adaptive floor.

        Returns
        -------
        ndarray, shape (K,)

        Raises
        ------
        InfeasibleConstraintsError
            When no routing meets the bounds (as `max_floor`).
        """
        k = self.n_experts
        uniform = np.full(k, 1.0 / k)
        gamma_max = self.max_floor()  # raises when no routing meets the bounds
        if adaptive_gamma(k, gamma_max) == self.default_gamma():
            return uniform
        found = self._floor_lp()
        assert found is not None
        witness = np.clip(found[1], 0.0, None)
        reach, target = self.costs.T @ uniform, self.costs.T @ witness
        lam = 0.0
        for j, side, v in self._bound_rows():
            over = reach[j] - v if side == "upper" else v - reach[j]
            if over > 0:
                lam = max(lam, min(1.0, over / abs(reach[j] - target[j])))
        q = (1.0 - lam) * uniform + lam * witness
        return np.asarray(q / q.sum(), dtype=np.float64)

    def check_feasible(self, gamma: float | None = None) -> FloatArray:
        """Decide Assumption 1: is there ``q >= gamma`` on the simplex with ``C^T q`` in ``S``?

        Solved as a linear program (scipy's HiGHS).

        Parameters
        ----------
        gamma : float, optional
            The floor. By default the adaptive floor `exploration_floor`: the bounds are
            accepted whenever some routing with every expert's share above 0 meets them.

        Returns
        -------
        ndarray, shape (K,)
            A feasible routing policy (a witness), ``>= gamma``.

        Raises
        ------
        InfeasibleConstraintsError
            When none exists; the message names each bound that cannot be met with the
            smallest budget (or largest lower bound) that can, in the user's units and cost
            names, e.g. ``budget usd <= 0.002 per query is infeasible: the cheapest routing
            costs 0.0034 usd per query``; with an explicit ``gamma``, also the largest floor
            the bounds allow.
        """
        from scipy.optimize import linprog  # scipy loads only when an LP is solved

        k, d = self.costs.shape
        if gamma is None:
            floor = self.exploration_floor()
            found = self._floor_lp()
            assert found is not None  # exploration_floor raised otherwise
            q = np.clip(found[1], floor, None)
            return np.asarray(q / q.sum(), dtype=np.float64)
        gamma = check_gamma(gamma, k)
        lo, hi = self._lo, self._hi
        # Variables: q (K) and slacks s (d) >= 0; minimise sum s subject to
        #   C^T q - s <= hi,  -C^T q - s <= -lo,  sum q = 1,  q >= gamma.
        ct = self.costs.T
        a_ub = np.block([[ct, -np.eye(d)], [-ct, -np.eye(d)]])
        b_ub = np.concatenate([hi, -lo])
        a_eq = np.concatenate([np.ones(k), np.zeros(d)])[None, :]
        cost = np.concatenate([np.zeros(k), np.ones(d)])
        bounds = [(gamma, 1.0)] * k + [(0.0, None)] * d
        res = linprog(
            cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs"
        )
        if res.status != 0:  # always feasible and bounded: numbers HiGHS cannot solve
            raise InfeasibleConstraintsError(
                f"feasibility LP failed: {res.message} (costs as large as {self.cbar:.3g}: "
                "state them in units where they are not extreme)"
            )
        q = np.clip(res.x[:k], gamma, None)
        q = q / q.sum()
        slack = res.x[k:]
        tol = 1e-9 * max(1.0, self.cbar)
        if float(slack.sum()) <= tol:
            return np.asarray(q, dtype=np.float64)
        raise InfeasibleConstraintsError(self._infeasibility_message(gamma, ct @ res.x[:k]))

    def _label(self, j: int) -> str:
        """A cost coordinate as a user calls it: its name, or ``coordinate j``."""
        return self.cost_names[j] if self.cost_names is not None else f"coordinate {j}"

    def _infeasibility_message(self, gamma: float | None, closest: FloatArray | None = None) -> str:
        """Why no routing meets the bounds, bound by bound in the user's units.

        ``gamma=None`` is the adaptive floor: the bounds fail for every floor > 0. Each bound
        that would hold if it alone were relaxed is named with the smallest budget (or largest
        lower bound) that works while the other bounds hold; the bounds of an empty surrogate
        interval (``l > u/M``) are named as such; otherwise the analysis of
        `unreachable_bounds` at the floor explains it in surrogate terms.
        """
        floor = 0.0 if gamma is None else gamma
        lo, hi = self._lo, self._hi
        m = self.m_draws
        lo_ori, hi_ori = self.original_box()
        empty = {
            j: f"coordinate {self.constraints.coordinate_name(j)}: lower bound {lo_ori[j]:.6g} "
            f"is above upper bound / M = {hi[j]:.6g} (M={m}), so the surrogate interval of "
            "Section 4.2 is empty; the bounds must satisfy l <= u/M"
            for j in range(self.n_costs)
            if np.isfinite(lo_ori[j]) and np.isfinite(hi_ori[j]) and lo[j] > hi[j]
        }
        if gamma is None:
            head = "no routing meets the constraints (Assumption 1 fails for every floor > 0): "
        elif gamma == 0:
            head = "no routing meets the constraints: "
        else:
            head = (
                f"no routing policy q >= gamma = {gamma:.6g} meets the constraints "
                "(Assumption 1 fails): "
            )
        if empty:
            return head + "; ".join(empty.values())
        parts = self._budget_parts(gamma)
        if parts:
            reach_min, reach_max = floored_reach(self.costs, floor)
            alone = all(
                reach_min[j] <= v + 1e-12 if side == "upper" else reach_max[j] >= v - 1e-12
                for j, side, v in self._bound_rows()
            )
            detail = "; ".join(parts)
            if alone and len(self._bound_rows()) > 1:
                detail = "each bound is reachable alone but not all together: " + detail
        else:
            if closest is None:
                found = self._floor_lp()
                closest = self.costs.T @ (
                    found[1] if found is not None else np.full(self.n_experts, 1 / self.n_experts)
                )
            detail = unreachable_bounds(
                self.costs,
                floor,
                lo,
                hi,
                closest,
                name=self.constraints.coordinate_name,
                bound=self._surrogate_words,
            )
        if gamma is not None and gamma > 0:
            found = self._floor_lp()
            if found is not None and found[0] >= MIN_FLOOR:
                detail += (
                    f"; the largest floor these bounds allow is gamma = {found[0]:.6g}: pass a "
                    "smaller gamma, or none to let the floor adapt"
                )
        return head + detail

    def _surrogate_words(self, j: int, side: str) -> str:
        """A bound in the surrogate terms of Section 4.2 (``C^T q <= u/M``)."""
        lo_ori, hi_ori = self.original_box()
        if side == "upper":
            return (
                f"upper bound {hi_ori[j]:.6g} needs C^T q <= {self._hi[j]:.6g} "
                f"(= u/M, M={self.m_draws})"
            )
        return f"lower bound {lo_ori[j]:.6g} needs C^T q >= {self._lo[j]:.6g}"

    def _budget_parts(self, gamma: float | None) -> list[str]:
        """Each bound that fails while the others hold, with the bound that would work."""
        rows = self._bound_rows()
        m = self.m_draws
        lo_ori, hi_ori = self.original_box()
        floor = 0.0 if gamma is None else gamma
        routing = "routing" if not gamma else f"routing with every share >= gamma = {gamma:.6g}"
        also = " while meeting the other bounds" if len(rows) > 1 else ""
        parts: list[str] = []
        for i, (j, side, _) in enumerate(rows):
            best = extreme_cost(self.costs, rows, i, floor)
            if best is None:
                continue
            name = self._label(j)
            scale = float(self.costs[:, j].max()) or 1.0
            if side == "upper":
                need, given = m * best, float(hi_ori[j])
                tol = 1e-9 * m * scale
                what = f"budget {name} <= {given:.6g} per query"
                if m == 1:
                    cheapest = f"the cheapest {routing} costs {need:.6g} {name} per query{also}"
                else:
                    cheapest = (
                        f"the cheapest {routing} needs a budget of {need:.6g} {name} per query"
                        f"{also} (M = {m} calls per query, each counted: the safe bound "
                        "M C^T q <= u of Section 4.2)"
                    )
                if given < need - tol:
                    parts.append(f"{what} is infeasible: {cheapest}")
                elif gamma is None and given <= need + tol:
                    parts.append(
                        f"{what} leaves no room to explore: {cheapest}, and only routings "
                        "that never call some expert meet it; give a budget above "
                        f"{need:.6g}"
                    )
            else:
                need, given = best, float(lo_ori[j])
                tol = 1e-9 * scale
                what = f"bound {name} >= {given:.6g} per query"
                most = f"the most {name} any {routing} reaches is {need:.6g} per query{also}"
                if given > need + tol:
                    parts.append(f"{what} is infeasible: {most}")
                elif gamma is None and given >= need - tol:
                    parts.append(
                        f"{what} leaves no room to explore: {most}, and only routings that "
                        f"never call some expert meet it; give a bound below {need:.6g}"
                    )
        return parts


def _names(values: Sequence[str] | None, n: int, arg: str, what: str) -> tuple[str, ...] | None:
    """Validate a list of ``n`` distinct names."""
    if values is None:
        return None
    if isinstance(values, str):
        raise InvalidTypeError(f"{arg} must be a sequence of names, not one string")
    names = tuple(str(v) for v in values)
    if len(names) != n:
        raise InvalidValueError(f"{arg} has {len(names)} entries for {n} {what}")
    if len(set(names)) != n:
        dup = sorted({x for x in names if names.count(x) > 1})
        raise InvalidValueError(f"{arg} repeats {dup}; names must be distinct")
    return names
