"""Budgets near the floor and premium models: the adaptive exploration floor, the feasible
start, and infeasible budgets named in the user's units (docs/concepts.md)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy.optimize import linprog

from msroute import Constraints, InfeasibleConstraintsError, Problem
from msroute.envs import StochasticEnv
from msroute.policies import ContextualOMD, OMDApproachability
from msroute.router import Router
from msroute.simulate import simulate_summary

#: Four cheap LLMs, dollars per call; the cheapest routing costs 0.001 per query.
CHEAP = np.array([[0.001], [0.0012], [0.002], [0.004]])
SKILLS = np.array([[0.3, 0.4, 0.6, 0.9]])
NUMBER = r"([0-9.]+(?:e[-+]?[0-9]+)?)"


def usd(costs: np.ndarray, m: int, budget: float) -> Problem:
    return Problem(costs, m, Constraints(upper=[budget], names=["usd"]))


# ---------------------------------------------------------------------- the rule
@pytest.mark.parametrize(("budget", "expected"), [(0.3, 1 / 40), (0.16, 1 / 40), (0.1, 0.1 / 6)])
def test_the_floor_is_the_papers_with_slack_else_half_the_largest(budget, expected) -> None:
    """Costs (0, 1, 1, 1), one draw: q >= g costs at least 3g, so the largest floor is
    budget / 3, and the floor is min(1/(10K), budget / 6)."""
    p = usd(np.array([[0.0], [1.0], [1.0], [1.0]]), 1, budget)
    assert p.max_floor() == pytest.approx(budget / 3, rel=1e-9)
    assert p.exploration_floor() == pytest.approx(expected, rel=1e-9)
    if expected == 1 / 40:
        assert p.exploration_floor() == p.default_gamma()  # bit for bit
    q = p.check_feasible()
    assert q.min() >= p.exploration_floor() and float(q @ p.costs[:, 0]) <= budget + 1e-12
    pol = OMDApproachability(p, horizon=100, seed=0)
    assert pol.gamma == p.exploration_floor()


def test_the_paper_floor_and_uniform_start_are_unchanged_on_a_paper_like_instance() -> None:
    """Table 1's tight level: uniform routing sits exactly on the budget, so the largest
    floor is 1/K and the paper's 1/(10K) is kept, bit for bit, as is the uniform start."""
    rng = np.random.default_rng(5)
    k, m = 50, 5
    workload = rng.integers(1, 200, size=k) / 199.0
    flag = np.zeros(k)
    flag[rng.choice(k, size=10, replace=False)] = 1.0
    costs = np.column_stack([workload, flag])
    p = Problem(costs, m, Constraints(upper=[m * float(workload.mean()), 2.0]))
    assert p.max_floor() == pytest.approx(1 / k, rel=1e-9)
    assert p.exploration_floor() == 1.0 / (10.0 * k)
    for cls in (OMDApproachability, ContextualOMD):
        pol = cls(p, horizon=100, n_runs=2, seed=0)
        assert pol.gamma == 1.0 / (10.0 * k)
        assert np.array_equal(pol.q.reshape(-1, k), np.full((2, k), 1.0 / k))


def test_an_explicit_gamma_is_kept_and_its_error_names_the_largest_floor() -> None:
    p = usd(CHEAP, 1, 0.0011)
    pol = OMDApproachability(p, horizon=100, gamma=1e-3)
    assert pol.gamma == 1e-3
    with pytest.raises(InfeasibleConstraintsError) as info:
        OMDApproachability(p, horizon=100, gamma=0.025)
    text = str(info.value)
    assert "budget usd <= 0.0011 per query is infeasible" in text
    assert "with every share >= gamma = 0.025" in text
    largest = float(
        re.search(rf"the largest floor these bounds allow is gamma = {NUMBER}", text)[1]
    )
    assert largest == pytest.approx(p.max_floor(), rel=1e-5)


def test_a_batch_shares_the_smallest_floor_and_each_run_starts_feasible() -> None:
    loose, tight = usd(CHEAP, 1, 0.01), usd(CHEAP, 1, 0.00105)
    pol = OMDApproachability([loose, tight], horizon=100, seed=0)
    assert pol.gamma == tight.exploration_floor() < loose.exploration_floor()
    assert np.array_equal(pol.q[0], np.full(4, 0.25))
    start = pol.q[1]
    assert float(start @ CHEAP[:, 0]) <= 0.00105 * (1 + 1e-9)
    assert start.min() >= pol.gamma and start.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.array_equal(start, tight.start_point())


# ---------------------------------------------------------------------- budgets near the floor
@pytest.mark.parametrize("cls", [OMDApproachability, ContextualOMD])
def test_a_budget_just_above_the_cheapest_routing_is_accepted_and_met(cls) -> None:
    """1% above the cheapest routing, two calls per query: the paper's floor is infeasible,
    the adaptive one is accepted and the time-averaged spend meets the budget in every run."""
    m, budget = 2, 2 * 0.00101
    p = usd(CHEAP, m, budget)
    with pytest.raises(InfeasibleConstraintsError):
        p.check_feasible(p.default_gamma())
    pol = cls(p, horizon=2000, n_runs=6, seed=1)
    assert 0 < pol.gamma < p.default_gamma()
    out = simulate_summary({"omd": pol}, StochasticEnv(SKILLS, seed=2, n_runs=6), p, 2000)
    spend = out["omd"].avg_cost[:, 0]
    assert np.all(spend <= budget), spend / budget
    assert np.all(spend >= 0.001)  # it spends: the cheapest expert costs 0.001 per call


def test_a_budget_at_exactly_the_cheapest_routing_leaves_no_room() -> None:
    p = usd(CHEAP, 1, 0.001)
    with pytest.raises(
        InfeasibleConstraintsError,
        match=r"budget usd <= 0\.001 per query leaves no room to explore: the cheapest routing "
        r"costs 0\.001 usd per query.*give a budget above 0\.001",
    ):
        OMDApproachability(p, horizon=100)
    assert p.check_feasible(0.0) @ CHEAP[:, 0] == pytest.approx(0.001)  # a floor of 0 is fine


# ---------------------------------------------------------------------- infeasible budgets
def independent_cheapest(costs: np.ndarray, m: int, cap: float | None) -> float:
    """M min_q usd . q over the simplex with latency . q <= cap / M (scipy, by hand)."""
    k = costs.shape[0]
    a_ub = None if cap is None else costs[:, 1][None, :]
    b_ub = None if cap is None else [cap / m]
    res = linprog(
        costs[:, 0], A_ub=a_ub, b_ub=b_ub, A_eq=np.ones((1, k)), b_eq=[1.0], bounds=(0, 1)
    )
    assert res.status == 0
    return m * float(res.fun)


@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("with_latency", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_infeasible_budget_names_the_smallest_feasible_one(m, with_latency, seed) -> None:
    rng = np.random.default_rng(seed)
    k = 6
    costs = np.column_stack([rng.uniform(0.001, 0.05, k), rng.uniform(0.1, 2.0, k)])
    cap = m * float(np.quantile(costs[:, 1], 0.4)) if with_latency else None
    smallest = independent_cheapest(costs, m, cap)
    budget = 0.8 * smallest
    p = Problem(
        costs,
        m,
        Constraints(upper=[budget, cap], names=["usd", "latency"]),
    )
    with pytest.raises(InfeasibleConstraintsError) as info:
        p.check_feasible()
    text = str(info.value)
    verb = "costs" if m == 1 else "needs a budget of"
    found = re.search(
        rf"budget usd <= {NUMBER} per query is infeasible: the cheapest routing {verb} "
        rf"{NUMBER} usd per query",
        text,
    )
    assert found is not None, text
    assert float(found[1]) == pytest.approx(budget, rel=1e-5)
    assert float(found[2]) == pytest.approx(smallest, rel=1e-5)
    assert ("while meeting the other bounds" in text) == with_latency
    # The policies raise the same message; a budget a little above the smallest is accepted.
    with pytest.raises(InfeasibleConstraintsError, match=re.escape(text)):
        ContextualOMD(p, horizon=100, n_contexts=2)
    ok = Problem(costs, m, Constraints(upper=[1.01 * smallest, cap], names=["usd", "latency"]))
    q = ok.check_feasible()
    assert q.min() >= ok.exploration_floor() > 0
    assert m * float(q @ costs[:, 0]) <= 1.01 * smallest * (1 + 1e-9)


def test_an_unreachable_lower_bound_names_the_largest_feasible_one() -> None:
    costs = np.array([[0.01, 0.2], [0.02, 0.9], [0.03, 0.5]])
    p = Problem(costs, 2, Constraints(upper=[0.04, None], lower=[None, 0.95], names=["usd", "q"]))
    # At most 0.02 usd of C^T q: the best quality mix is (q1, q2) on the usd bound.
    res = linprog(-costs[:, 1], A_ub=costs[:, :1].T, b_ub=[0.02], A_eq=np.ones((1, 3)), b_eq=[1.0])
    with pytest.raises(
        InfeasibleConstraintsError,
        match=rf"bound q >= 0\.95 per query is infeasible: the most q any routing reaches is "
        rf"{-res.fun:.6g} per query while meeting the other bounds",
    ):
        p.check_feasible()


@pytest.mark.parametrize("policy", ["omd", "ts"])
def test_the_router_names_the_budget_in_its_cost_names(policy: str) -> None:
    config = {
        "policy": policy,
        "m_draws": 1,
        "cost_names": ["usd"],
        "experts": {"a": [0.0034], "b": [0.01]},
        "constraints": {"upper": {"usd": 0.002}},
    }
    with pytest.raises(
        InfeasibleConstraintsError,
        match=r"budget usd <= 0\.002 per query is infeasible: the cheapest routing costs "
        r"0\.0034 usd per query",
    ):
        Router(config)


# ---------------------------------------------------------------------- premium models
def test_a_five_dollar_expert_joins_a_router_under_a_tight_budget() -> None:
    config = {
        "policy": "omd",
        "m_draws": 1,
        "cost_names": ["usd"],
        "seed": 3,
        "experts": {"a": [0.001], "b": [0.002], "c": [0.003]},
        "constraints": {"upper": {"usd": 0.0018}},
    }
    skill = {"a": 0.3, "b": 0.5, "c": 0.6, "premium": 0.95}
    router = Router(config)
    assert router.policy.gamma == 1 / 30  # the paper's floor: feasible with slack

    def serve(start: int, stop: int) -> None:
        for i in range(start, stop):
            d = router.route(decision_id=f"q{i}")
            router.feedback(d.decision_id, max(skill[e] for e in d.team))

    serve(0, 200)
    costs = np.array([[0.001], [0.002], [0.003], [5.0]])
    tight = usd(costs, 1, 0.0018)
    with pytest.raises(InfeasibleConstraintsError):  # the paper's floor alone costs 0.125
        tight.check_feasible(tight.default_gamma())
    router.add_expert("premium", [5.0])
    gamma = router.policy.gamma
    assert gamma == pytest.approx(0.0008 / 5.002 / 2, rel=1e-6)  # half the largest floor
    serve(200, 1500)
    q = router.state()["q"]
    # The share the budget allows: the floor (the Router's model variant lets it decay as
    # gamma / sqrt(step), so the premium keeps a positive share below gamma), never more.
    assert 0.0 < q["premium"] <= 1e-3
    assert float(np.array(list(q.values())) @ costs[:, 0]) <= 0.0018 * (1 + 1e-6)
    assert router.state()["avg_cost"]["usd"] <= 0.0018


@pytest.mark.parametrize("seed", range(6))
def test_max_floor_matches_an_independent_lp_and_the_witness_meets_the_bounds(seed) -> None:
    """max g s.t. q >= g, sum q = 1, l <= C^T q <= u/M, written out by hand for scipy."""
    rng = np.random.default_rng(100 + seed)
    k, m = 7, int(rng.integers(1, 4))
    costs = np.column_stack([10 ** rng.uniform(-3, 1, k), rng.uniform(0, 1, k)])
    cheapest = float(costs[:, 0].min())
    upper = [m * cheapest * rng.uniform(1.001, 3.0), None]
    lower = [None, float(np.quantile(costs[:, 1], 0.3))]
    p = Problem(costs, m, Constraints(upper=upper, lower=lower, names=["usd", "quality"]))
    a_ub = np.vstack(
        [
            np.column_stack([-np.eye(k), np.ones(k)]),
            np.append(costs[:, 0], 0.0)[None, :],
            np.append(-costs[:, 1], 0.0)[None, :],
        ]
    )
    b_ub = np.concatenate([np.zeros(k), [upper[0] / m, -lower[1]]])
    a_eq = np.append(np.ones(k), 0.0)[None, :]
    objective = np.append(np.zeros(k), -1.0)
    res = linprog(objective, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None))
    if res.status == 2:
        with pytest.raises(InfeasibleConstraintsError):
            p.max_floor()
        return
    want = min(-res.fun, 1 / k)
    assert p.max_floor() == pytest.approx(want, rel=1e-6, abs=1e-12)
    if want < 1e-9:
        return
    floor = p.exploration_floor()
    assert floor == min(1 / (10 * k), p.max_floor() / 2)
    q = p.check_feasible()
    assert q.min() >= floor and q.sum() == pytest.approx(1.0, abs=1e-12)
    assert m * float(q @ costs[:, 0]) <= upper[0] * (1 + 1e-7)
    assert float(q @ costs[:, 1]) >= lower[1] * (1 - 1e-7)
    start = p.start_point()
    assert start.min() >= floor
    assert m * float(start @ costs[:, 0]) <= upper[0] * (1 + 1e-7)
    assert float(start @ costs[:, 1]) >= lower[1] * (1 - 1e-7)


# ---------------------------------------------------------------------- a floor that holds
def _play_omd(pol: OMDApproachability, rounds: int, seed: int = 0) -> float:
    """Immediate feedback on the SKILLS instance; returns the smallest share q ever had."""
    rng = np.random.default_rng(seed)
    least = 1.0
    for _ in range(rounds):
        d = pol.select()
        team = sorted(set(d.draws[0].tolist()))
        reward = float(rng.random() < SKILLS[0, team].max())
        pol.update(d, np.array([reward]), CHEAP[team].sum(axis=0)[None, :])
        least = min(least, float(pol.q.min()))
    return least


def test_a_given_gamma_holds_under_the_decaying_floor() -> None:
    """The model variant's floor decays; a user's gamma is a floor all the same (it fell to
    gamma / sqrt(n) before, 0.0014 from 0.025)."""
    problem = usd(CHEAP, 1, 0.003)
    pol = OMDApproachability(problem, horizon=1, gamma=0.025, eta_schedule="anytime", seed=0)
    assert pol.floor == "decay" and pol.floor_min == 0.025
    assert _play_omd(pol, 3000) >= 0.025 - 1e-12


def test_explore_starts_the_decaying_floor_above_a_holding_gamma() -> None:
    problem = usd(CHEAP, 1, 0.003)
    pol = OMDApproachability(
        problem, horizon=1, gamma=0.005, explore=0.05, eta_schedule="anytime", seed=0
    )
    assert (pol.gamma, pol.floor_min) == (0.05, 0.005)
    least = _play_omd(pol, 3000)
    assert least == pytest.approx(0.005, abs=1e-12)  # decayed from 0.05 down to gamma, no lower
    with pytest.raises(ValueError, match=r"explore == 0\.05 needs floor='decay'"):
        OMDApproachability(problem, horizon=1, explore=0.05, variant="paper")


def test_a_recorded_gamma_of_a_decaying_floor_is_read_as_its_start() -> None:
    """Policy files and journals written before ``explore`` existed recorded the decaying
    floor's start as ``gamma``: they resume as they ran (no floor held)."""
    old = {"gamma": 0.02, "variant": "model", "eta_schedule": "anytime"}
    assert OMDApproachability._recorded_kwargs(old) == {**old, "gamma": None, "explore": 0.02}
    new = {"gamma": 0.02, "explore": 0.02, "variant": "model"}
    assert OMDApproachability._recorded_kwargs(new) == new  # explore recorded: today's meaning
    fixed = {"gamma": 0.02, "variant": "paper"}
    assert OMDApproachability._recorded_kwargs(fixed) == fixed
    pol = OMDApproachability.build(
        usd(CHEAP, 1, 0.003), horizon=1, **OMDApproachability._recorded_kwargs(old)
    )
    assert (pol.gamma, pol.floor_min) == (0.02, 0.0)


@pytest.mark.parametrize("budget", [0.0005, 0.001, 0.00101, 0.0011, 0.002, 1.0])
def test_accepts_a_floor_says_whether_exploration_floor_has_one(budget: float) -> None:
    """The cheap predicate (no error message composed) agrees with ``exploration_floor``,
    from budgets below the cheapest expert through one just above it to generous ones."""
    p = Problem([[0.001], [0.002], [5.0]], 1, Constraints(upper=[budget], names=["usd"]))
    try:
        p.exploration_floor()
        raised = False
    except InfeasibleConstraintsError:
        raised = True
    assert p.accepts_a_floor() is not raised
