"""Tests of the sum-max reward and the exact expected reward of a multinomial policy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msroute.core.reward import (
    batch_sum_max_reward,
    draws_sum_max_reward,
    expected_reward,
    expected_reward_grad,
    monte_carlo_reward,
    sum_max_reward,
)
from msroute.errors import MSRouteError
from msroute.policies.base import draws_to_mask


def brute_force_expected(q: np.ndarray, skills: np.ndarray, m: int) -> float:
    """E[r(A)] by enumerating all K^M draw sequences with their probabilities."""
    k = q.size
    total = 0.0
    for seq in itertools.product(range(k), repeat=m):
        prob = float(np.prod(q[list(seq)]))
        total += prob * skills[:, sorted(set(seq))].max(axis=1).sum()
    return total


def random_simplex(rng: np.random.Generator, k: int, size: tuple[int, ...] = ()) -> np.ndarray:
    return rng.dirichlet(np.ones(k), size=size or None)


# ---------------------------------------------------------------------- exactness
@pytest.mark.parametrize(("k", "m"), [(1, 1), (2, 1), (2, 3), (3, 2), (3, 4), (4, 3), (5, 2)])
def test_expected_reward_equals_enumeration(k, m):
    rng = np.random.default_rng(100 * k + m)
    for n_dims in (1, 3):
        skills = rng.random((n_dims, k))
        if k > 2:
            skills[0, 1] = skills[0, 2]  # a tie in the sort must not matter
        q = random_simplex(rng, k)
        if k > 3:
            q[0], q[-1] = q[0] + q[-1], 0.0  # an expert that is never drawn
        exact = float(expected_reward(q, skills, m))
        assert exact == pytest.approx(brute_force_expected(q, skills, m), abs=1e-12)


def test_expected_reward_one_draw_is_linear():
    # With M = 1 the routed team is one expert: E[r] = sum_i q_i sum_n V[n, i].
    rng = np.random.default_rng(1)
    q, skills = random_simplex(rng, 7), rng.random((3, 7))
    assert float(expected_reward(q, skills, 1)) == pytest.approx(q @ skills.sum(0), abs=1e-14)


def test_point_mass_gives_that_experts_reward():
    skills = np.array([[0.2, 0.9, 0.4], [0.7, 0.1, 0.3]])
    q = np.array([0.0, 0.0, 1.0])
    assert float(expected_reward(q, skills, 5)) == pytest.approx(0.7, abs=1e-15)


def test_monte_carlo_agrees_within_four_standard_errors():
    rng = np.random.default_rng(2)
    k, m, n_dims = 20, 5, 3
    skills, q = rng.random((n_dims, k)), random_simplex(rng, k)
    exact = float(expected_reward(q, skills, m))
    mean, stderr = monte_carlo_reward(q, skills, m, n_samples=20_000, seed=3)
    assert 0 < float(stderr) < 0.01
    assert abs(float(mean) - exact) < 4 * float(stderr)


def test_monte_carlo_batched_and_seeded():
    rng = np.random.default_rng(4)
    q = random_simplex(rng, 6, (2,))
    skills = rng.random((2, 3, 6))
    mean1, se1 = monte_carlo_reward(q, skills, 3, n_samples=4_000, seed=5)
    mean2, _ = monte_carlo_reward(q, skills, 3, n_samples=4_000, seed=5)
    assert mean1.shape == se1.shape == (2,)
    np.testing.assert_array_equal(mean1, mean2)  # same seed, same numbers
    exact = expected_reward(q, skills, 3)
    assert np.all(np.abs(mean1 - exact) < 4 * se1)


# ---------------------------------------------------------------------- gradient and concavity
def test_gradient_matches_finite_differences_along_simplex_directions():
    rng = np.random.default_rng(6)
    k, m, h = 8, 4, 1e-6
    skills = rng.random((3, k))
    q = 0.5 * random_simplex(rng, k) + 0.5 / k  # interior, so q +- h(e_i - e_j) stays valid
    grad = expected_reward_grad(q, skills, m)
    for i, j in [(0, 1), (2, 7), (5, 3), (6, 0)]:
        d = np.zeros(k)
        d[i], d[j] = 1.0, -1.0
        fd = (
            float(expected_reward(q + h * d, skills, m))
            - float(expected_reward(q - h * d, skills, m))
        ) / (2 * h)
        assert grad[i] - grad[j] == pytest.approx(fd, abs=1e-8)


def test_gradient_differs_from_the_unbiased_estimators_mean_by_a_constant():
    """Lemma 6.7 of the paper's reference 37: E[r(A) count_i / q_i] is the gradient of the
    degree-M polynomial E[r]. It agrees with the closed form on the simplex, so the two
    gradients differ by a multiple of the ones vector (which the projection step ignores)."""
    rng = np.random.default_rng(7)
    k, m = 4, 3
    skills, q = rng.random((2, k)), random_simplex(rng, k)
    mean_estimator = np.zeros(k)
    for seq in itertools.product(range(k), repeat=m):
        prob = float(np.prod(q[list(seq)]))
        reward = skills[:, sorted(set(seq))].max(axis=1).sum()
        mean_estimator += prob * reward * np.bincount(seq, minlength=k) / q
    shift = expected_reward_grad(q, skills, m) - mean_estimator
    assert np.ptp(shift) < 1e-12
    assert abs(shift[0]) > 1e-3  # not equal outright: only the differences are intrinsic


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 12),
    st.integers(1, 6),
    st.floats(0.0, 1.0),
    st.integers(0, 2**32 - 1),
)
def test_expected_reward_is_concave_along_segments(k, m, t, seed):
    rng = np.random.default_rng(seed)
    skills = rng.random((2, k)) * rng.choice([0.1, 1.0, 10.0])
    q1, q2 = random_simplex(rng, k), random_simplex(rng, k)
    mid = t * q1 + (1 - t) * q2
    lhs = float(expected_reward(mid, skills, m))
    rhs = t * float(expected_reward(q1, skills, m)) + (1 - t) * float(
        expected_reward(q2, skills, m)
    )
    assert lhs >= rhs - 1e-12 * (1 + abs(rhs))


# ---------------------------------------------------------------------- shapes
def test_runs_with_their_own_skills_equal_loops():
    rng = np.random.default_rng(8)
    r, n_dims, k, m = 4, 3, 9, 5
    q = random_simplex(rng, k, (r,))
    skills = rng.random((r, n_dims, k))
    out, grad = expected_reward(q, skills, m), expected_reward_grad(q, skills, m)
    assert out.shape == (r,) and grad.shape == (r, k)
    for i in range(r):
        assert out[i] == pytest.approx(float(expected_reward(q[i], skills[i], m)), abs=1e-14)
        np.testing.assert_allclose(grad[i], expected_reward_grad(q[i], skills[i], m), atol=1e-14)


def test_one_policy_against_a_sequence_of_skills_equals_loop():
    rng = np.random.default_rng(9)
    t, n_dims, k, m = 5, 2, 6, 3
    q = random_simplex(rng, k)
    skills = rng.random((t, n_dims, k))
    out = expected_reward(q, skills, m)
    assert out.shape == (t,)
    np.testing.assert_allclose(out, [float(expected_reward(q, s, m)) for s in skills], atol=1e-14)
    grad = expected_reward_grad(q, skills, m)
    assert grad.shape == (t, k)
    np.testing.assert_allclose(grad[2], expected_reward_grad(q, skills[2], m), atol=1e-14)


def test_runs_against_a_shared_skill_matrix():
    rng = np.random.default_rng(10)
    q = random_simplex(rng, 5, (3,))
    skills = rng.random((2, 5))
    out = expected_reward(q, skills, 2)
    assert out.shape == (3,)
    np.testing.assert_allclose(out, [float(expected_reward(qi, skills, 2)) for qi in q], atol=1e-14)


def test_single_policy_returns_zero_d_array():
    out = expected_reward([0.5, 0.5], [[1.0, 0.0]], 2)
    assert isinstance(out, np.ndarray) and out.shape == ()


def test_sum_max_and_batch_sum_max_agree():
    rng = np.random.default_rng(11)
    r, n_dims, k, m = 6, 3, 10, 4
    skills = rng.random((r, n_dims, k))
    draws = rng.integers(0, k, size=(r, m))
    mask = np.zeros((r, k), dtype=bool)
    np.put_along_axis(mask, draws, True, axis=1)
    batch = batch_sum_max_reward(skills, mask)
    assert batch.shape == (r,)
    for i in range(r):
        single = sum_max_reward(skills[i], draws[i])
        direct = sum(max(skills[i, n, j] for j in set(draws[i].tolist())) for n in range(n_dims))
        assert single == pytest.approx(direct, abs=1e-15)
        assert batch[i] == pytest.approx(single, abs=1e-15)


def test_the_simulator_reward_from_draws_equals_the_masked_one_bit_for_bit():
    """With zeros among the skills (a maximum of 0 over the routed experts) and repeats."""
    rng = np.random.default_rng(12)
    r, n_dims, k, m = 200, 3, 8, 5
    skills = rng.random((r, n_dims, k)) * (rng.random((r, n_dims, k)) < 0.6)
    draws = rng.integers(0, k, size=(r, m))
    want = batch_sum_max_reward(skills, draws_to_mask(draws, k))
    assert np.array_equal(draws_sum_max_reward(skills, draws), want)
    # Runs that read other runs' skills (levels sharing a seed's stream): the same floats.
    runs = rng.integers(0, r, size=r)
    shared = draws_sum_max_reward(skills, draws, runs)
    assert np.array_equal(shared, draws_sum_max_reward(skills[runs], draws))


def test_sum_max_counts_repeats_once():
    skills = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.3]])
    assert sum_max_reward(skills, [0, 1, 1]) == pytest.approx(0.9 + 0.8)
    assert sum_max_reward(skills, [2, 2]) == pytest.approx(0.5 + 0.3)


# ---------------------------------------------------------------------- invalid input
GOOD_Q = [0.25, 0.25, 0.5]
GOOD_V = [[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]]


@pytest.mark.parametrize(
    ("q", "skills", "m", "error", "match"),
    [
        ([0.25, np.nan, 0.5], GOOD_V, 2, ValueError, "q contains 1 NaN"),
        (GOOD_Q, [[0.1, np.inf, 0.3], [0.3, 0.2, 0.1]], 2, ValueError, "skills contains 1 NaN"),
        ([0.5, 0.5], GOOD_V, 2, ValueError, "q has 2 experts on its last axis but skills has 3"),
        ([0.3, 0.3, 0.5], GOOD_V, 2, ValueError, "q must sum to one"),
        ([0.6, -0.1, 0.5], GOOD_V, 2, ValueError, "q has negative entries"),
        (GOOD_Q, [[0.1, -0.2, 0.3], [0.3, 0.2, 0.1]], 2, ValueError, "skills must be >= 0"),
        (GOOD_Q, [0.1, 0.2, 0.3], 2, ValueError, "skills must have"),
        (GOOD_Q, GOOD_V, 0, ValueError, "m_draws == 0"),
        (GOOD_Q, GOOD_V, 1.5, TypeError, "m_draws must be an integer"),
        ([GOOD_Q, GOOD_Q], np.ones((3, 2, 3)), 2, ValueError, "do not broadcast"),
    ],
)
def test_bad_inputs_raise(q, skills, m, error, match):
    for fn in (expected_reward, expected_reward_grad):
        with pytest.raises(error, match=match):
            fn(q, skills, m)
    with pytest.raises(error, match=match):
        monte_carlo_reward(q, skills, m, n_samples=10, seed=0)


@pytest.mark.parametrize(
    ("subset", "match"),
    [([], "non-empty"), ([0, 3], "outside"), ([-1], "outside"), ([0.0, 1.0], "expert indices")],
)
def test_sum_max_bad_subsets(subset, match):
    with pytest.raises(ValueError, match=match):
        sum_max_reward(GOOD_V, subset)


@pytest.mark.parametrize(
    ("mask", "error", "match"),
    [
        # an integer mask was read as weights: [[2, 0, 0]] scored 2 x the best skill
        (np.array([[2, 0, 0]]), TypeError, "mask must be a boolean array"),
        (np.array([[0, 2, 1]]), TypeError, "use draws_to_mask"),  # draws for a mask
        ([[True, False, False]], TypeError, "got list"),
        (np.array([[True, False]]), ValueError, "last axis must be the K = 3 experts"),
    ],
)
def test_batch_sum_max_refuses_what_is_not_a_mask(mask, error, match):
    skills = np.array([[[0.5, 0.2, 0.1]]])
    with pytest.raises(error, match=match) as info:
        batch_sum_max_reward(skills, mask)
    assert isinstance(info.value, MSRouteError)


def test_sum_max_rejects_batched_skills():
    with pytest.raises(ValueError, match="batch_sum_max_reward"):
        sum_max_reward(np.ones((2, 2, 3)), [0])


def test_a_large_team_size_takes_pow_and_tends_to_the_best_member() -> None:
    """Past the repeated-product range M is one pow (M = 10^30 returns at once): the value
    agrees with the products at the switch and reaches sum_n max_i v_n,i (every expert with
    q > 0 is drawn) as M grows."""
    rng = np.random.default_rng(4)
    skills = rng.random((3, 5))
    q = rng.dirichlet(np.ones(5))
    # The closed form with the power written out: sum_n sum_i (u_i - u_{i-1}) (1 - B_i^M).
    order = np.argsort(skills, axis=1)
    u = np.take_along_axis(skills, order, axis=1)
    below = np.cumsum(q[order], axis=1) - q[order]
    du = np.diff(u, axis=1, prepend=0.0)
    for m in (64, 65, 200):
        exact = float(np.sum(du * (1.0 - below**m)))
        assert float(expected_reward(q, skills, m)) == pytest.approx(exact, rel=1e-13, abs=1e-15)
    best = float(skills.max(axis=1).sum())
    assert float(expected_reward(q, skills, 10**30)) == pytest.approx(best, rel=1e-15)
