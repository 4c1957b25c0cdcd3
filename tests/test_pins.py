"""Pins of the tolerances and rules that mutation testing found unguarded: each test fails when
its constant or rule changes (the values are the documented ones: docs/architecture.md and the
docstrings)."""

from __future__ import annotations

import numpy as np
import pytest

from msroute import Constraints, Problem, feasible, project_step
from msroute.core.oracle import best_fixed_policy
from msroute.errors import ConvergenceWarning, InfeasibleConstraintsError
from msroute.policies import ContextualOMD, OMDApproachability


# ---------------------------------------------------------------------- feasible(): tol 1e-9
def test_feasible_default_tolerance_is_1e_9() -> None:
    lo, hi = [-np.inf, 0.5], [1.0, np.inf]
    assert feasible([[1.0 + 0.9e-9, 0.5]], lo, hi).tolist() == [True]
    assert feasible([[1.0 + 1.1e-9, 0.5]], lo, hi).tolist() == [False]
    assert feasible([[1.0, 0.5 - 0.9e-9]], lo, hi).tolist() == [True]
    assert feasible([[1.0, 0.5 - 1.1e-9]], lo, hi).tolist() == [False]


# ---------------------------------------------------------------------- the feasibility LP
@pytest.mark.parametrize("cbar", [1e3, 1e4])
def test_feasibility_lp_slack_tolerance_is_1e_9_times_cbar(cbar: float) -> None:
    """With one draw and costs (0, cbar) the least reachable cost is gamma * cbar: a bound
    below it by less than 1e-9 * max(1, cbar) passes, by more it fails. (cbar >= 1e3 puts the
    tolerance above the LP solver's own feasibility tolerance of 1e-7, so it decides.)"""
    gamma = 0.05
    reach = gamma * cbar

    def problem(bound: float) -> Problem:
        return Problem([[0.0], [cbar]], 1, Constraints(upper=[bound]))

    problem(reach - 0.5e-9 * cbar).check_feasible(gamma)
    with pytest.raises(InfeasibleConstraintsError):
        problem(reach - 2e-9 * cbar).check_feasible(gamma)


# ---------------------------------------------------------------------- the dual's tie rule
@pytest.mark.parametrize("construction", ["paper", "invariant"])
def test_dual_tie_band_is_1e_12(construction: str) -> None:
    """At w = 0 a surrogate cost within 1e-12 (times max(1, cbar) for the paper's dual, in
    normalized units for the invariant one) of the bound leaves w at exactly zero."""
    p = Problem([[0.0, 1.0], [3.0, 0.0], [0.5, 0.5]], 2, Constraints(upper=[1.5, 1.5]))
    unit = max(1.0, p.cbar) if construction == "paper" else None

    def moved(excess: float) -> bool:
        pol = OMDApproachability(p, horizon=100, seed=0, dual=construction)
        d = pol.dual
        scale = unit if unit is not None else d.scale
        d.step(d.hi + excess * scale)
        return bool(np.any(d.w != 0.0))

    assert not moved(0.5e-12)
    assert moved(4e-12)


# ---------------------------------------------------------------------- Corollary 2's eta
def test_anytime_eta_of_the_first_step_is_a_sqrt_2() -> None:
    """Algorithm 2 as read here: the n-th step of a context uses eta = a sqrt(n + 1) (the value
    of its next visit), so the first step divides by a sqrt(2), not a sqrt(1)."""
    p = Problem([[0.0], [1.0], [0.5]], 1, Constraints(upper=[None]))
    pol = ContextualOMD(p, horizon=100, n_contexts=1, seed=0, batch=1)
    q0 = pol.q[0].copy()
    d = pol.select(context=np.zeros(1, dtype=np.int64))
    reward = 2.0
    pol.update(d, np.array([reward]), np.zeros((1, 1)))
    counts = np.bincount(d.draws[0], minlength=3)
    g = reward * counts / q0
    a = pol.eta
    want = project_step(q0 + g / (a * np.sqrt(2.0)), pol.gamma)
    other = project_step(q0 + g / (a * np.sqrt(1.0)), pol.gamma)
    assert np.abs(want - other).max() > 1e-6  # the two readings differ here
    np.testing.assert_allclose(pol.q[0], want, rtol=0, atol=1e-14)


# ---------------------------------------------------------------------- the oracle
def _instance(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    v = rng.random((1, 3, 6))  # one round: (T, N, K)
    c = rng.random((6, 2))
    hi = np.array([0.9 * c[:, 0].mean(), c[:, 1].max()])  # the box S, in units of C^T q
    return v, c, np.zeros(2), hi


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_converges_to_its_tolerance_and_says_so(seed: int) -> None:
    v, c, lo, hi = _instance(seed)
    res = best_fixed_policy(v, c, lo, hi, 2, tol=1e-6)
    assert res.converged and 0.0 <= res.gap <= 1e-6


def test_oracle_convergence_flag_is_gap_at_most_tol() -> None:
    """The same (deterministic) run judged against a tol just above and just below its
    certified gap: converged exactly when gap <= tol, with a ConvergenceWarning otherwise."""
    v, c, lo, hi = _instance(3)
    with pytest.warns(ConvergenceWarning):
        first = best_fixed_policy(v, c, lo, hi, 2, tol=1e-300, max_iter=2)
    gap = first.gap
    assert gap > 0
    above = best_fixed_policy(v, c, lo, hi, 2, tol=gap * 1.5, max_iter=2)
    assert above.converged and above.gap == gap
    with pytest.warns(ConvergenceWarning, match="not converged"):
        below = best_fixed_policy(v, c, lo, hi, 2, tol=gap * 0.7, max_iter=2)
    assert not below.converged


def test_oracle_stops_once_the_gap_is_within_tol() -> None:
    """A loose tol stops the outer loop early; a tight one runs on until it is met."""
    v, c, lo, hi = _instance(4)
    loose = best_fixed_policy(v, c, lo, hi, 2, tol=1e-2)
    tight = best_fixed_policy(v, c, lo, hi, 2, tol=1e-9)
    assert loose.converged and tight.converged
    assert loose.gap <= 1e-2 and tight.gap <= 1e-9
    assert loose.iterations <= tight.iterations
