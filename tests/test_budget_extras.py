"""The exact-cost surrogate, fixed routing policies, names on Problem, shape hints."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import msroute
from msroute.policies.duals import expected_team_cost, expected_team_cost_grad
from msroute.policies.fixed import FixedPolicy
from test_duals import BUDGET, FLOOR, USD, V, llm_problem, play


def test_expected_team_cost_is_the_exact_mean_over_all_draw_sequences() -> None:
    rng = np.random.default_rng(0)
    k, m = 4, 3
    q = rng.dirichlet(np.ones(k))
    costs = rng.uniform(size=(k, 2))
    exact = np.zeros(2)
    for seq in itertools.product(range(k), repeat=m):  # every ordered draw sequence
        team = sorted(set(seq))
        exact += np.prod(q[list(seq)]) * costs[team].sum(axis=0)
    got = expected_team_cost(q[None], costs[None], m)[0]
    np.testing.assert_allclose(got, exact, rtol=1e-13)
    # The gradient against central differences.
    grad = expected_team_cost_grad(q[None], costs[None], m)[0]
    for i in range(k):
        step = np.zeros(k)
        step[i] = 1e-6
        up = expected_team_cost((q + step)[None], costs[None], m)[0]
        down = expected_team_cost((q - step)[None], costs[None], m)[0]
        np.testing.assert_allclose(grad[i], (up - down) / 2e-6, rtol=1e-6)


def test_exact_surrogate_spends_closer_to_the_budget_and_stays_feasible() -> None:
    _, lin, _, _ = play(llm_problem(), 5000)
    _, ex, _, pol = play(llm_problem(), 5000, surrogate="exact")
    spend_lin, spend_ex = lin.mean(axis=0)[:, 0], ex.mean(axis=0)[:, 0]
    assert np.all(spend_ex <= BUDGET) and np.all(ex.mean(axis=0)[:, 1] >= FLOOR)
    assert np.all(spend_ex > spend_lin)  # it leaves less of the budget unused
    lo, hi = pol.dual.target()  # the margin shrinks the box, in the user's units
    assert np.all(hi[:, 0] < BUDGET) and np.all(hi[:, 0] > 0.9 * BUDGET)
    assert np.all(lo[:, 1] > FLOOR)


def test_exact_surrogate_does_not_depend_on_the_units() -> None:
    ref, _, _, _ = play(llm_problem(), 1500, surrogate="exact")
    got, _, _, _ = play(llm_problem(1e4, 1e-4), 1500, surrogate="exact")
    np.testing.assert_array_equal(got, ref)


def test_exact_surrogate_needs_the_invariant_dual() -> None:
    with pytest.raises(msroute.InvalidValueError, match="invariant"):
        msroute.OMDApproachability(llm_problem(), horizon=10, dual="paper", surrogate="exact")


def test_uniform_and_fixed_draw_iid_from_their_q() -> None:
    p = llm_problem()
    q = [0.5, 0.0, 0.0, 0.25, 0.0, 0.25]
    pol = msroute.make_policy("fixed", p, horizon=10, n_runs=2, seed=0, q=q)
    draws = np.concatenate([pol.select().draws for _ in range(4000)])
    freq = np.bincount(draws.ravel(), minlength=6) / draws.size
    np.testing.assert_allclose(freq, q, atol=0.02)
    uni = msroute.make_policy("uniform", p, horizon=10, n_runs=2, seed=0)
    np.testing.assert_array_equal(uni.q, np.full((2, 6), 1 / 6))  # type: ignore[attr-defined]
    decision = uni.select()
    assert decision.probs is not None and decision.draws.shape == (2, 2)
    uni.update(decision, np.zeros(2), np.zeros((2, 2)))  # nothing to learn
    with pytest.raises(msroute.InvalidValueError, match="sum to 1"):
        FixedPolicy(p, horizon=10, q=[0.5] * 6)


def test_names_on_problem_and_q_as_a_mapping() -> None:
    names = ["big", "large", "mid", "small", "tiny", "in_house"]
    cons = msroute.Constraints(upper=[BUDGET, None], lower=[None, FLOOR])
    p = msroute.Problem(
        np.stack([USD, np.eye(6)[5]], 1),
        2,
        cons,
        expert_names=names,
        cost_names=["usd", "in_house"],
    )
    assert p.cost_names == ("usd", "in_house") and p.expert_names == tuple(names)
    pol = msroute.OMDApproachability(p, horizon=100, seed=0)
    mapping = pol.q_named()
    assert list(mapping) == names and abs(sum(mapping.values()) - 1) < 1e-12
    fixed = FixedPolicy(p, horizon=10, q={"in_house": 0.5, "small": 0.5})
    assert fixed.q_named() == {n: (0.5 if n in ("in_house", "small") else 0.0) for n in names}
    with pytest.raises(msroute.InvalidValueError, match="unknown experts"):
        FixedPolicy(p, horizon=10, q={"nobody": 1.0})
    with pytest.raises(msroute.InvalidValueError, match="repeats"):
        msroute.Problem(p.costs, 2, cons, expert_names=["a"] * 6)
    with pytest.raises(msroute.InvalidValueError, match="differ"):
        named = msroute.Constraints(upper=[BUDGET, None], lower=[None, FLOOR], names=["a", "b"])
        msroute.Problem(p.costs, 2, named, cost_names=["usd", "in_house"])


def test_names_survive_save_and_load(tmp_path) -> None:
    p = msroute.Problem(
        np.stack([USD, np.eye(6)[5]], 1),
        2,
        msroute.Constraints(upper=[BUDGET, None], lower=[None, FLOOR]),
        expert_names=list("abcdef"),
        cost_names=["usd", "in_house"],
    )
    pol = msroute.OMDApproachability(p, horizon=100, seed=0)
    pol.save(tmp_path / "r.npz")
    back = msroute.load_policy(tmp_path / "r.npz")
    assert back.problem_batch.problems[0].expert_names == tuple("abcdef")
    assert back.problem_batch.problems[0].cost_names == ("usd", "in_house")


def test_transposed_skills_get_a_hint_and_simulate_takes_a_problem() -> None:
    p = llm_problem()
    with pytest.raises(msroute.InvalidValueError, match=r"skills\.T"):
        msroute.expected_reward(np.full(6, 1 / 6), V.T, 2)
    env_t = msroute.StochasticEnv(V.T[:, :4], kappa=20, seed=[0])  # (K, N) with N = 4 experts
    pol = msroute.make_policy("uniform", p, horizon=5, n_runs=1, seed=0)
    with pytest.raises(msroute.InvalidValueError, match="transpose"):
        msroute.simulate({"u": pol}, env_t, p, 5)
    env = msroute.StochasticEnv(V, kappa=20, seed=[0, 1])
    pols = {"u": msroute.make_policy("uniform", p, horizon=5, n_runs=2, seed=0)}
    traj = msroute.simulate(pols, env, p, 5)  # a Problem: shared by the environment's 2 runs
    assert traj["u"].rewards.shape == (5, 2)
