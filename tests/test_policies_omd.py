"""OMD-Approachability (Algorithm 1) and its contextual form (Algorithm 2)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from msroute import Constraints, InfeasibleConstraintsError, Problem, expected_reward
from msroute.core.problem_batch import ProblemBatch
from msroute.core.reward import batch_sum_max_reward, expected_reward_grad
from msroute.errors import InvalidValueError
from msroute.policies.base import draws_to_mask
from msroute.policies.omd import ApproachabilityDual, OMDApproachability
from msroute.policies.omd_contextual import ContextualOMD

# Six experts: 0-1 excellent but costly (coordinate 0), 2-3 middling, 4-5 weak but they are the
# ones a covering bound asks for (coordinate 1).
SKILLS = np.array([[0.95, 0.90, 0.60, 0.55, 0.30, 0.20], [0.90, 0.95, 0.55, 0.60, 0.20, 0.35]])
COSTS = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
M = 2


def binding_problem() -> Problem:
    # Surrogate box: q0 + q1 <= 0.8 / M = 0.4 (packing), q4 + q5 >= 0.4 (covering).
    return Problem(COSTS, M, Constraints(upper=[0.8, None], lower=[None, 0.4]))


def run_fixed_skills(pol: OMDApproachability, batch: ProblemBatch, skills: np.ndarray, t: int):
    """Play ``t`` rounds on fixed skills: rewards, realized costs, Phi(q_t), C^T q_t per round."""
    rewards = np.empty((t, pol.n_runs))
    costs = np.empty((t, pol.n_runs, batch.n_costs))
    phis = np.empty((t, pol.n_runs))
    surrogate = np.empty((t, pol.n_runs, batch.n_costs))
    for s in range(t):
        decision = pol.select()
        phis[s] = expected_reward(decision.probs, skills, M)
        surrogate[s] = batch.surrogate_cost(decision.probs)
        mask = draws_to_mask(decision.draws, pol.n_experts)
        rewards[s] = batch_sum_max_reward(
            np.broadcast_to(skills, (pol.n_runs, *skills.shape)), mask
        )
        costs[s] = batch.realized_cost(mask)
        pol.update(decision, rewards[s], costs[s])
    return rewards, costs, phis, surrogate


def best_feasible_value(problem: Problem, skills: np.ndarray) -> float:
    """max Phi(q) over the simplex with C^T q in S, by SLSQP from several starts."""
    lo, hi = problem.surrogate_box()
    c = problem.costs
    cons = [
        {"type": "eq", "fun": lambda q: q.sum() - 1.0, "jac": lambda q: np.ones_like(q)},
        {"type": "ineq", "fun": lambda q: hi - c.T @ q, "jac": lambda q: -c.T},
        {"type": "ineq", "fun": lambda q: c.T @ q - lo, "jac": lambda q: c.T},
    ]
    best = -np.inf
    rng = np.random.default_rng(0)
    for _ in range(8):
        res = minimize(
            lambda q: (
                -float(expected_reward(np.clip(q, 0, None) / np.clip(q, 0, None).sum(), skills, M))
            ),
            rng.dirichlet(np.ones(len(c))),
            jac=lambda q: (
                -expected_reward_grad(np.clip(q, 0, None) / np.clip(q, 0, None).sum(), skills, M)
            ),
            bounds=[(0.0, 1.0)] * len(c),
            constraints=cons,
            method="SLSQP",
            options={"ftol": 1e-12, "maxiter": 500},
        )
        q = np.clip(res.x, 0, None)
        q /= q.sum()
        if np.all(c.T @ q <= hi + 1e-7) and np.all(c.T @ q >= lo - 1e-7):
            best = max(best, float(expected_reward(q, skills, M)))
    return best


def test_omd_feasible_and_near_optimal_under_binding_packing_and_covering() -> None:
    problem = binding_problem()
    # 5,000 rounds meet every bound below with the margins of 20,000 (final reward within
    # 3e-4 of OPT at both, time-averaged surrogate cost 0.3988 and 0.3993 against 0.402).
    horizon, runs = 5_000, 4
    batch = ProblemBatch(problem, runs)
    pol = OMDApproachability(problem, horizon=horizon, n_runs=runs, seed=3, eta_mult=0.05)
    _, costs, phis, surrogate = run_fixed_skills(pol, batch, SKILLS, horizon)
    avg_cost = costs.mean(axis=0)
    assert np.all(avg_cost[:, 0] <= 0.8 + 1e-9)
    assert np.all(avg_cost[:, 1] >= 0.4 - 1e-9)
    opt = best_feasible_value(problem, SKILLS)
    unconstrained = float(expected_reward(np.array([0.5, 0.5, 0, 0, 0, 0]), SKILLS, M))
    assert opt < unconstrained - 0.05  # the constraints bind
    final = expected_reward(pol.q, SKILLS, M)
    assert np.all(final >= opt - 0.01)
    # q_T may sit slightly outside S (the dual cuts one half-space at a time; only the
    # average is guaranteed), so it may beat OPT by a little, never by much.
    assert np.all(final <= opt + 0.01)
    assert np.all(phis[-horizon // 4 :].mean(axis=0) >= opt - 0.015)
    # The time-averaged surrogate cost C^T q_t is (nearly) in S: the dual did its job (Lemma 5
    # bounds its distance by the dual's regret / T; q_T alone may sit a little outside).
    u = surrogate.mean(axis=0)
    assert np.all(u[:, 0] <= 0.4 + 0.002)
    assert np.all(u[:, 1] >= 0.4 - 0.002)


def test_same_seed_same_trajectory_different_seed_different() -> None:
    problem = binding_problem()
    batch = ProblemBatch(problem, 3)

    def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
        pol = OMDApproachability(problem, horizon=500, n_runs=3, seed=seed)
        rewards, _, _, _ = run_fixed_skills(pol, batch, SKILLS, 200)
        return rewards, pol.q

    r1, q1 = run(11)
    r2, q2 = run(11)
    r3, _ = run(12)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(q1, q2)
    assert not np.array_equal(r1, r3)


def test_batch_one_is_per_round_and_batching_changes_update_times() -> None:
    problem = binding_problem()
    batch = ProblemBatch(problem, 1)
    per_round = OMDApproachability(problem, horizon=100, seed=0, batch=1)
    batched = OMDApproachability(problem, horizon=100, seed=0, batch=10)
    run_fixed_skills(per_round, batch, SKILLS, 1)
    run_fixed_skills(batched, batch, SKILLS, 1)
    assert not np.allclose(per_round.q, 1 / 6)  # moved after one round
    np.testing.assert_array_equal(batched.q, np.full((1, 6), 1 / 6))  # waits for the batch end
    run_fixed_skills(batched, batch, SKILLS, 9)
    assert not np.allclose(batched.q, 1 / 6)


def test_paper_variant_hyperparameters_follow_the_paper() -> None:
    problem = binding_problem()
    pol = OMDApproachability(problem, horizon=10_000, variant="paper")
    k, m, gamma = 6, M, 1 / 60
    assert pol.gamma == pytest.approx(gamma)
    assert pol.batch_size == 10
    assert pol.eta == pytest.approx(0.05 * np.sqrt(2 * 10_000 * k * m * (1 / gamma + m - 1)))
    assert pol.dual_step == 0.05
    assert (pol.estimator_name, pol.floor) == ("importance", "fixed")


def test_default_variant_is_the_model_one() -> None:
    problem = binding_problem()
    pol = OMDApproachability(problem, horizon=10_000)
    k, m, gamma = 6, M, 1 / 60
    assert (pol.variant, pol.estimator_name, pol.floor) == ("model", "model", "decay")
    assert pol.ix == pytest.approx(0.5 / k)
    assert pol.eta == pytest.approx(1e-3 * np.sqrt(2 * 10_000 * k * m * (1 / gamma + m - 1)))
    anytime = OMDApproachability(problem, horizon=10_000, eta_schedule="anytime")
    assert anytime.eta == pytest.approx(3e-4 * 2 * np.sqrt(k * m * (1 / gamma + m - 1)))
    assert OMDApproachability(problem, horizon=10, eta_mult=0.2).eta_mult == 0.2
    # The contextual form keeps Algorithm 2 as printed unless asked.
    assert ContextualOMD(problem, horizon=10, n_contexts=2).variant == "paper"


def test_ix_per_k_scales_with_the_expert_set() -> None:
    """``ix_per_k`` sets the offset relative to K (``ix`` overrides it), and a resized policy
    recomputes it for its new expert set; a negative one is refused."""
    problem = Problem([[1.0], [0.0], [0.5], [0.2]], 2, Constraints(upper=[1.0]))
    pol = OMDApproachability(problem, horizon=100, ix_per_k=1.0)
    assert pol.ix == 1.0 / 4
    assert OMDApproachability(problem, horizon=100, ix_per_k=1.0, ix=0.3).ix == 0.3
    smaller = Problem([[1.0], [0.0], [0.5]], 2, Constraints(upper=[1.0]))
    assert pol.resized(smaller, [0, 1, 2]).ix == 1.0 / 3
    with pytest.raises(InvalidValueError, match="ix_per_k"):
        OMDApproachability(problem, horizon=100, ix_per_k=-1.0)


def test_infeasible_constraints_fail_at_construction() -> None:
    problem = Problem(COSTS, M, Constraints(upper=[0.8, None], lower=[None, 2.5]))
    with pytest.raises(InfeasibleConstraintsError, match="coordinate 1"):
        OMDApproachability(problem, horizon=100)


def test_bad_hyperparameters_are_named() -> None:
    problem = binding_problem()
    with pytest.raises(ValueError, match="gamma"):
        OMDApproachability(problem, horizon=100, gamma=0.5)
    with pytest.raises(ValueError, match="eta_mult"):
        OMDApproachability(problem, horizon=100, eta_mult=-1.0)
    with pytest.raises(ValueError, match="batch"):
        OMDApproachability(problem, horizon=100, batch=0)


# ------------------------------------------------------------------ the approachability dual
def test_dual_stays_at_zero_while_inside_and_on_the_bound() -> None:
    lo, hi = np.array([[0.0, 0.2]]), np.array([[0.5, 1.0]])
    dual = ApproachabilityDual(lo, hi, step=0.05, tol=1e-12)
    for u in ([0.3, 0.5], [0.5, 0.2], [0.5 + 1e-15, 0.2 - 1e-15], [0.0, 1.0]):
        dual.step(np.array([u]))
        np.testing.assert_array_equal(dual.w, 0.0)
    dual.step(np.array([[0.7, 0.5]]))  # outside on coordinate 0 by 0.2
    np.testing.assert_allclose(dual.w, [[0.05 * 0.2, 0.0]])


def test_dual_stays_in_the_unit_ball_and_points_at_the_violation() -> None:
    lo, hi = np.array([[0.0, 0.5]]), np.array([[0.1, 1.0]])
    dual = ApproachabilityDual(lo, hi, step=1.0, tol=1e-12)
    for _ in range(50):
        dual.step(np.array([[5.0, 0.0]]))  # far above the packing bound, below the covering one
    assert np.linalg.norm(dual.w) <= 1.0 + 1e-12
    assert dual.w[0, 0] > 0 > dual.w[0, 1]


def test_qp_cut_is_scale_invariant_and_vanishes_at_zero() -> None:
    """A tiny nonzero w enforces the same half-space as w / |w|; w = 0 enforces nothing."""
    problem = binding_problem()
    batch = ProblemBatch(problem, 3)
    lo, hi = batch.lo, batch.hi
    dual = ApproachabilityDual(lo, hi, step=0.05, tol=1e-12)
    dual.w = np.array([[1e-9, 0.0], [1.0, 0.0], [0.0, 0.0]])
    a, b = dual.halfspace(batch.costs, np.arange(3))
    from msroute.core.qp.projection import project_step

    y = np.tile(np.array([0.6, 0.3, 0.05, 0.03, 0.01, 0.01]), (3, 1))
    q = project_step(y, 0.0, a, b)
    np.testing.assert_allclose(q[0], q[1], atol=1e-9)
    assert q[0, :2].sum() == pytest.approx(0.4, abs=1e-9)
    np.testing.assert_allclose(q[2], y[2], atol=1e-12)


# ------------------------------------------------------------------ contextual (Algorithm 2)
def test_contextual_policies_win_when_contexts_want_different_experts() -> None:
    # Context 0 scores only dimension 0 (expert 0 best), context 1 only dimension 1 (expert 3).
    skills = np.array([[0.9, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.9]])
    weights = np.eye(2)
    costs = np.array([[1.0], [0.0], [0.0], [1.0]])
    problem = Problem(costs, 1, Constraints(upper=[0.9]))
    runs, horizon = 4, 3000  # the margins below are 3x (reward), 3x (cost) and 0.3 (q) here
    batch = ProblemBatch(problem, runs)
    rng = np.random.default_rng(5)
    contexts = rng.integers(0, 2, size=(horizon, runs))
    ctx_pol = ContextualOMD(
        problem, horizon=horizon, n_runs=runs, n_contexts=2, seed=1, batch=10, eta_mult=0.05
    )
    flat_pol = OMDApproachability(problem, horizon=horizon, n_runs=runs, seed=1, eta_mult=0.05)
    totals = {"ctx": np.zeros(runs), "flat": np.zeros(runs)}
    cost_ctx = np.zeros((runs, 1))
    for t in range(horizon):
        v = skills[None] * weights[contexts[t]][:, :, None]
        for key, pol, ctx in (("ctx", ctx_pol, contexts[t]), ("flat", flat_pol, None)):
            decision = pol.select(ctx)
            mask = draws_to_mask(decision.draws, 4)
            r = batch_sum_max_reward(v, mask)
            c = batch.realized_cost(mask)
            pol.update(decision, r, c)
            totals[key] += r
            if key == "ctx":
                cost_ctx += c
    assert np.all(totals["ctx"] / horizon > totals["flat"] / horizon + 0.1)
    # The cap binds at the optimum of both contexts, so the realized average sits on it up to
    # sampling noise (Theorem 2's sampling term, sd about 0.004 here).
    assert np.all(cost_ctx / horizon <= 0.9 + 0.015)
    q = ctx_pol.q
    assert q.shape == (runs, 2, 4)
    assert np.all(q[:, 0, 0] > 0.5) and np.all(q[:, 1, 3] > 0.5)


def test_contextual_needs_a_context_and_checks_its_range() -> None:
    pol = ContextualOMD(binding_problem(), horizon=100, n_runs=2, n_contexts=3)
    with pytest.raises(ValueError, match="context"):
        pol.select()
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        pol.select(np.array([0, 3]))


def test_contextual_anytime_eta_grows_with_the_visit_count() -> None:
    pol = ContextualOMD(binding_problem(), horizon=100, n_contexts=2)
    k, m, gamma = 6, M, 1 / 60
    assert pol.eta == pytest.approx(2 * np.sqrt(k * m * (1 / gamma + m - 1)))
    assert pol.eta_schedule == "anytime" and pol.batch_size == 1


# ---------------------------------------------------------------------- decisions are values
def test_pending_contextual_decisions_credit_their_own_context() -> None:
    """Two selects (contexts 0 then 1) before any feedback: the first feedback goes to context
    0, whose policy moves, and context 1's policy stays where it was."""
    pol = ContextualOMD(binding_problem(), horizon=100, n_runs=1, n_contexts=2, seed=0)
    start = pol.q
    first = pol.select(np.array([0]))
    second = pol.select(np.array([1]))
    assert first.context is not None and first.context.tolist() == [0]
    assert second.context is not None and second.context.tolist() == [1]
    pol.update(first, np.array([2.0]), np.zeros((1, 2)))
    q = pol.q
    assert not np.array_equal(q[0, 0], start[0, 0])  # context 0 learned
    np.testing.assert_array_equal(q[0, 1], start[0, 1])  # context 1 untouched
    assert pol._visits.tolist() == [[1, 0]]
    pol.update(second, np.array([1.0]), np.zeros((1, 2)))
    assert pol._visits.tolist() == [[1, 1]]


def test_importance_weight_divides_by_the_decisions_own_propensity() -> None:
    """A decision fed back after q moved is weighted by the q it was drawn from (eq. step g)."""
    pol = OMDApproachability(
        binding_problem(), horizon=100, n_runs=1, seed=2, batch=2, variant="paper"
    )
    d1, d2, d3 = pol.select(), pol.select(), pol.select()
    pol.update(d1, np.array([1.0]), np.zeros((1, 2)))
    pol.update(d2, np.array([2.0]), np.zeros((1, 2)))  # the QP step: q moves, g resets
    assert not np.allclose(pol.q, d3.probs)
    pol.update(d3, np.array([2.5]), np.zeros((1, 2)))
    counts = np.bincount(d3.draws[0], minlength=6).astype(float)
    want = (2.5 - 1.5) * counts / d3.probs[0]  # baseline: mean of the two earlier rewards
    np.testing.assert_array_equal(pol._grad[0, 0], want)


def test_masked_decision_logs_the_renormalized_q_and_learns_finitely() -> None:
    pol = OMDApproachability(binding_problem(), horizon=100, n_runs=2, seed=3, batch=4)
    eligible = np.array([[True, False, True, False, True, True], [False] * 5 + [True]])
    q = pol.q
    dec = pol.select(eligible=eligible)
    want = np.where(eligible, q, 0.0)
    np.testing.assert_allclose(dec.probs, want / want.sum(axis=1, keepdims=True), rtol=1e-15)
    assert dec.draws[1].tolist() == [5, 5]  # the only eligible expert, drawn M times
    assert eligible[0, dec.draws[0]].all()
    pol.update(dec, np.array([1.0, 2.0]), np.zeros((2, 2)))
    assert np.isfinite(pol._grad).all()
    assert (pol._grad[:, 0][~eligible] == 0.0).all()
