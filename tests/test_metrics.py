"""Tests of the paper's metrics on recorded trajectories (eqs. (4)-(5), Section 6.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msroute.core.reward import expected_reward, monte_carlo_reward
from msroute.errors import MSRouteError
from msroute.metrics import (
    constraint_regret,
    feasible,
    objective_regret_proxy,
    rolling_mean,
    running_average,
    time_averaged,
    true_regret,
)

INF = np.inf


# ---------------------------------------------------------------------------- by hand
# T = 3 rounds, R = 2 runs, d = 2 cost coordinates.
COSTS = np.array(
    [
        [[1.0, 0.0], [0.0, 0.0]],
        [[0.0, 2.0], [1.0, 1.0]],
        [[2.0, 1.0], [2.0, 2.0]],
    ]
)
# Run 0: at most 0.8 on coordinate 0, at least 0.5 on coordinate 1.
# Run 1: at most 1.0 on both.
LO = np.array([[-INF, 0.5], [-INF, -INF]])
HI = np.array([[0.8, INF], [1.0, 1.0]])


def test_averages_by_hand():
    # Running averages of run 0: (1, 0), (0.5, 1), (1, 1); of run 1: (0, 0), (0.5, 0.5), (1, 1).
    np.testing.assert_allclose(
        running_average(COSTS),
        [[[1.0, 0.0], [0.0, 0.0]], [[0.5, 1.0], [0.5, 0.5]], [[1.0, 1.0], [1.0, 1.0]]],
    )
    np.testing.assert_allclose(time_averaged(COSTS), [[1.0, 1.0], [1.0, 1.0]])
    rewards = np.array([[1.0, 0.0], [2.0, 3.0], [6.0, 3.0]])
    np.testing.assert_allclose(time_averaged(rewards), [3.0, 2.0])
    np.testing.assert_allclose(running_average(rewards, at=[1, 3]), [[1.0, 0.0], [3.0, 2.0]])


def test_constraint_regret_by_hand():
    r2 = constraint_regret(COSTS, LO, HI)
    # Run 0: t=1 (1, 0) is 0.2 over and 0.5 under -> sqrt(0.04 + 0.25); t=2 (0.5, 1) inside;
    # t=3 (1, 1) is 0.2 over. Run 1: inside, inside, on the boundary (1, 1) -> 0.
    expected = np.array([[np.sqrt(0.29), 0.0], [0.0, 0.0], [0.2, 0.0]])
    np.testing.assert_allclose(r2, expected, rtol=1e-14, atol=1e-15)
    assert r2[1, 0] == 0.0 and r2[2, 1] == 0.0  # exactly zero inside / on the boundary
    np.testing.assert_allclose(constraint_regret(COSTS, LO, HI, at=[3, 1]), expected[[2, 0]])
    # Shared (d,) bounds broadcast over runs.
    shared = constraint_regret(COSTS, [-INF, -INF], [0.75, 0.75], at=[3])
    np.testing.assert_allclose(shared, [[np.hypot(0.25, 0.25), np.hypot(0.25, 0.25)]])


def test_feasible_by_hand_at_both_tolerances():
    avg = time_averaged(COSTS)  # (1, 1) for both runs
    assert feasible(avg, LO, HI).tolist() == [False, True]  # run 0 is 0.2 over its cap
    hi_close = np.array([[1.0 - 5e-4, INF], [1.0, 1.0 - 2e-3]])
    assert feasible(avg, LO, hi_close, tol=1e-9).tolist() == [False, False]
    assert feasible(avg, LO, hi_close, tol=1e-3).tolist() == [True, False]
    lo_close = np.array([[-INF, 1.0 + 5e-4], [-INF, -INF]])
    assert feasible(avg, lo_close, [INF, INF], tol=1e-9).tolist() == [False, True]
    assert feasible(avg, lo_close, [INF, INF], tol=1e-3).tolist() == [True, True]
    # Exactly on the bound is feasible even at tol = 0.
    assert feasible([[1.0, 1.0]], [1.0, -INF], [INF, 1.0], tol=0.0).tolist() == [True]


def test_true_regret_by_hand():
    phi = np.array([[2.0, 1.0], [3.0, 1.0], [4.0, 4.0]])
    # OPT = (4, 3): run 0 averages 2, 2.5, 3 -> 2, 1.5, 1; run 1 averages 1, 1, 2 -> 2, 2, 1.
    np.testing.assert_allclose(
        true_regret([4.0, 3.0], phi), [[2.0, 2.0], [1.5, 2.0], [1.0, 1.0]], rtol=1e-15
    )
    np.testing.assert_allclose(true_regret(4.0, phi, at=[2]), [[1.5, 3.0]])  # one OPT for all


def test_objective_regret_proxy_by_hand():
    # K = 2 experts, N = 1 dimension, M = 2 draws, q_T = (0.5, 0.5); T = 3, R = 1.
    # Round 1 V = (1, 0): Phi = 1 * (1 - 0.5^2) = 0.75.
    # Round 2 V = (0.2, 0.6): Phi = (0.6 - 0.2)(1 - 0.5^2) + 0.2 = 0.5.
    # Round 3 V = (0.4, 0.4): Phi = 0.4 (a tie: any draw gets 0.4).
    skills = np.array([[[1.0, 0.0]], [[0.2, 0.6]], [[0.4, 0.4]]])[:, None]
    rewards = np.array([[1.0], [0.6], [0.4]])
    r1 = objective_regret_proxy(rewards, [[0.5, 0.5]], skills, m_draws=2)
    # Differences -0.25, -0.1, 0 -> running means -0.25, -0.175, -0.35/3.
    np.testing.assert_allclose(r1, [[-0.25], [-0.175], [-0.35 / 3]], rtol=1e-14)
    # q_T on one expert: Phi_s = V_s[0, 0]: 1, 0.2, 0.4.
    r1_pure = objective_regret_proxy(rewards, [[1.0, 0.0]], skills, m_draws=2, at=[3])
    np.testing.assert_allclose(r1_pure, [[(0.0 - 0.4 + 0.0) / 3]], atol=1e-15)


def test_rolling_mean_by_hand():
    x = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 3.0], [10.0, 3.0]])
    np.testing.assert_allclose(rolling_mean(x, 2), [[1.5, 0.0], [2.5, 1.5], [6.5, 3.0]])
    np.testing.assert_allclose(rolling_mean(x, 4), [[4.0, 1.5]])
    np.testing.assert_array_equal(rolling_mean(x, 1), x)


# ---------------------------------------------------------------------------- properties
@st.composite
def cost_box_cases(draw):
    t = draw(st.integers(1, 12))
    r = draw(st.integers(1, 3))
    d = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    costs = rng.uniform(0.0, 3.0, (t, r, d)) * (rng.uniform(size=(t, r, d)) < 0.7)
    avg = running_average(costs)[-1]
    # Per coordinate: inside (maybe exactly on a bound), above the box or below it.
    kind = rng.integers(0, 3, (r, d))
    a, b = rng.uniform(0.0, 1.0, (r, d)), rng.uniform(1e-3, 1.0, (r, d))
    on_edge = rng.uniform(size=(r, d)) < 0.3
    a = np.where(on_edge, 0.0, a)
    lo = np.where(kind == 0, avg - a, np.where(kind == 1, avg - b - a, avg + b))
    hi = np.where(
        kind == 0, avg + np.where(on_edge, 0.0, b), np.where(kind == 1, avg - b, avg + b + a)
    )
    lo = np.where((kind == 0) & (rng.uniform(size=(r, d)) < 0.3), -INF, lo)
    hi = np.where((kind == 0) & (rng.uniform(size=(r, d)) < 0.3), INF, hi)
    gap = np.where(kind == 0, 0.0, b)  # distance of avg to the box, coordinate-wise
    return costs, lo, hi, gap


@given(cost_box_cases())
@settings(max_examples=150, deadline=None)
def test_r2_is_zero_exactly_inside_and_the_distance_outside(case):
    costs, lo, hi, gap = case
    r2 = constraint_regret(costs, lo, hi, at=[costs.shape[0]])[0]
    inside = np.all(gap == 0.0, axis=-1)
    assert np.all(r2[inside] == 0.0)
    assert np.all(r2[~inside] > 0.0)
    np.testing.assert_allclose(r2, np.sqrt((gap**2).sum(axis=-1)), rtol=1e-9, atol=1e-12)
    # feasible() at tol = 0 agrees (the box was built around this very average).
    assert np.array_equal(feasible(running_average(costs)[-1], lo, hi, tol=0.0), inside)


@given(
    t=st.integers(1, 40),
    window=st.integers(1, 40),
    shape=st.sampled_from([(), (3,), (2, 2)]),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=100, deadline=None)
def test_rolling_mean_matches_a_naive_loop(t, window, shape, seed):
    window = min(window, t)
    rng = np.random.default_rng(seed)
    x = rng.normal(5.0, 3.0, (t, *shape))
    naive = np.array([x[i : i + window].mean(axis=0) for i in range(t - window + 1)])
    got = rolling_mean(x, window)
    assert got.shape == (t - window + 1, *shape)
    np.testing.assert_allclose(got, naive, rtol=1e-12, atol=1e-12)


def test_rolling_mean_precision_on_a_long_run():
    rng = np.random.default_rng(5)
    x = 1e3 + rng.uniform(0.0, 3.0, (20_000, 2))
    got = rolling_mean(x, 500)
    for i in (0, 7_777, 19_500):
        np.testing.assert_allclose(got[i], x[i : i + 500].mean(axis=0), rtol=1e-13)


# ---------------------------------------------------------------------------- R1 proxy
def small_run(seed: int, t: int = 40, r: int = 3, n: int = 2, k: int = 6):
    rng = np.random.default_rng(seed)
    skills = rng.uniform(0.0, 1.0, (t, r, n, k))
    skills[skills < 0.2] = 0.0  # zeros
    skills[:, :, 0, :2] = 0.5  # ties
    q = rng.dirichlet(np.ones(k), size=r)
    q[0, 1] = 0.0  # an expert never routed
    q[0] /= q[0].sum()
    rewards = rng.uniform(0.0, n, (t, r))
    return skills, q, rewards


@pytest.mark.parametrize("k", [6, 70])  # 70 experts: more than 6 bits in the sort keys
@pytest.mark.parametrize("m", [1, 3])
def test_exact_r1_matches_the_reward_module(k, m):
    skills, q, rewards = small_run(6, k=k)
    phi = np.asarray(expected_reward(q[None], skills, m))  # (T, R)
    want = np.cumsum(phi - rewards, axis=0) / np.arange(1, len(rewards) + 1)[:, None]
    got = objective_regret_proxy(rewards, q, skills, m)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("seed", [-1, 1.5, "a"])
def test_monte_carlo_r1_refuses_a_bad_seed(seed):
    # msroute's own error naming the seed; numpy alone raised a bare ValueError or TypeError.
    skills, q, rewards = small_run(0)
    with pytest.raises(MSRouteError, match="seed"):
        objective_regret_proxy(rewards, q, skills, 2, method="monte_carlo", seed=seed)


def test_exact_r1_agrees_with_the_monte_carlo_r1():
    skills, q, rewards = small_run(7, t=30, r=3, n=2, k=5)
    m, n_mc = 3, 2000
    exact = objective_regret_proxy(rewards, q, skills, m)
    mc = objective_regret_proxy(
        rewards, q, skills, m, method="monte_carlo", n_samples=n_mc, seed=123
    )
    # Standard error of the Monte Carlo R1(t): (1/t) sqrt(sum_s se_s^2), se_s per round.
    _, se = monte_carlo_reward(q[None], skills, m, n_samples=n_mc, seed=456)
    t = np.arange(1, 31)[:, None]
    se_r1 = np.sqrt(np.cumsum(se**2, axis=0)) / t
    z = np.abs(mc - exact) / se_r1
    assert z.max() < 5.0
    assert np.abs(mc - exact).max() > 0.0  # it is an estimate, not the same computation
    again = objective_regret_proxy(
        rewards, q, skills, m, method="monte_carlo", n_samples=n_mc, seed=123
    )
    np.testing.assert_array_equal(mc, again)  # seeded


def test_chunked_and_whole_skills_give_the_same_r1():
    rng = np.random.default_rng(8)
    t, r, n, k = 2_500, 2, 2, 5
    skills = rng.uniform(0.0, 1.0, (t, r, n, k))
    q = rng.dirichlet(np.ones(k), size=r)
    rewards = rng.uniform(0.0, 2.0, (t, r))
    calls = []

    def source(start, stop):
        calls.append((start, stop))
        return skills[start:stop].copy()

    at = [1, 999, 1000, 1001, 2500]
    whole = objective_regret_proxy(rewards, q, skills, 2, at=at)
    chunked = objective_regret_proxy(rewards, q, source, 2, at=at)
    np.testing.assert_array_equal(whole, chunked)
    assert calls == [(0, 1000), (1000, 2000), (2000, 2500)]
    calls.clear()
    mc_whole = objective_regret_proxy(
        rewards[:300], q, skills[:300], 2, method="monte_carlo", n_samples=20, seed=1
    )
    mc_chunk = objective_regret_proxy(
        rewards[:300], q, source, 2, method="monte_carlo", n_samples=20, seed=1
    )
    np.testing.assert_array_equal(mc_whole, mc_chunk)


def test_contextual_r1_scores_each_round_with_its_context_policy():
    skills, _, rewards = small_run(9, t=25, r=2, n=3, k=4)
    rng = np.random.default_rng(10)
    weights = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    contexts = rng.integers(0, 2, (25, 2))
    q = rng.dirichlet(np.ones(4), size=(2, 2))  # (R, X, K)
    got = objective_regret_proxy(rewards, q, skills, 2, contexts=contexts, context_weights=weights)
    q_rounds = q[np.arange(2)[None, :], contexts]  # (T, R, K)
    phi = np.asarray(expected_reward(q_rounds, skills * weights[contexts][..., None], 2))
    want = np.cumsum(phi - rewards, axis=0) / np.arange(1, 26)[:, None]
    np.testing.assert_allclose(got, want, atol=1e-13)
    # Contexts given as (T,) are shared by every run.
    shared = objective_regret_proxy(
        rewards, q, skills, 2, contexts=contexts[:, 0], context_weights=weights
    )
    q_shared = q[np.arange(2)[None, :], contexts[:, :1]]
    phi = np.asarray(expected_reward(q_shared, skills * weights[contexts[:, :1]][..., None], 2))
    want = np.cumsum(phi - rewards, axis=0) / np.arange(1, 26)[:, None]
    np.testing.assert_allclose(shared, want, atol=1e-13)


# ---------------------------------------------------------------------------- bad inputs
NAN_COSTS = COSTS.copy()
NAN_COSTS[1, 0, 0] = np.nan


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: constraint_regret(NAN_COSTS, LO, HI), "costs contains"),
        (lambda: constraint_regret(COSTS[0], LO, HI), "costs must have 3 dimensions"),
        (lambda: constraint_regret(COSTS, LO[:, :1], HI), "lo_ori has shape"),
        (lambda: constraint_regret(COSTS, LO, np.full((3, 2), 1.0)), "hi_ori has shape"),
        (lambda: constraint_regret(COSTS, np.full((2, 2), np.nan), HI), "lo_ori contains NaN"),
        (lambda: constraint_regret(COSTS, HI, LO), "lo_ori must be <= hi_ori"),
        (lambda: constraint_regret(COSTS, LO, HI, at=[0]), r"at must lie in \[1, T\]"),
        (lambda: constraint_regret(COSTS, LO, HI, at=[4]), r"at must lie in \[1, T\]"),
        (lambda: constraint_regret(COSTS, LO, HI, at=[1.5]), "at must hold whole"),
        (lambda: constraint_regret(COSTS, LO, HI, at=[]), "at must be a non-empty"),
        (lambda: feasible([[np.nan, 0.0]], [0, 0], [1, 1]), "avg_cost contains"),
        (lambda: feasible([[0.0, 0.0]], [0, 0], [1, 1], tol=-1.0), "tol"),
        (lambda: feasible([[0.0, 0.0, 0.0]], [0, 0], [1, 1]), "lo_ori has shape"),
        (lambda: true_regret([1.0, 2.0, 3.0], np.ones((4, 2))), "opt_value has 3 entries"),
        (lambda: true_regret(1.0, np.full((4, 2), np.nan)), "expected_rewards contains"),
        (lambda: true_regret(np.nan, np.ones((4, 2))), "opt_value contains"),
        (lambda: rolling_mean(np.ones((4, 2)), 5), "window == 5"),
        (lambda: rolling_mean([1.0, np.nan], 1), "x contains"),
        (lambda: time_averaged(np.zeros((0, 2))), "at least one round"),
    ],
)
def test_bad_inputs_raise_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_r1_inputs_raise_value_error_naming_the_argument():
    skills, q, rewards = small_run(11, t=10, r=2, n=2, k=4)
    bad_rewards = rewards.copy()
    bad_rewards[3, 1] = np.nan
    bad_skills = skills.copy()
    bad_skills[2, 0, 1, 1] = np.nan
    cases = [
        ({"rewards": bad_rewards}, "rewards contains"),
        ({"rewards": rewards[:, 0]}, "rewards must have 2 dimensions"),
        ({"skills": bad_skills}, "skills contains"),
        ({"skills": -skills}, "skills must be >= 0"),
        ({"skills": skills[:9]}, r"skills array must have shape \(10, R, N, K\)"),
        ({"skills": skills[:, :1]}, "R = 2"),
        ({"skills": lambda a, b: skills[a:b, :, :, :3]}, r"skills \(0, 10\) must have shape"),
        ({"skills": lambda a, b: bad_skills[a:b]}, "skills contains"),
        ({"final_q": q[:1]}, r"final_q must have shape \(R, K\) with R = 2"),
        ({"final_q": q[:, :3] / q[:, :3].sum(axis=1, keepdims=True)}, "K = 3"),
        ({"final_q": q * 2}, "final_q must sum to one"),
        ({"final_q": np.full_like(q, np.nan)}, "final_q contains"),
        ({"method": "mc"}, "method == 'mc'"),
        ({"at": [11]}, r"at must lie in \[1, T\] = \[1, 10\]"),
        ({"contexts": np.zeros(10, dtype=int)}, "contexts and context_weights go together"),
    ]
    for change, match in cases:
        args = {"rewards": rewards, "final_q": q, "skills": skills, "m_draws": 2}
        args.update(change)
        with pytest.raises(ValueError, match=match):
            objective_regret_proxy(**args)
    weights = np.ones((2, 2))
    with pytest.raises(ValueError, match="contexts must lie in"):
        objective_regret_proxy(
            rewards,
            q[:, None].repeat(2, 1),
            skills,
            2,
            contexts=np.full(10, 2),
            context_weights=weights,
        )
    with pytest.raises(ValueError, match="final_q has 1 contexts"):
        objective_regret_proxy(
            rewards,
            q[:, None],
            skills,
            2,
            contexts=np.zeros(10, dtype=int),
            context_weights=weights,
        )
