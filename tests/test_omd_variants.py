"""The pieces of OMD's primal step (gradient estimators, floor schedules) and the variants."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.core.reward import batch_sum_max_reward, expected_reward_grad
from msroute.policies import load_policy
from msroute.policies.base import draw_counts
from msroute.policies.omd import OMDApproachability
from msroute.policies.omd_variants import (
    VARIANTS,
    ImportanceGradient,
    ModelGradient,
    floor_at,
)
from test_policies_omd import (
    COSTS,
    SKILLS,
    M,
    best_feasible_value,
    binding_problem,
    run_fixed_skills,
)

Q = np.array([0.1, 0.3, 0.2, 0.25, 0.05, 0.1])


def exact_mean(estimator, coef_reward, q: np.ndarray, skills: np.ndarray) -> np.ndarray:
    """E[g] by enumerating every ordered draw sequence (K^M of them) with its probability."""
    k = q.size
    total = np.zeros(k)
    for seq in itertools.product(range(k), repeat=M):
        draws = np.array([seq])
        prob = float(np.prod(q[list(seq)]))
        mask = np.zeros((1, k), dtype=bool)
        mask[0, list(seq)] = True
        reward = batch_sum_max_reward(skills[None], mask)
        g = estimator.estimate(
            np.zeros(1, dtype=np.int64),
            np.zeros(1, dtype=np.int64),
            q[None],
            draws,
            draw_counts(draws, k),
            reward,
            np.array([coef_reward]),
        )
        total += prob * g[0]
    return total


def centered(g: np.ndarray) -> np.ndarray:
    """The part of a gradient the projection onto {sum q = 1} sees."""
    return g - g.mean()


@pytest.mark.parametrize("baseline", [0.0, 0.7])
def test_importance_estimator_is_unbiased(baseline: float) -> None:
    mean = exact_mean(ImportanceGradient(), baseline, Q, SKILLS)
    np.testing.assert_allclose(
        centered(mean), centered(expected_reward_grad(Q, SKILLS, M)), atol=1e-12
    )


def frozen_model(coef: np.ndarray, ix: float) -> ModelGradient:
    """A model estimator whose coefficients stay ``coef`` (its fit is not refreshed)."""
    est = ModelGradient(1, 1, Q.size, M, ix)
    est.coef[0, 0] = coef
    return est


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_model_estimator_without_ix_is_unbiased_whatever_the_model(seed: int) -> None:
    """The control variate's exact gradient and the mean of its residual term cancel."""
    coef = np.random.default_rng(seed).uniform(-1, 2, Q.size + 1)
    mean = exact_mean(frozen_model(coef, 0.0), 0.0, Q, SKILLS)
    np.testing.assert_allclose(
        centered(mean), centered(expected_reward_grad(Q, SKILLS, M)), atol=1e-12
    )


def test_model_estimator_is_exact_where_the_model_is() -> None:
    """On an additive reward the fitted model's gradient alone is the gradient: every draw
    gives the same estimate (no variance), equal to the exact one."""
    beta = np.array([0.5, 0.9, 0.1, 0.4, 0.3, 0.2, 0.6])
    est = frozen_model(beta, ix=0.05)
    k = Q.size
    for seq in [(0, 1), (2, 2), (5, 3)]:
        draws = np.array([seq])
        counts = draw_counts(draws, k)
        reward = np.array([beta[0] + beta[1:][sorted(set(seq))].sum()])
        g = est.estimate(np.zeros(1, int), np.zeros(1, int), Q[None], draws, counts, reward, reward)
        np.testing.assert_allclose(g[0], beta[1:] * M * (1 - Q) ** (M - 1), atol=1e-12)


def test_model_estimator_weights_are_bounded_by_ix() -> None:
    est = frozen_model(np.zeros(Q.size + 1), ix=0.1)
    tiny = np.full(6, 1e-9)
    tiny[0] = 1 - 5e-9
    draws = np.array([[5, 5]])
    counts = draw_counts(draws, 6)
    g = est.estimate(
        np.zeros(1, int), np.zeros(1, int), tiny[None], draws, counts, np.ones(1), np.ones(1)
    )
    assert np.abs(g).max() <= 2.0 / 0.1 + 1e-12


def test_model_refit_is_ridge_least_squares() -> None:
    rng = np.random.default_rng(4)
    k, rounds = Q.size, 300
    est = ModelGradient(2, 1, k, M, ix=0.0)
    xs, ys = [], []
    for _ in range(rounds):
        draws = rng.choice(k, size=(2, M), p=Q)
        counts = draw_counts(draws, k)
        reward = rng.uniform(0, 2, 2)
        est.estimate(
            np.arange(2), np.zeros(2, int), np.tile(Q, (2, 1)), draws, counts, reward, reward
        )
        xs.append(np.concatenate([[1.0], counts[1] > 0]))
        ys.append(reward[1])
    est.refit(np.array([1]), np.array([0]))
    x, y = np.array(xs), np.array(ys)
    want = np.linalg.lstsq(np.vstack([x, np.eye(k + 1)]), np.concatenate([y, np.zeros(k + 1)]))[0]
    np.testing.assert_allclose(est.coef[1, 0], want, atol=1e-10)
    assert np.all(est.coef[0, 0] == 0.0)  # run 0 was not refitted


@pytest.mark.parametrize(("k", "m"), [(50, 5), (3, 5), (6, 1)])
def test_model_statistics_equal_the_dense_outer_products(k: int, m: int) -> None:
    """The fit's Gram matrix and moment, updated at the routed entries only, are bit for bit
    the sums of the dense ``x x^T`` and ``r x`` (any contexts, repeated draws, M > K)."""
    rng = np.random.default_rng(7)
    runs, contexts = 6, 3
    est = ModelGradient(runs, contexts, k, m, ix=0.01)
    gram, moment = est.gram.copy(), est.moment.copy()
    rows = np.arange(runs)
    for _ in range(40):
        draws = rng.integers(0, k, (runs, m))
        counts = draw_counts(draws, k)
        ctx = rng.integers(0, contexts, runs)
        reward = rng.normal(size=runs)
        q = np.full((runs, k), 1.0 / k)
        est.estimate(rows, ctx, q, draws, counts, reward, reward)
        x = np.ones((runs, k + 1))
        x[:, 1:] = counts > 0
        gram[rows, ctx] += x[:, :, None] * x[:, None, :]
        moment[rows, ctx] += reward[:, None] * x
    assert np.array_equal(est.gram, gram)
    assert np.array_equal(est.moment, moment)


def test_floor_schedules() -> None:
    assert floor_at(0.01, "fixed", 100) == 0.01
    assert floor_at(0.01, "decay", 1) == 0.01
    assert floor_at(0.01, "decay", 4) == pytest.approx(0.005)


def test_decaying_floor_reaches_below_gamma_and_stays_feasible() -> None:
    problem = binding_problem()
    batch = ProblemBatch(problem, 3)
    pol = OMDApproachability(batch, horizon=2000, seed=1)
    _, _, _, surrogate = run_fixed_skills(pol, batch, SKILLS, 2000)
    steps = 2000 // pol.batch_size
    assert pol.q.min() >= pol.gamma / np.sqrt(steps) - 1e-15
    assert pol.q.min() < pol.gamma  # the paper's floor would stop it here
    lo, hi = problem.surrogate_box()
    avg = surrogate.mean(axis=0)
    assert np.all(avg <= hi + 1e-2) and np.all(avg >= lo - 1e-2)


def test_variants_compose_and_are_validated() -> None:
    problem = binding_problem()
    pol = OMDApproachability(problem, horizon=100, variant="paper", floor="decay")
    assert (pol.estimator_name, pol.floor) == ("importance", "decay")
    pol = OMDApproachability(problem, horizon=100, variant="paper", estimator="model", ix=0.0)
    assert (pol.estimator_name, pol.floor, pol.ix) == ("model", "fixed", 0.0)
    for kwargs, match in [
        ({"variant": "fast"}, "variant == 'fast'"),
        ({"estimator": "oracle"}, "estimator == 'oracle'"),
        ({"floor": "linear"}, "floor == 'linear'"),
        ({"ix": -0.1}, "ix"),
    ]:
        with pytest.raises(ValueError, match=match):
            OMDApproachability(problem, horizon=100, **kwargs)
    assert set(VARIANTS) == {"paper", "model"}


def test_both_variants_are_feasible_and_near_optimal_on_a_binding_instance() -> None:
    problem = Problem(COSTS, M, Constraints(upper=[0.8, None], lower=[None, 0.4]))
    batch = ProblemBatch(problem, 4)
    best = best_feasible_value(problem, SKILLS)
    for variant in ("paper", "model"):
        pol = OMDApproachability(batch, horizon=3000, seed=5, variant=variant)
        r, costs, _, _ = run_fixed_skills(pol, batch, SKILLS, 3000)
        avg = costs.mean(axis=0)
        assert np.all(avg[:, 0] <= 0.8 + 1e-9) and np.all(avg[:, 1] >= 0.4 - 1e-9)
        assert r.mean() > best - 0.01


def test_model_variant_saves_and_resumes_exactly(tmp_path: Path) -> None:
    problem = binding_problem()
    batch = ProblemBatch(problem, 2)
    pol = OMDApproachability(batch, horizon=500, seed=3)
    run_fixed_skills(pol, batch, SKILLS, 55)
    pol.save(tmp_path / "p.npz")
    back = load_policy(tmp_path / "p.npz")
    assert isinstance(back, OMDApproachability)
    np.testing.assert_array_equal(back.estimator.coef, pol.estimator.coef)
    run_fixed_skills(pol, batch, SKILLS, 30)
    run_fixed_skills(back, batch, SKILLS, 30)
    np.testing.assert_array_equal(back.q, pol.q)
