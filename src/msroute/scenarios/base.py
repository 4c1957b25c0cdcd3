"""What a scenario is: an instance family, its environment, its cost model and its budget.

A ``Scenario`` draws one ``ScenarioInstance`` per seed (base skills ``V_base`` (N, K),
costs ``C`` (K, d) with named columns), runs it in a stationary Beta environment, and constrains
one named cost coordinate, the *budget*: the time-averaged realized cost of that coordinate
(each distinct routed expert counted once, as everywhere in msroute) must stay at or below the
budget level; the other cost coordinates are recorded, not bounded. ``msroute bench`` sweeps the
budget from the cheapest feasible level to unconstrained (``Scenario.budget_grid``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from msroute._validation import (
    FloatArray,
    check_cost_range,
    default_gamma,
    parse_decimal,
    quoted,
)
from msroute.core.bounds import floored_reach
from msroute.core.problem import Constraints
from msroute.errors import InvalidValueError

__all__ = [
    "NO_BUDGET",
    "Scenario",
    "ScenarioInstance",
    "format_budget",
    "parse_budget",
    "parse_budgets",
]

#: The budget level that means "unconstrained".
NO_BUDGET = "none"


def _readonly(arr: FloatArray) -> FloatArray:
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class ScenarioInstance:
    """One instance of a scenario: base skills and named costs of K experts.

    Parameters
    ----------
    skills_base : ndarray, shape (N, K)
        Mean skill of expert i on reward dimension n, in [0, 1].
    costs : ndarray, shape (K, d)
        Cost of routing to expert i, per cost coordinate, >= 0.
    cost_names : tuple of str, length d
    expert_names : tuple of str, length K
    """

    skills_base: FloatArray
    costs: FloatArray
    cost_names: tuple[str, ...]
    expert_names: tuple[str, ...]

    def __post_init__(self) -> None:
        skills = np.array(self.skills_base, dtype=np.float64)
        costs = np.array(self.costs, dtype=np.float64)
        k = len(self.expert_names)
        if skills.ndim != 2 or skills.shape[1] != k or skills.shape[0] < 1:
            raise InvalidValueError(f"skills_base must have shape (N, {k}), got {skills.shape}")
        if costs.shape != (k, len(self.cost_names)):
            raise InvalidValueError(
                f"costs must have shape ({k}, {len(self.cost_names)}), got {costs.shape}"
            )
        if not (np.all(np.isfinite(skills)) and skills.min() >= 0.0 and skills.max() <= 1.0):
            raise InvalidValueError("skills_base must hold numbers in [0, 1]")
        if not (np.all(np.isfinite(costs)) and costs.min() >= 0.0):
            raise InvalidValueError("costs must hold finite numbers >= 0")
        object.__setattr__(self, "skills_base", _readonly(skills))
        object.__setattr__(self, "costs", _readonly(costs))
        object.__setattr__(self, "cost_names", tuple(str(c) for c in self.cost_names))
        object.__setattr__(self, "expert_names", tuple(str(e) for e in self.expert_names))

    @property
    def n_dims(self) -> int:
        """N, the number of reward dimensions."""
        return int(self.skills_base.shape[0])

    @property
    def n_experts(self) -> int:
        """K, the number of experts."""
        return int(self.skills_base.shape[1])


def parse_budget(level: str) -> float | None:
    """The budget of a level string: an ASCII decimal number in ``[0, 1e12]`` (the range of
    costs and bounds, ``msroute._validation.COST_MAX``), or None for ``"none"``."""
    if level == NO_BUDGET:
        return None
    try:
        value = parse_decimal(level)
    except ValueError:
        raise InvalidValueError(
            f"budget level {quoted(level)} is neither a number nor {NO_BUDGET!r}"
        ) from None
    if not value >= 0.0:  # False for NaN too
        raise InvalidValueError(
            f"budget level {quoted(level)} must be a number >= 0 or {NO_BUDGET!r}"
        )
    return check_cost_range(value, f"budget level {quoted(level)}")


def parse_budgets(levels: Sequence[str]) -> list[float | None]:
    """Each level's budget (``parse_budget``), each budget once: two levels naming the same
    budget (``2`` and ``2.0``) would run, and be reported, twice."""
    values = [parse_budget(level) for level in levels]
    first: dict[float | None, str] = {}
    for level, value in zip(levels, values, strict=True):
        if value in first:
            raise InvalidValueError(
                f"budget levels {quoted(first[value])} and {quoted(level)} are the same budget; "
                "give each once"
            )
        first[value] = level
    return values


def format_budget(value: float | None) -> str:
    """The level string of a budget (``repr`` of the float: exact, round-trips)."""
    return NO_BUDGET if value is None else repr(float(value))


def _expected_distinct_cost(q: FloatArray, cost: FloatArray, m_draws: int) -> float:
    """``E[sum of the cost of the distinct experts among M i.i.d. draws from q]``
    ``= sum_i c_i (1 - (1 - q_i)^M)``."""
    return float(np.sum(cost * (1.0 - (1.0 - q) ** m_draws)))


@dataclass(frozen=True)
class Scenario:
    """A named instance family with its environment, cost model and budget.

    Attributes
    ----------
    name : str
        Registry name (``msroute bench NAME``).
    title : str
        One line for tables and figures.
    make_instance : callable
        ``SeedSequence -> ScenarioInstance``: the instance of one seed (its instance stream).
    m_draws : int
        M, draws per round.
    budget_cost : str
        The cost coordinate the budget bounds (a name of ``cost_names``).
    budget_unit : str
        Unit of the budget, for axes and tables ("$ per query", ...).
    kappa : float
        Concentration of the stationary Beta environment around ``skills_base``.
    params : tuple of (str, value)
        The arguments the scenario was built from (recorded with its results).
    notes : str
        Where the numbers come from (the factory's docstring).
    """

    name: str
    title: str
    make_instance: Callable[[np.random.SeedSequence], ScenarioInstance]
    m_draws: int
    budget_cost: str
    budget_unit: str
    kappa: float = 20.0
    params: tuple[tuple[str, Any], ...] = field(default=())
    notes: str = ""

    def instance(self, seed: np.random.SeedSequence) -> ScenarioInstance:
        """The instance drawn from ``seed`` (an instance stream), checked."""
        inst = self.make_instance(seed)
        if self.budget_cost not in inst.cost_names:
            raise InvalidValueError(
                f"scenario {self.name!r} budgets {self.budget_cost!r}, not a cost of its "
                f"instance ({', '.join(inst.cost_names)})"
            )
        return inst

    def budget_index(self, instance: ScenarioInstance) -> int:
        """Column of the budgeted cost in ``instance.costs``."""
        return instance.cost_names.index(self.budget_cost)

    def constraints(self, instance: ScenarioInstance, level: str) -> Constraints:
        """Upper bound ``level`` on the budgeted cost, no bound on the others."""
        budget = parse_budget(level)
        upper: list[float | None] = [None] * len(instance.cost_names)
        upper[self.budget_index(instance)] = budget
        return Constraints(upper=upper, names=instance.cost_names)

    def budget_grid(self, instances: Sequence[ScenarioInstance], n_levels: int) -> list[str]:
        """``n_levels`` budgets from the cheapest feasible one to where none binds, then
        ``"none"``.

        The cheapest feasible budget of an instance is the smallest ``u`` at which eq. (3)'s
        surrogate box ``[0, u / M]`` contains a policy with the paper's exploration floor
        ``q >= gamma = 1/(10K)`` (Assumption 1, which OMD-Approachability needs): all the free
        mass on the cheapest expert, ``u = M ((1 - K gamma) min_i c_i + gamma sum_i c_i)``.
        The top level is the largest of (a) ``M C^T q*`` with ``q*`` the
        unconstrained optimum of the base skills (certified oracle, eq. (3)) and (b) uniform
        routing's expected realized cost ``sum_i c_i (1 - (1 - 1/K)^M)``, so that the sweep
        reaches budgets where neither the optimum nor uniform routing is constrained. Levels
        are geometric in between; over several instances (seeds) the lowest level is the
        largest cheapest one, so that every seed is feasible at every level.
        """
        from msroute.core.oracle import best_fixed_policy

        if n_levels < 1:
            raise InvalidValueError(f"n_levels == {n_levels}, must be >= 1")
        m = self.m_draws
        lows, highs = [], []
        for inst in instances:
            cost = inst.costs[:, self.budget_index(inst)]
            d = inst.costs.shape[1]
            opt = best_fixed_policy(
                inst.skills_base[None], inst.costs, np.zeros(d), inst.costs.max(0), m
            )
            uniform = np.full(inst.n_experts, 1.0 / inst.n_experts)
            floored = float(floored_reach(cost[:, None], default_gamma(inst.n_experts))[0][0])
            lows.append(m * floored)
            highs.append(max(m * float(cost @ opt.q), _expected_distinct_cost(uniform, cost, m)))
        lo, hi = max(lows), max(highs)
        levels = [lo] if n_levels == 1 or hi <= lo else list(np.geomspace(lo, hi, n_levels))
        return [format_budget(_round_sig(v)) for v in levels] + [NO_BUDGET]


def _round_sig(value: float, digits: int = 3) -> float:
    """``value`` rounded up to ``digits`` significant digits (a readable budget that is never
    below the computed one)."""
    if value <= 0:
        return 0.0
    scale = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return float(f"{math.ceil(value / scale - 1e-9) * scale:.{digits}g}")
