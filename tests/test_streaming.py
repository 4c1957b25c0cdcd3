"""Streamed summaries equal, bit for bit, the metrics computed on the full per-round arrays."""

from __future__ import annotations

import numpy as np
import pytest

from msroute import Constraints, Problem, ProblemBatch, StochasticEnv, make_policy, simulate
from msroute.metrics import (
    constraint_regret,
    regret_of_averages,
    running_average,
    time_averaged,
)
from msroute.simulate import simulate_summary
from msroute.streaming import PairwiseSum, pairwise_plan


@pytest.mark.parametrize("horizon", [1, 7, 8, 9, 127, 128, 129, 300, 1000, 8193, 20_001])
def test_pairwise_sum_is_numpys_sum_bit_for_bit(horizon: int) -> None:
    x = np.random.default_rng(horizon).random((horizon, 3, 2)) * 1e3
    acc = PairwiseSum(horizon, (3, 2))
    for row in x:
        acc.add(row)
    np.testing.assert_array_equal(acc.total() / horizon, time_averaged(x))
    # and not merely close: a plain running sum of the same numbers differs in its last bits
    if horizon >= 1000:
        assert not np.array_equal(np.cumsum(x, axis=0)[-1] / horizon, time_averaged(x))


@pytest.mark.parametrize("horizon", [1, 9, 128, 300, 8193])
def test_rounds_added_in_blocks_sum_as_one_by_one(horizon: int) -> None:
    rng = np.random.default_rng(horizon)
    x = rng.random((horizon, 3)) * 10.0 ** rng.integers(-3, 4, (horizon, 3))
    acc = PairwiseSum(horizon, (3,))
    start = 0
    while start < horizon:  # blocks of 1 to 300 rounds, across the leaves' ends
        stop = min(horizon, start + int(rng.integers(1, 301)))
        acc.add_rounds(x[start:stop])
        start = stop
    np.testing.assert_array_equal(acc.total() / horizon, time_averaged(x))
    with pytest.raises(ValueError, match="exceed"):
        acc.add_rounds(x[:1])


def test_pairwise_plan_covers_every_round_once() -> None:
    for n in (1, 128, 129, 1000, 12345):
        plan = pairwise_plan(n)
        assert sum(m for m in plan if m > 0) == n
        assert all(0 < m <= 128 for m in plan if m > 0)
        assert plan.count(-1) == sum(1 for m in plan if m > 0) - 1


def test_pairwise_sum_refuses_too_many_or_too_few_rounds() -> None:
    acc = PairwiseSum(2, (1,))
    acc.add(np.ones(1))
    with pytest.raises(ValueError, match="1 of 2 rounds"):
        acc.total()
    acc.add(np.ones(1))
    with pytest.raises(ValueError, match="all 2 rounds"):
        acc.add(np.ones(1))


def test_summary_equals_the_metrics_of_the_full_simulation() -> None:
    costs = np.array([[1.0, 0.0], [0.5, 1.0], [0.0, 1.0], [0.2, 0.0], [0.7, 1.0]])
    problem = Problem(costs, 2, Constraints(upper=[1.0, 0.8]))
    batch = ProblemBatch(problem, 3)
    horizon, at = 1234, np.array([1, 10, 127, 128, 129, 256, 500, 1233, 1234])

    def policies() -> dict:
        return {
            name: make_policy(name, batch, horizon=horizon, seed=4) for name in ("omd", "ts-bwk")
        }

    def env() -> StochasticEnv:
        return StochasticEnv(np.random.default_rng(1).uniform(0.2, 0.9, (3, 5)), seed=[1, 2, 3])

    full = simulate(policies(), env(), batch, horizon, chunk=100)
    short = simulate_summary(
        policies(), env(), batch, horizon, chunk=100, checkpoints=at, keep_rewards=True
    )
    for name, traj in full.items():
        got = short[name]
        np.testing.assert_array_equal(got.avg_reward, time_averaged(traj.rewards))
        np.testing.assert_array_equal(got.avg_cost, time_averaged(traj.costs))
        np.testing.assert_array_equal(got.running_cost, running_average(traj.costs, at))
        assert got.rewards is not None
        np.testing.assert_array_equal(got.rewards, traj.rewards)
        np.testing.assert_array_equal(got.final_q, traj.final_q)
    r2 = constraint_regret(full["omd"].costs, batch.lo_ori, batch.hi_ori, at=at)
    np.testing.assert_array_equal(
        regret_of_averages(short["omd"].running_cost, batch.lo_ori, batch.hi_ori), r2
    )
    assert simulate_summary(policies(), env(), batch, horizon)["omd"].rewards is None


@pytest.mark.parametrize("bad", [[0], [5, 5], [3, 2], [2000], [[1, 2]], []])
def test_bad_checkpoints_are_named(bad: list) -> None:
    problem = Problem(np.array([[1.0], [0.0]]), 1, Constraints(upper=[1.0]))
    batch = ProblemBatch(problem, 1)
    env = StochasticEnv(np.full((1, 2), 0.5), seed=[0])
    pol = {"omd": make_policy("omd", batch, horizon=100, seed=0)}
    with pytest.raises(ValueError, match="checkpoints"):
        simulate_summary(pol, env, batch, 100, checkpoints=bad)
