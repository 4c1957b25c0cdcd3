"""Tests of the OPT oracle (eq. (3)) and the contextual benchmark OPT^ctx (Section 5.2).

The oracle is checked against independent solutions: a fine grid over the simplex (K = 3),
a conic solver (cvxpy/Clarabel, power cones), and random feasible points built from the
vertices of the feasible polytope. The reward is evaluated independently with
``msroute.core.reward.expected_reward``.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from scipy.optimize import linprog

from msroute import Constraints, InfeasibleConstraintsError, Problem
from msroute.core._polytope import Polytope
from msroute.core.oracle import (
    best_fixed_policy,
    best_fixed_policy_for,
    contextual_opt,
)
from msroute.core.reward import SortedRows, expected_reward, expected_reward_grad


# ---------------------------------------------------------------------------- helpers
def average_reward(q: np.ndarray, skills: np.ndarray, m: int) -> np.ndarray:
    """F(q) = (1/T) sum_t Phi_t(q) for q (..., K): the library's exact formula, per policy."""
    return np.asarray(expected_reward(q[..., None, :], skills, m)).mean(axis=-1)


def make_instance(seed: int, t: int = 12, n: int = 2, k: int = 4, d: int = 2):
    rng = np.random.default_rng(seed)
    skills = rng.uniform(0.0, 1.0, (t, n, k)) ** 2
    costs = rng.uniform(0.0, 1.0, (k, d))
    return rng, skills, costs


def polytope_vertices(costs, lo, hi, floor, rng, n_dirs=30):
    """Vertices of P found by maximising random linear objectives (HiGHS)."""
    k = costs.shape[0]
    out = []
    for _ in range(n_dirs):
        res = linprog(
            rng.normal(size=k),
            A_ub=np.vstack([costs.T, -costs.T]),
            b_ub=np.concatenate([hi, -lo]),
            A_eq=np.ones((1, k)),
            b_eq=[1.0],
            bounds=[(floor, None)] * k,
            method="highs",
        )
        assert res.status == 0
        out.append(res.x)
    return np.array(out)


def frank_wolfe_gap(q, skills, costs, lo, hi, m, floor):
    """max_{s in P} grad F(q) . (s - q), recomputed independently (reward module + HiGHS)."""
    g = np.asarray(expected_reward_grad(q, skills, m)).mean(axis=0)
    k = q.shape[0]
    res = linprog(
        -g,
        A_ub=np.vstack([costs.T, -costs.T]),
        b_ub=np.concatenate([hi, -lo]),
        A_eq=np.ones((1, k)),
        b_eq=[1.0],
        bounds=[(floor, None)] * k,
        method="highs",
    )
    return float(-res.fun - g @ q)


def in_polytope(q, costs, lo, hi, floor, atol=1e-9):
    u = costs.T @ q
    return (
        abs(q.sum() - 1.0) <= atol
        and q.min() >= floor - atol
        and np.all(u >= lo - atol)
        and np.all(u <= hi + atol)
    )


def cvxpy_opt(skills, costs, lo, hi, m, floor):
    """Independent solution of eq. (3) with power cones: (1 - Q_j)^M is convex in q."""
    t, n, k = skills.shape
    rows = skills.reshape(t * n, k)
    order = np.argsort(-rows, axis=1)
    v_sorted = np.take_along_axis(rows, order, axis=1)
    gaps = v_sorted - np.concatenate([v_sorted[:, 1:], np.zeros((t * n, 1))], axis=1)
    # A[(r, j), i] = 1 when expert i is among the top j + 1 of row r: Q = A q.
    a = np.zeros((t * n, k, k))
    for r in range(t * n):
        for j in range(k):
            a[r, j, order[r, : j + 1]] = 1.0
    a = a.reshape(t * n * k, k)
    q = cp.Variable(k)
    tail = 1.0 - a @ q
    objective = gaps.ravel() @ (1.0 - cp.power(cp.pos(tail), m)) / t
    cons = [q >= floor, cp.sum(q) == 1, costs.T @ q >= lo, costs.T @ q <= hi]
    prob = cp.Problem(cp.Maximize(objective), cons)
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL
    return np.asarray(q.value), float(prob.value)


# ---------------------------------------------------------------------------- objective
@pytest.mark.parametrize("m", [1, 2, 3, 5, 12])
def test_objective_value_and_gradient_match_reward_module(m):
    rng, skills, _ = make_instance(1, t=9, n=3, k=6)
    skills[0, 0] = 0.0  # an all-zero row is dropped; must not change anything
    skills[1, 1, :3] = 0.4  # ties
    obj = SortedRows.average(skills, m)
    for _ in range(3):
        q = rng.dirichlet(np.ones(6))
        value, grad = obj.value_and_grad(q)
        assert value == pytest.approx(float(expected_reward(q, skills, m).mean()), abs=1e-13)
        ref = np.asarray(expected_reward_grad(q, skills, m)).mean(axis=0)
        np.testing.assert_allclose(grad, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("m", [2, 3, 4])
def test_hessian_matches_finite_differences_along_the_simplex(m):
    rng, skills, _ = make_instance(2, t=7, n=2, k=6)
    obj = SortedRows.average(skills, m)
    q = rng.dirichlet(np.ones(6))
    idx = np.array([0, 2, 3, 5])
    hess = obj.hessian(q, idx)
    assert np.linalg.eigvalsh(hess).max() <= 1e-12  # concave
    for _ in range(4):
        step = np.zeros(6)
        step[idx] = rng.normal(size=4)
        step[idx] -= step[idx].mean()  # stay on the simplex's affine hull
        eps = 1e-5
        g_plus = obj.value_and_grad(q + eps * step)[1]
        g_minus = obj.value_and_grad(q - eps * step)[1]
        fd = step @ (g_plus - g_minus) / (2 * eps)
        assert fd == pytest.approx(step[idx] @ hess @ step[idx], abs=1e-8)


# ---------------------------------------------------------------------------- optimality
def test_matches_grid_over_the_simplex_k3():
    _, skills, costs = make_instance(3, t=10, n=2, k=3, d=1)
    costs = np.array([[0.9], [0.5], [0.1]])
    skills[:, :, 0] += 0.5  # expert 0 is the best and the most expensive: the bound binds
    lo, hi, m = np.array([0.0]), np.array([0.45]), 2
    res = best_fixed_policy(skills, costs, lo, hi, m)
    # Grid with step 1/600 over the simplex, filtered by feasibility.
    h = 600
    i, j = np.meshgrid(np.arange(h + 1), np.arange(h + 1), indexing="ij")
    keep = i + j <= h
    grid = np.stack([i[keep], j[keep], h - i[keep] - j[keep]], axis=1) / h
    grid = grid[(grid @ costs[:, 0] <= hi[0]) & (grid @ costs[:, 0] >= lo[0])]
    values = average_reward(grid, skills, m)
    best = float(values.max())
    assert res.converged and res.gap <= 1e-6
    assert res.value + res.gap >= best  # the certificate bounds every feasible point
    assert res.value >= best - 1e-12  # and the grid never beats the oracle
    assert res.value - best <= 5e-3  # grid resolution: |grad F| <= M N, step <= 1/600
    assert (costs.T @ res.q)[0] == pytest.approx(hi[0], abs=1e-9)  # the bound is active
    np.testing.assert_allclose(res.q, grid[values.argmax()], atol=5e-3)


@pytest.mark.parametrize(
    ("seed", "m", "floor"), [(0, 1, 0.0), (1, 2, 0.0), (2, 3, 0.05), (3, 5, 0.1), (4, 3, 0.0)]
)
def test_matches_cvxpy_and_certificate_holds(seed, m, floor):
    rng, skills, costs = make_instance(seed, t=8, n=2, k=4, d=2)
    q0 = floor + (1 - 4 * floor) * rng.dirichlet(np.ones(4))
    u0 = costs.T @ q0
    lo, hi = u0 - np.array([0.05, 0.3]), u0 + np.array([0.02, 0.2])  # a small box around q0
    res = best_fixed_policy(skills, costs, lo, hi, m, floor=floor)
    q_cvx, _ = cvxpy_opt(skills, costs, lo, hi, m, floor)
    f_cvx = float(average_reward(q_cvx, skills, m))
    assert res.converged and 0.0 <= res.gap <= 1e-6
    assert res.gap >= frank_wolfe_gap(res.q, skills, costs, lo, hi, m, floor) - 1e-9
    assert in_polytope(res.q, costs, lo, hi, floor, atol=1e-12)
    assert res.value == pytest.approx(float(average_reward(res.q, skills, m)), abs=1e-13)
    # cvxpy's point may be infeasible by its own tolerance (~1e-8): allow that much.
    assert res.value + res.gap >= f_cvx - 1e-7
    assert abs(res.value - f_cvx) <= 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_never_below_a_feasible_policy(seed):
    rng, skills, costs = make_instance(10 + seed, t=15, n=3, k=6, d=2)
    floor = 0.02 * (seed % 3)
    m = 1 + seed % 4
    q0 = floor + (1 - 6 * floor) * rng.dirichlet(np.ones(6))
    lo, hi = costs.T @ q0 - 0.1, costs.T @ q0 + 0.03
    res = best_fixed_policy(skills, costs, lo, hi, m, floor=floor)
    verts = polytope_vertices(costs, lo, hi, floor, rng)
    mix = rng.dirichlet(np.full(len(verts), 0.3), size=400) @ verts
    points = np.vstack([verts, mix, q0[None]])
    values = average_reward(points, skills, m)
    assert res.converged
    assert res.value + res.gap >= values.max()  # a true certificate
    assert res.value >= values.max() - 1e-12  # and it's the optimum
    assert in_polytope(res.q, costs, lo, hi, floor, atol=1e-12)


def test_small_tolerance_is_reached_and_agrees():
    _, skills, costs = make_instance(21, t=200, n=3, k=20, d=2)
    lo, hi = np.array([0.0, 0.2]), np.array([0.35, 0.45])
    coarse = best_fixed_policy(skills, costs, lo, hi, 3)
    fine = best_fixed_policy(skills, costs, lo, hi, 3, tol=1e-11)
    assert fine.converged and fine.gap <= 1e-11
    assert fine.value >= coarse.value - 1e-11
    assert fine.value - coarse.value <= coarse.gap
    np.testing.assert_allclose(fine.q, coarse.q, atol=1e-3)


def test_iteration_cap_is_reported_not_silent():
    _, skills, costs = make_instance(22, t=100, n=3, k=15, d=2)
    lo, hi = np.array([0.0, 0.0]), np.array([0.3, 0.4])
    full = best_fixed_policy(skills, costs, lo, hi, 3)
    with pytest.warns(RuntimeWarning, match="not converged"):
        capped = best_fixed_policy(skills, costs, lo, hi, 3, max_iter=1)
    assert not capped.converged
    assert capped.gap > 1e-6
    assert "not converged" in capped.message
    assert capped.value + capped.gap >= full.value  # still a valid certificate
    for res in (capped, full):
        assert res.gap == pytest.approx(
            max(frank_wolfe_gap(res.q, skills, costs, lo, hi, 3, 0.0), 0.0), abs=1e-9
        )
    assert capped.value <= full.value + full.gap


def test_equality_box_and_zero_skills():
    rng, skills, costs = make_instance(23, t=20, n=2, k=5, d=2)
    q0 = rng.dirichlet(np.ones(5))
    u0 = costs.T @ q0
    res = best_fixed_policy(skills, costs, u0, u0, 2)  # lo == hi: a flat polytope
    assert res.converged
    np.testing.assert_allclose(costs.T @ res.q, u0, atol=1e-11)
    assert res.value >= float(average_reward(q0, skills, 2)) - 1e-12
    zero = best_fixed_policy(np.zeros_like(skills), costs, u0 - 0.1, u0 + 0.1, 2)
    assert zero.value == 0.0 and zero.gap == 0.0 and zero.converged


def test_repair_moves_nearby_points_exactly_into_the_polytope():
    rng, _, costs = make_instance(27, k=6, d=2)
    q0 = rng.dirichlet(np.ones(6))
    u0 = costs.T @ q0
    for lo, hi, floor in [(u0 - 0.1, u0 + 0.01, 0.01), (u0, u0, 0.0)]:  # full-dim, then flat
        poly = Polytope(costs, lo, hi, floor)
        verts = polytope_vertices(costs, lo, hi, floor, rng, n_dirs=8)
        for v in verts:
            # Push the vertex outwards: off the simplex, below the floor, outside the box.
            bad = v + 1e-7 * rng.normal(size=6)
            assert not in_polytope(bad, costs, lo, hi, floor, atol=1e-12)
            fixed = poly.repair(bad)
            assert in_polytope(fixed, costs, lo, hi, floor, atol=1e-12)
            assert np.abs(fixed - v).max() <= 1e-5


def test_floor_one_over_k_gives_uniform():
    _, skills, costs = make_instance(24, k=4)
    res = best_fixed_policy(skills, costs, [0.0, 0.0], [1.0, 1.0], 2, floor=0.25)
    np.testing.assert_allclose(res.q, 0.25, atol=1e-15)
    assert res.converged


def test_problem_wrapper_uses_the_surrogate_box():
    _, skills, costs = make_instance(25, t=30, n=2, k=5, d=2)
    bounds = Constraints(upper=[1.2, None], lower=[None, 0.4])
    problem = Problem(costs, m_draws=3, constraints=bounds)
    lo, hi = problem.surrogate_box()
    res = best_fixed_policy_for(problem, skills, floor=0.01)
    ref = best_fixed_policy(skills, costs, lo, hi, 3, floor=0.01)
    assert res.value == ref.value
    u = costs.T @ res.q
    assert u[0] <= 1.2 / 3 + 1e-12 and u[1] >= 0.4 - 1e-12 and res.q.min() >= 0.01 - 1e-15


# ---------------------------------------------------------------------------- errors
def test_infeasible_constraints_raise():
    _, skills, _ = make_instance(26, k=3, d=1)
    costs = np.array([[0.5], [0.6], [0.9]])
    with pytest.raises(InfeasibleConstraintsError, match=r"smallest reachable value is 0\.5"):
        best_fixed_policy(skills, costs, [0.0], [0.4], 2)
    with pytest.raises(InfeasibleConstraintsError, match=r"largest reachable value is 0\.9"):
        best_fixed_policy(skills, costs, [0.95], [1.0], 2)
    # Reachable alone (0.9 needs q_2 = 1) but not with a floor of 0.2 on the others.
    with pytest.raises(InfeasibleConstraintsError, match="floor"):
        best_fixed_policy(skills, costs, [0.85], [1.0], 2, floor=0.2)
    with pytest.raises(InfeasibleConstraintsError, match="1/K"):
        best_fixed_policy(skills, costs, [0.0], [1.0], 2, floor=0.5)
    with pytest.raises(InfeasibleConstraintsError, match="above hi"):
        best_fixed_policy(skills, costs, [0.7], [0.6], 2)
    # Two coordinates each reachable alone, not together.
    costs2 = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    with pytest.raises(InfeasibleConstraintsError, match="not all together"):
        best_fixed_policy(skills, costs2, [0.6, 0.6], [1.0, 1.0], 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"skills": np.full((2, 2, 3), np.nan)}, "skills"),
        ({"skills": -np.ones((2, 2, 3))}, "skills must be >= 0"),
        ({"skills": np.ones((2, 3))}, "skills must have 3 dimensions"),
        ({"costs": np.ones((4, 1))}, "costs has 4 rows"),
        ({"lo": [0.0, 0.0]}, "lo must have shape"),
        ({"hi": [np.inf]}, "hi contains"),
        ({"floor": -0.1}, "floor"),
        ({"tol": 0.0}, "tol"),
        ({"m_draws": 0}, "m_draws"),
    ],
)
def test_bad_inputs_raise_value_error_naming_the_argument(kwargs, match):
    args = {
        "skills": np.ones((2, 2, 3)),
        "costs": np.ones((3, 1)),
        "lo": [0.0],
        "hi": [1.0],
        "m_draws": 2,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        best_fixed_policy(**args)


# ---------------------------------------------------------------------------- contextual
def contextual_instance(seed: int):
    """Two contexts that want different experts: context 0 weighs dimension 0, context 1
    dimension 1, and the experts are specialists."""
    rng = np.random.default_rng(seed)
    t, n, k = 40, 2, 5
    skills = rng.uniform(0.0, 0.3, (t, n, k))
    skills[:, 0, 0] += 0.7  # expert 0: dimension 0 specialist
    skills[:, 1, 1] += 0.7  # expert 1: dimension 1 specialist
    contexts = rng.integers(0, 3, t)
    contexts[contexts == 2] = 0
    contexts[:3] = [0, 1, 0]
    weights = np.array([[1.0, 0.1], [0.1, 1.0], [0.5, 0.5]])  # context 2 is never seen
    costs = rng.uniform(0.0, 1.0, (k, 2))
    problem = Problem(costs, m_draws=2, constraints=Constraints(upper=[1.8, 1.8]))
    return skills, contexts, weights, problem


def cvxpy_contextual(skills, contexts, weights, costs, hi, m, floor):
    """OPT^ctx under the aggregate budget by a general conic solver: Phi per round as
    sum_j gap_j (1 - (1 - Q_j)^M), concave in q (cvxpy's power of an affine expression)."""
    t, n, k = skills.shape
    n_ctx = weights.shape[0]
    q = cp.Variable((n_ctx, k))
    share = np.bincount(contexts, minlength=n_ctx) / t
    terms = []
    for r in range(t):
        x = contexts[r]
        for dim in range(n):
            v = skills[r, dim] * weights[x, dim]
            order = np.argsort(-v)
            vs = v[order]
            gaps = vs - np.append(vs[1:], 0.0)
            for j in range(k):
                if gaps[j] > 0:
                    top = cp.sum(q[x, order[: j + 1]])
                    terms.append(gaps[j] * (1 - cp.power(1 - top, m)) / t)
    spend = sum(share[x] * (costs.T @ q[x]) for x in range(n_ctx))
    cons = [q >= floor, cp.sum(q, axis=1) == 1, spend <= hi]
    prob = cp.Problem(cp.Maximize(sum(terms)), cons)
    prob.solve(solver=cp.CLARABEL)
    return prob.value, q.value


def test_contextual_opt_holds_the_budget_on_the_aggregate_and_matches_a_general_solver():
    skills, contexts, weights, problem = contextual_instance(30)
    gamma = problem.default_gamma()
    ctx = contextual_opt(skills, contexts, weights, problem, floor=gamma)
    t = len(contexts)
    assert ctx.converged and ctx.gap <= 1e-6
    np.testing.assert_array_equal(ctx.counts, np.bincount(contexts, minlength=3))
    _, hi = problem.surrogate_box()
    want, _ = cvxpy_contextual(skills, contexts, weights, problem.costs, hi, 2, gamma)
    assert ctx.value == pytest.approx(want, abs=1e-5)
    # Its policies are feasible on the aggregate and score what it says.
    share = ctx.counts / t
    spend = sum(share[x] * (problem.costs.T @ ctx.q[x]) for x in range(3))
    assert np.all(spend <= hi + 1e-12) and np.allclose(spend, ctx.cost)
    assert np.all(ctx.q >= gamma - 1e-12) and np.allclose(ctx.q.sum(axis=1), 1.0)
    weighted = skills * weights[contexts][:, :, None]
    assert ctx.value == pytest.approx(
        float(expected_reward(ctx.q[contexts], weighted, 2).mean()), abs=1e-12
    )
    # A budget per context (each context's spend held to the bound) is a smaller class.
    per_context = 0.0
    for x in range(2):
        sub = skills[contexts == x] * weights[x][None, :, None]
        per_context += (
            np.count_nonzero(contexts == x)
            / t
            * best_fixed_policy_for(problem, sub, floor=gamma).value
        )
    assert ctx.value + ctx.gap >= per_context - 1e-9
    # One shared q over the same weighted rounds can only do worse; here strictly.
    shared = best_fixed_policy_for(problem, weighted, floor=gamma)
    assert ctx.value > shared.value + 1e-2


def test_contextual_opt_beats_budgets_held_per_context_when_contexts_differ_in_price():
    """Context 0 is cheap to serve well, context 1 dear: the aggregate moves budget to 1."""
    rng = np.random.default_rng(5)
    t, k = 60, 3
    skills = rng.uniform(0.0, 0.2, (t, 1, k))
    skills[:, 0, 2] = 0.9  # the dear expert is best everywhere
    contexts = np.repeat([0, 1], t // 2)
    skills[contexts == 0, 0, 0] = 0.85  # context 0 has a cheap near-equal
    costs = np.array([[0.1], [0.1], [1.0]])
    problem = Problem(costs, 1, Constraints(upper=[0.5]))
    ctx = contextual_opt(skills, contexts, np.ones((2, 1)), problem, floor=0.0)
    # M = 1 makes it a linear program: solve it independently.
    share = np.array([0.5, 0.5])
    vbar = np.stack([skills[contexts == x, 0].mean(axis=0) for x in range(2)])
    res = linprog(
        -(share[:, None] * vbar).ravel(),
        A_ub=(share[:, None] * costs[:, 0][None]).ravel()[None],
        b_ub=[0.5],
        A_eq=np.kron(np.eye(2), np.ones((1, k))),
        b_eq=[1.0, 1.0],
        bounds=[(0.0, None)] * (2 * k),
    )
    assert ctx.value == pytest.approx(-res.fun, abs=1e-7)
    held = sum(0.5 * best_fixed_policy_for(problem, skills[contexts == x]).value for x in range(2))
    assert ctx.value > held + 0.02
    assert ctx.q[1, 2] > ctx.q[0, 2]  # the dear expert goes where it is needed


def test_contextual_opt_uses_each_rounds_own_costs():
    skills, contexts, weights, problem = contextual_instance(33)
    t = len(contexts)
    doubled = np.broadcast_to(2.0 * problem.costs, (t, *problem.costs.shape))
    table = contextual_opt(skills, contexts, weights, problem, floor=0.0)
    dear = contextual_opt(skills, contexts, weights, problem, floor=0.0, round_costs=doubled)
    same = contextual_opt(
        skills,
        contexts,
        weights,
        problem,
        floor=0.0,
        round_costs=np.broadcast_to(problem.costs, doubled.shape),
    )
    assert same.value == pytest.approx(table.value, abs=1e-9)
    assert dear.value < table.value - 1e-3
    _, hi = problem.surrogate_box()
    assert np.all(dear.cost <= hi + 1e-12)
    with pytest.raises(ValueError, match="round_costs must have shape"):
        contextual_opt(skills, contexts, weights, problem, floor=0.0, round_costs=doubled[:, :2])


def test_contextual_single_context_equals_plain_oracle():
    skills, contexts, _, problem = contextual_instance(31)
    ones = np.zeros_like(contexts)
    ctx = contextual_opt(skills, ones, np.ones((1, 2)), problem, floor=0.0)
    plain = best_fixed_policy_for(problem, skills)
    assert ctx.value == pytest.approx(plain.value, abs=1e-12)


def test_contextual_bad_inputs():
    skills, contexts, weights, problem = contextual_instance(32)
    with pytest.raises(ValueError, match="contexts must lie in"):
        contextual_opt(skills, contexts + 5, weights, problem, floor=0.0)
    with pytest.raises(ValueError, match="contexts must be an integer array"):
        contextual_opt(skills, contexts[:-1], weights, problem, floor=0.0)
    with pytest.raises(ValueError, match="context_weights must have shape"):
        contextual_opt(skills, contexts, weights[:, :1], problem, floor=0.0)
    with pytest.raises(ValueError, match="context_weights must be >= 0"):
        contextual_opt(skills, contexts, -weights, problem, floor=0.0)
