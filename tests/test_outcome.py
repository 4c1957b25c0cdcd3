"""The simulator's compiled round outcome gives the public functions' floats, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from msroute import Constraints, Problem, ProblemBatch, RandomPolicy, SequenceEnv, simulate
from msroute._outcome import (
    DRAW_COSTS,
    NO_COST,
    PAIR_COSTS,
    _probe,
    blas_pairs_order,
    round_outcome,
)
from msroute.core.problem_batch import draws_cost, team_cost
from msroute.core.reward import draws_sum_max_reward, draws_to_mask
from msroute.metrics import time_averaged
from msroute.simulate import simulate_summary
from test_simulate import _spying


def _case(
    rng: np.random.Generator, *, n_dims: int, n_draws: int, n_costs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Skills (R', N, K), a run map (R,), draws (R, M) with repeats, costs (R, K, d) spread
    over seven decades (so that the order of a sum shows in its last bits)."""
    n_runs, n_src, k = int(rng.integers(1, 30)), int(rng.integers(1, 6)), int(rng.integers(1, 70))
    scale = 10.0 ** rng.integers(-3, 4, size=(n_src, n_dims, k))
    skills = rng.random((n_src, n_dims, k)) * scale
    rows = rng.integers(0, n_src, size=n_runs)
    draws = rng.integers(0, k, size=(n_runs, n_draws))
    costs = rng.random((n_runs, k, n_costs)) * 10.0 ** rng.integers(
        -3, 4, size=(n_runs, k, n_costs)
    )
    return skills, rows, draws, costs


def _outcome(
    skills: np.ndarray, rows: np.ndarray, draws: np.ndarray, costs: np.ndarray, mode: int
) -> tuple[np.ndarray, np.ndarray]:
    reward, cost = np.full(draws.shape[0], np.nan), np.full((draws.shape[0], costs.shape[2]), -1.0)
    assert round_outcome(skills, rows, draws, costs, mode, reward, cost) == -1
    return reward, cost


@pytest.mark.parametrize("n_dims", [1, 3, 7, 8, 17, 129, 300])
def test_reward_is_draws_sum_max_reward(n_dims: int) -> None:
    """numpy's pairwise sum over the dimensions, through its leaves and its splits (N > 128)."""
    rng = np.random.default_rng(n_dims)
    for _ in range(30):
        skills, rows, draws, costs = _case(
            rng, n_dims=n_dims, n_draws=int(rng.integers(1, 12)), n_costs=2
        )
        reward, _ = _outcome(skills, rows, draws, costs, NO_COST)
        np.testing.assert_array_equal(reward, draws_sum_max_reward(skills, draws, rows))
        if rows.size == skills.shape[0]:  # every run reading its own skills
            own = np.arange(rows.size)
            reward, _ = _outcome(skills, own, draws, costs, NO_COST)
            np.testing.assert_array_equal(reward, draws_sum_max_reward(skills, draws))


@pytest.mark.parametrize("n_costs", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("n_draws", [1, 5, 8, 19, 140])
def test_draw_costs_are_draws_cost(n_costs: int, n_draws: int) -> None:
    """Summed draw after draw, or pairwise along the draws when d = 1."""
    rng = np.random.default_rng(100 * n_costs + n_draws)
    for _ in range(30):
        skills, rows, draws, costs = _case(rng, n_dims=3, n_draws=n_draws, n_costs=n_costs)
        _, cost = _outcome(skills, rows, draws, costs, DRAW_COSTS)
        np.testing.assert_array_equal(cost, draws_cost(draws, costs))


@pytest.mark.parametrize("n_costs", [2, 3])
@pytest.mark.parametrize("n_draws", [1, 2, 5, 12])
def test_pair_costs_are_team_cost(n_costs: int, n_draws: int) -> None:
    """The distinct experts summed in the BLAS's pair order, on this machine's numpy."""
    if not blas_pairs_order():
        pytest.skip("numpy's BLAS sums team_cost in another order: the simulator uses team_cost")
    rng = np.random.default_rng(10 * n_costs + n_draws)
    for _ in range(60):
        skills, rows, draws, costs = _case(rng, n_dims=3, n_draws=n_draws, n_costs=n_costs)
        _, cost = _outcome(skills, rows, draws, costs, PAIR_COSTS)
        np.testing.assert_array_equal(cost, team_cost(draws_to_mask(draws, costs.shape[1]), costs))


def test_the_probe_tells_the_pair_order_from_index_order() -> None:
    """blas_pairs_order could not pass a BLAS that sums the experts in index order."""
    for d in (2, 3):
        draws, costs = _probe(d)
        rows = np.arange(draws.shape[0])
        in_order = np.stack([costs[r, np.unique(draws[r])].cumsum(axis=0)[-1] for r in rows])
        _, paired = _outcome(np.zeros((1, 1, costs.shape[1])), 0 * rows, draws, costs, PAIR_COSTS)
        assert not np.array_equal(paired, in_order)


def test_openblas_is_known_to_sum_in_pairs() -> None:
    """With numpy's OpenBLAS (its wheels' BLAS), the pass sums the distinct costs itself."""
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    if "openblas" not in blas.lower():
        pytest.skip(f"numpy uses {blas}")
    assert blas_pairs_order()


def test_a_draw_outside_the_experts_is_reported() -> None:
    draws = np.array([[0, 1], [2, 4]])
    reward, cost = np.empty(2), np.empty((2, 2))
    skills, costs = np.ones((2, 1, 4)), np.ones((2, 4, 2))
    rows = np.arange(2)
    assert round_outcome(skills, rows, draws, costs, PAIR_COSTS, reward, cost) == 1
    assert round_outcome(skills, rows, draws - 1, costs, DRAW_COSTS, reward, cost) == 0


def _problem(costs: np.ndarray, m: int) -> Problem:
    return Problem(costs, m, Constraints(upper=[None] * (costs.shape[1] - 1) + [1e9]))


class _Fixed(RandomPolicy):
    """Random's bookkeeping with given draws."""

    def __init__(self, batch: ProblemBatch, draws: np.ndarray) -> None:
        super().__init__(batch, horizon=5, seed=0)
        self.fixed = draws

    def _select(self, context: object, eligible: object) -> tuple[np.ndarray, None]:
        return self.fixed, None


@pytest.mark.parametrize(
    ("draws", "match"),
    [
        (np.array([[0, 4]]), r"policy 'p' drew \[0, 4\] in run 0"),
        (np.array([[0, -1]]), r"policy 'p' drew \[0, -1\]"),
        (np.array([[0, 1, 2]]), r"policy 'p' returned draws of int64 \(1, 3\)"),
        (np.array([[0.0, 1.0]]), r"policy 'p' returned draws of float64"),
    ],
)
def test_bad_draws_of_a_policy_are_named(draws: np.ndarray, match: str) -> None:
    batch = ProblemBatch(_problem(np.ones((4, 2)), 2), 1)
    env = SequenceEnv(np.ones((5, 3, 4)), n_runs=1)
    with pytest.raises(ValueError, match=match):
        simulate({"p": _Fixed(batch, draws)}, env, batch, 5)


@pytest.mark.parametrize("n_costs", [1, 2, 4])
@pytest.mark.parametrize("cost_count", ["distinct", "draws"])
def test_simulate_records_the_public_functions(n_costs: int, cost_count: str) -> None:
    """Each round's recorded reward and cost are the public functions' on the draws played, with
    a run map, for the costs summed in the pass and those left to the batch (d = 1, 4)."""
    rng = np.random.default_rng(n_costs)
    horizon, n_runs, k, m = 60, 6, 9, 4
    skills = rng.random((horizon, 3, 3, k))
    costs = rng.random((n_runs, k, n_costs)) * 10.0 ** rng.integers(-3, 4, (n_runs, k, n_costs))
    batch = ProblemBatch([_problem(c, m) for c in costs])
    run_map = np.array([0, 1, 2, 2, 1, 0])
    policy = RandomPolicy(batch, horizon=horizon, seed=7)
    seen = _spying(policy)
    env = SequenceEnv(skills)
    traj = simulate({"r": policy}, env, batch, horizon, run_map=run_map, cost_count=cost_count)
    for t, decision in enumerate(seen):
        draws = np.asarray(decision.draws)
        np.testing.assert_array_equal(
            traj["r"].rewards[t], draws_sum_max_reward(skills[t], draws, run_map)
        )
        expected = (
            draws_cost(draws, batch.costs)
            if cost_count == "draws"
            else team_cost(draws_to_mask(draws, k), batch.costs)
        )
        np.testing.assert_array_equal(traj["r"].costs[t], expected)
    summary = simulate_summary(
        {"r": RandomPolicy(batch, horizon=horizon, seed=7)},
        env,
        batch,
        horizon,
        run_map=run_map,
        cost_count=cost_count,
    )["r"]
    np.testing.assert_array_equal(summary.avg_cost, time_averaged(traj["r"].costs))


def test_compile_ahead_loads_the_round_for_the_workers() -> None:
    from msroute.experiments.schedule import compile_ahead

    blas_pairs_order.cache_clear()
    compile_ahead()
    assert blas_pairs_order.cache_info().currsize == 1
    assert len(round_outcome.signatures) == 1  # one machine code, loaded before any fork


@pytest.mark.parametrize("n_costs", [2, 3])
def test_a_batch_cost_estimate_learns_the_numpy_floats(
    n_costs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's learned cost estimate (mode "distinct") predicts and counts in one compiled
    loop: its estimates and counts equal the numpy update's bit for bit, round after round,
    both when every realized cost is as predicted and when it is not (the estimates move)."""
    if not blas_pairs_order():
        pytest.skip("numpy's BLAS sums team_cost in another order: the numpy update runs")
    from msroute.policies.costs import CostEstimate

    rng = np.random.default_rng(n_costs)
    n_runs, k, m = 12, 23, 5
    table = rng.random((n_runs, k, n_costs)) * 10.0 ** rng.integers(-3, 4, (n_runs, k, n_costs))
    scale = table.max(axis=1)
    fast, slow = CostEstimate(table, scale), CostEstimate(table, scale)
    monkeypatch.setattr(slow, "_count_compiled", lambda draws, cost: None)
    moved = 0
    for t in range(40):
        draws = rng.integers(0, k, size=(n_runs, m))  # repeats: each distinct expert once
        cost = team_cost(draws_to_mask(draws, k), fast.costs)  # as the estimates predict
        if t % 2:  # realized costs off the estimates: they move
            cost = cost * rng.uniform(0.5, 1.5, size=cost.shape)
        before = fast.costs.copy()
        fast.update(draws, cost)
        slow.update(draws, cost)
        moved += not np.array_equal(before, fast.costs)
        np.testing.assert_array_equal(fast.n_obs, slow.n_obs)
        np.testing.assert_array_equal(fast.costs, slow.costs)
    assert moved == 20


@pytest.mark.parametrize("n_experts", [2, 23, 50])
def test_a_batch_dual_penalty_is_each_runs_numpy_penalty(n_experts: int) -> None:
    """A batch's Lagrangian penalty (R, K, 2) is priced by the compiled loop where the probe
    finds numpy's order, and each run gets the floats numpy's product gives it alone."""
    from msroute.policies.lagrangian import LagrangianDual, _matmul_penalty

    rng = np.random.default_rng(n_experts)
    n_runs = 9
    costs = rng.random((n_runs, n_experts, 2)) * 10.0 ** rng.integers(-3, 4, (n_runs, n_experts, 2))
    dual = LagrangianDual(np.full((n_runs, 2), -np.inf), np.ones((n_runs, 2)), step=0.5)
    dual.lam = rng.exponential(size=dual.lam.shape) * 10.0 ** rng.integers(-3, 4, dual.lam.shape)
    batch = dual.penalty(costs)
    for r in range(n_runs):
        alone = _matmul_penalty(costs[r : r + 1], dual.weights()[r : r + 1])
        np.testing.assert_array_equal(batch[r : r + 1], alone)


def test_the_penalty_probe_tells_numpys_order_from_a_plain_sum() -> None:
    """The probe behind the compiled penalty could not pass a loop that sums in a plain order
    (each product rounded, then added): that order differs from numpy's in the last bits."""
    from msroute.policies.lagrangian import _compiled_penalty_agrees, _matmul_penalty

    rng = np.random.default_rng(20240602)
    costs = rng.random((16, 50, 2)) * 10.0 ** rng.integers(-3, 4, (16, 50, 2))
    weights = rng.normal(size=(16, 2)) * 10.0 ** rng.integers(-3, 4, (16, 2))
    plain = costs[:, :, 0] * weights[:, None, 0] + costs[:, :, 1] * weights[:, None, 1]
    assert not np.array_equal(plain, _matmul_penalty(costs, weights))
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    if "openblas" in blas.lower():
        assert _compiled_penalty_agrees(50)
