"""Tests of the constrained problem: boxes, support function, distances, sandwich, feasibility."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import lsq_linear

from msroute.core.problem import Constraints, Problem
from msroute.errors import InfeasibleConstraintsError


# ---------------------------------------------------------------------- helpers
def random_problem(rng: np.random.Generator, k: int = 6, d: int = 4, m: int = 3) -> Problem:
    """Costs in [0, 1]; each coordinate gets an upper bound, a lower bound, both, or none."""
    costs = rng.random((k, d))
    upper: list[float | None] = []
    lower: list[float | None] = []
    for j in range(d):
        kind = j % 4 if j < 4 else int(rng.integers(4))
        lo = float(rng.uniform(0.0, 0.5))
        hi = float(rng.uniform(0.5, 1.0)) * m
        upper.append(hi if kind in (0, 2) else None)
        lower.append(lo if kind in (1, 2) else None)
    return Problem(costs, m_draws=m, constraints=Constraints(upper=upper, lower=lower))


def expected_cost(q: np.ndarray, costs: np.ndarray, m: int) -> np.ndarray:
    """E[l] of eq. (1): expert i is routed with probability 1 - (1 - q_i)^M."""
    return (1.0 - (1.0 - q) ** m) @ costs


def box_distance_lsq(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Distance to a box by a bounded least-squares solve (independent of the library)."""
    if np.all((lo <= x) & (x <= hi)):
        return 0.0
    res = lsq_linear(np.eye(x.size), x, bounds=(lo, hi), tol=1e-14)
    return float(np.linalg.norm(res.x - x))


# ---------------------------------------------------------------------- boxes and support
def test_surrogate_box_follows_section_4_2():
    costs = np.array([[0.2, 0.5, 0.9, 0.1], [0.4, 0.3, 0.6, 0.0]])
    c = Constraints(upper=[1.2, None, 1.5, None], lower=[None, 0.25, 0.4, None])
    p = Problem(costs, m_draws=3, constraints=c)
    lo, hi = p.surrogate_box()
    # upper -> [0, u/M]; lower -> [l, cbar]; both -> [l, u/M]; none -> [0, cbar]; cbar = 0.9.
    np.testing.assert_allclose(lo, [0.0, 0.25, 0.4, 0.0])
    np.testing.assert_allclose(hi, [0.4, 0.9, 0.5, 0.9])
    lo_ori, hi_ori = p.original_box()
    np.testing.assert_array_equal(lo_ori, [-np.inf, 0.25, 0.4, -np.inf])
    np.testing.assert_array_equal(hi_ori, [1.2, np.inf, 1.5, np.inf])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_support_function_equals_max_over_box_vertices(seed):
    rng = np.random.default_rng(seed)
    p = random_problem(rng)
    lo, hi = p.surrogate_box()
    vertices = np.array(list(itertools.product(*zip(lo, hi, strict=True))))  # 2^d corners
    w = rng.normal(size=(5, p.n_costs))
    w[0, 1] = 0.0
    h = p.support(w)
    assert h.shape == (5,)
    np.testing.assert_allclose(h, (w @ vertices.T).max(axis=1), atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_support_point_maximises_and_follows_the_tie_rule(seed):
    rng = np.random.default_rng(seed)
    p = random_problem(rng)
    lo, hi = p.surrogate_box()
    w = rng.normal(size=p.n_costs)
    w[rng.random(p.n_costs) < 0.4] = 0.0
    u = rng.uniform(-0.5, 1.5, size=p.n_costs)
    x = p.support_point(w, u)
    assert np.all((lo <= x) & (x <= hi))
    assert w @ x == pytest.approx(float(p.support(w)), abs=1e-12)
    zero = w == 0
    # The tie rule of docs/architecture.md: where w_j = 0 take clip(u_j, S_j), so the dual stays
    # still inside S.
    np.testing.assert_array_equal(x[zero], np.minimum(np.maximum(u[zero], lo[zero]), hi[zero]))


def test_support_point_is_u_when_u_inside_and_w_zero():
    rng = np.random.default_rng(1)
    p = random_problem(rng)
    lo, hi = p.surrogate_box()
    u = 0.5 * (lo + hi)
    np.testing.assert_array_equal(p.support_point(np.zeros(p.n_costs), u), u)


# ---------------------------------------------------------------------- distances
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_distances_match_direct_computation(seed):
    rng = np.random.default_rng(seed)
    p = random_problem(rng)
    lo, hi = p.surrogate_box()
    lo_ori, hi_ori = p.original_box()
    x = rng.uniform(-0.5, 3.5, size=(6, p.n_costs))
    d_sur, d_ori = p.surrogate_distance(x), p.original_distance(x)
    assert d_sur.shape == d_ori.shape == (6,)
    for i in range(6):
        assert d_sur[i] == pytest.approx(box_distance_lsq(x[i], lo, hi), abs=1e-9)
        assert d_ori[i] == pytest.approx(box_distance_lsq(x[i], lo_ori, hi_ori), abs=1e-9)
        # Lemma 4: dist(u, S) = max_{|w| <= 1} w.u - h_S(w); random unit w never exceed it.
        w = rng.normal(size=(50, p.n_costs))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        assert np.all(w @ x[i] - p.support(w) <= d_sur[i] + 1e-12)


def test_lemma_4_is_attained_at_the_normalised_gap():
    rng = np.random.default_rng(2)
    p = random_problem(rng)
    lo, hi = p.surrogate_box()
    u = hi + 0.3  # outside on every coordinate
    gap = u - np.clip(u, lo, hi)
    w = gap / np.linalg.norm(gap)
    assert float(w @ u - p.support(w)) == pytest.approx(float(p.surrogate_distance(u)), abs=1e-12)


# ---------------------------------------------------------------------- sandwich (2) and Lemma 2
def test_expected_cost_formula_equals_enumeration():
    rng = np.random.default_rng(3)
    k, m = 4, 3
    q, costs = rng.dirichlet(np.ones(k)), rng.random((k, 2))
    total = np.zeros(2)
    for seq in itertools.product(range(k), repeat=m):
        total += float(np.prod(q[list(seq)])) * costs[sorted(set(seq))].sum(axis=0)
    np.testing.assert_allclose(expected_cost(q, costs, m), total, atol=1e-14)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_sandwich_2(m, seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 12))
    costs = rng.random((k, 3)) * rng.choice([0.1, 1.0, 5.0])
    q = rng.dirichlet(np.full(k, rng.choice([0.1, 1.0])))
    linear = q @ costs
    exp = expected_cost(q, costs, m)
    assert np.all(linear <= exp + 1e-12)
    assert np.all(exp <= m * linear + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_lemma_2_distance_transfer(m, seed):
    rng = np.random.default_rng(seed)
    p = random_problem(rng, k=8, d=5, m=m)
    t_len = 15
    # A policy sequence that drifts between two random corners of the simplex.
    qs = rng.dirichlet(np.full(p.n_experts, 0.3), size=t_len)
    phi = np.mean([expected_cost(q, p.costs, m) for q in qs], axis=0)
    varphi = np.mean(qs @ p.costs, axis=0)
    d_ori, d_sur = float(p.original_distance(phi)), float(p.surrogate_distance(varphi))
    assert d_ori <= m * d_sur + 1e-12
    if d_sur == 0.0:  # Corollary 1
        assert d_ori == 0.0


def test_lemma_2_is_not_vacuous_here():
    """The random instances above do produce positive distances (else the test proves nothing)."""
    rng = np.random.default_rng(4)
    positive = 0
    for _ in range(50):
        p = random_problem(rng, k=8, d=5, m=3)
        qs = rng.dirichlet(np.full(p.n_experts, 0.3), size=15)
        positive += float(p.surrogate_distance(np.mean(qs @ p.costs, axis=0))) > 0
    assert 10 <= positive <= 45


# ---------------------------------------------------------------------- feasibility (Assumption 1)
def paper_like_instance(rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """K = 50 workers, costs (workload in (0, 1], expert flag on 10 of them), M = 5."""
    k, m = 50, 5
    workload = rng.integers(1, 200, size=k).astype(float)
    workload /= workload.max()
    flag = np.zeros(k)
    flag[rng.choice(k, size=10, replace=False)] = 1.0
    return np.column_stack([workload, flag]), m


def test_paper_tight_configuration_is_feasible():
    rng = np.random.default_rng(5)
    costs, m = paper_like_instance(rng)
    upper = [m * float(costs[:, 0].mean()), 2.0]
    p = Problem(costs, m, Constraints(upper=upper, names=["workload", "expert"]))
    gamma = p.default_gamma()
    assert gamma == pytest.approx(1 / 500)
    q = p.check_feasible()
    assert q.shape == (50,)
    assert q.min() >= gamma - 1e-12 and q.sum() == pytest.approx(1.0, abs=1e-12)
    lo, hi = p.surrogate_box()
    assert np.all(q @ costs <= hi + 1e-9) and np.all(q @ costs >= lo - 1e-9)
    # The uniform policy sits exactly on the budget bound (docs/architecture.md): feasible, with
    # margin 0.
    assert (np.full(50, 1 / 50) @ costs)[0] == pytest.approx(hi[0], abs=1e-12)


def test_expert_cap_below_the_paper_floor_is_rejected_at_that_floor_and_adapts_without():
    rng = np.random.default_rng(6)
    costs, m = paper_like_instance(rng)
    k = costs.shape[0]
    gamma = 1 / (10 * k)
    # The floor alone routes gamma to each of the 10 flagged experts: C^T q >= 10 gamma = 0.02.
    reach_min = gamma * costs[:, 1].sum() + (1 - k * gamma) * costs[:, 1].min()
    upper = [m * float(costs[:, 0].mean()), m * 0.5 * reach_min]
    p = Problem(costs, m, Constraints(upper=upper, names=["workload", "expert"]))
    pattern = (
        rf"budget expert <= {upper[1]:.6g} per query is infeasible: the cheapest routing with "
        rf"every share >= gamma = {gamma:.6g} needs a budget of .* the largest floor these "
        "bounds allow is gamma = "
    )
    with pytest.raises(InfeasibleConstraintsError, match=pattern):
        p.check_feasible(gamma)
    with pytest.raises(ValueError):  # callers may catch ValueError too
        p.check_feasible(gamma)
    # Without a floor given, the floor adapts: half the largest feasible one.
    q = p.check_feasible()
    floor = p.exploration_floor()
    assert floor == pytest.approx(p.max_floor() / 2) and floor < gamma
    assert q.min() >= floor and (q @ costs)[1] <= upper[1] / m + 1e-9


def test_lower_bound_above_the_largest_reachable_is_rejected():
    rng = np.random.default_rng(7)
    costs, m = paper_like_instance(rng)
    k = costs.shape[0]
    gamma = 0.5 / k
    reach_max = gamma * costs[:, 0].sum() + (1 - k * gamma) * costs[:, 0].max()
    c = Constraints(upper=[None, 2.0], lower=[reach_max + 0.01, None])
    p = Problem(costs, m, c)
    with pytest.raises(
        InfeasibleConstraintsError,
        match=rf"bound coordinate 0 >= {reach_max + 0.01:.6g} per query is infeasible: the most "
        rf"coordinate 0 any routing with every share >= gamma = {gamma:.6g} reaches is",
    ):
        p.check_feasible(gamma=gamma)
    # Without the floor the bound is reachable (max workload is 1 > reach_max + 0.01).
    q = p.check_feasible(gamma=0.0)
    assert q @ costs[:, 0] >= reach_max + 0.01 - 1e-9


def test_jointly_infeasible_bounds_are_rejected():
    rng = np.random.default_rng(8)
    workload = rng.uniform(0.05, 1.0, size=20)
    workload[:2] = [0.05, 1.0]
    costs = np.column_stack([workload, workload])  # the same quantity measured twice
    m = 2
    # At most 0.3 on coordinate 0 and at least 0.5 on coordinate 1: each alone is reachable.
    p = Problem(costs, m, Constraints(upper=[m * 0.3, None], lower=[None, 0.5]))
    for bound in (Constraints(upper=[m * 0.3, None]), Constraints(lower=[None, 0.5])):
        Problem(costs, m, bound).check_feasible()
    with pytest.raises(InfeasibleConstraintsError, match="reachable alone but not all together"):
        p.check_feasible()


def test_two_sided_bound_with_empty_surrogate_interval_is_explained():
    # l = 0.3 <= u = 1.0, but the surrogate interval [l, u/M] = [0.3, 0.2] is empty.
    costs = np.linspace(0.0, 1.0, 10)[:, None]
    p = Problem(costs, 5, Constraints(upper=[1.0], lower=[0.3]))
    with pytest.raises(
        InfeasibleConstraintsError, match=r"coordinate 0: lower bound 0\.3 is above"
    ):
        p.check_feasible()


def test_check_feasible_validates_gamma():
    rng = np.random.default_rng(9)
    p = random_problem(rng)
    with pytest.raises(ValueError, match=re.escape("gamma == 0.5")):
        p.check_feasible(gamma=0.5)


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"upper": [1.0], "lower": [2.0]}, ValueError, "lower bound 2.0 is above upper bound 1.0"),
        ({"upper": [1.0, 2.0], "lower": [0.1, 0.2, 0.3]}, ValueError, "upper has 2 entries"),
        ({"upper": [1.0, np.inf]}, ValueError, re.escape("upper[1] == inf; use None")),
        ({"lower": [-np.inf]}, ValueError, re.escape("lower[0] == -inf")),
        ({}, ValueError, "at least one of upper= or lower="),
        ({"upper": []}, ValueError, "at least one cost coordinate"),
        ({"upper": [1.0], "names": ["a", "b"]}, ValueError, "names has 2 entries"),
        ({"upper": [1.0, 2.0], "names": ["a", "a"]}, ValueError, r"\['a'\] repeat"),
        ({"upper": 1.0}, TypeError, "must be a sequence"),
        ({"upper": ["x"]}, TypeError, re.escape("upper[0] must be a number or None")),
    ],
)
def test_constraints_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        Constraints(**kwargs)


def test_constraints_round_trip():
    c = Constraints(upper=[1.0, None], lower=[None, 0.5], names=["a", "b"])
    assert c.upper == (1.0, None)
    assert Constraints(**c.to_dict()) == c
    assert c.coordinate_name(1) == "1 (b)"


@pytest.mark.parametrize(
    "bad",
    [np.nan, np.float32("nan"), np.float64("nan"), float("inf"), -np.inf, np.float16("nan")],
)
@pytest.mark.parametrize("side", ["upper", "lower"])
def test_a_non_finite_bound_is_an_error_never_no_bound(bad: float, side: str) -> None:
    with pytest.raises(ValueError, match=rf"{side}\[0\] == (nan|-?inf); use None"):
        Constraints(**{side: [bad, 2.0]})
    with pytest.raises(ValueError, match=rf"{side}\[0\]"):
        Constraints(**{side: np.array([bad, 2.0])})


@pytest.mark.parametrize("bad", [True, "1.0", b"1", [1.0], {"u": 1}])
def test_a_bound_of_the_wrong_type_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match=r"upper\[1\] must be a number or None"):
        Constraints(upper=[1.0, bad])


@pytest.mark.parametrize(
    ("costs", "m", "constraints", "cbar", "error", "match"),
    [
        ([[0.5, -0.1]], 2, Constraints(upper=[1, 1]), None, ValueError, "costs must be >= 0"),
        ([0.5, 0.1], 2, Constraints(upper=[1, 1]), None, ValueError, "costs must have"),
        ([[0.5, 0.1]], 2, Constraints(upper=[1]), None, ValueError, "1 cost coordinates"),
        ([[0.5, 0.1]], 0, Constraints(upper=[1, 1]), None, ValueError, "m_draws == 0"),
        ([[0.5, 0.1]], 2, Constraints(upper=[1, 1]), 0.2, ValueError, "cbar == 0.2"),
        ([[0.5, np.nan]], 2, Constraints(upper=[1, 1]), None, ValueError, "costs contains"),
        ([[0.5, 0.1]], 2, {"upper": [1, 1]}, None, TypeError, "must be a Constraints"),
    ],
)
def test_problem_validation(costs, m, constraints, cbar, error, match):
    with pytest.raises(error, match=match):
        Problem(costs, m, constraints, cbar=cbar)


def test_wrong_length_vectors_are_rejected():
    p = Problem([[0.5, 0.1]], 2, Constraints(upper=[1, 1]))
    for call in (p.support, p.surrogate_distance, p.original_distance):
        with pytest.raises(ValueError, match="2 entries on its last axis"):
            call([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="u must have 2 entries"):
        p.support_point([1.0, 0.0], [1.0])
