"""The approachability dual: feasibility in the user's units, whatever those units are."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import msroute
from msroute.core.problem_batch import team_cost
from msroute.core.reward import batch_sum_max_reward
from msroute.policies.base import draws_to_mask
from msroute.policies.duals import ApproachabilityDual, check_construction, cost_scale
from msroute.scenarios import load_costs_csv, load_skills_csv

# Support questions routed among 6 LLMs (examples/support-llms): skills (topics, models), dollars
# per call, and an in-house indicator with a 20% floor; two draws per question, $0.012 budget.
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "support-llms"
V = load_skills_csv(EXAMPLE / "skills.csv")[2]
USD, INHOUSE = load_costs_csv(EXAMPLE / "costs.csv")[2].T
BUDGET, FLOOR = 0.012, 0.2


def llm_problem(f_usd: float = 1.0, f_inhouse: float = 1.0) -> msroute.Problem:
    costs = np.stack([USD * f_usd, INHOUSE * f_inhouse], 1)
    cons = msroute.Constraints(upper=[BUDGET * f_usd, None], lower=[None, FLOOR * f_inhouse])
    return msroute.Problem(costs, 2, cons)


def play(problem: msroute.Problem, horizon: int, **kwargs):
    """OMD on the instance (4 runs): every round's draws, the realized costs, the final q."""
    batch = msroute.ProblemBatch(problem, 4)
    env = msroute.StochasticEnv(V, kappa=20, seed=[0, 1, 2, 3])
    pol = msroute.OMDApproachability(batch, horizon=horizon, seed=1, **kwargs)
    skills = env.skills(0, horizon)
    draws = np.empty((horizon, 4, 2), dtype=np.int64)
    costs = np.empty((horizon, 4, 2))
    rewards = np.empty((horizon, 4))
    for t in range(horizon):
        d = pol.select()
        mask = draws_to_mask(d.draws, 6)
        rewards[t] = batch_sum_max_reward(skills[t], mask)
        costs[t] = batch.realized_cost(mask)
        pol.update(d, rewards[t], costs[t])
        draws[t] = d.draws
    return draws, costs, rewards, pol


def test_the_llm_instance_is_feasible_in_every_run() -> None:
    _, costs, _, _ = play(llm_problem(), 5000)
    avg = costs.mean(axis=0)
    assert np.all(avg[:, 0] <= BUDGET), avg[:, 0]
    assert np.all(avg[:, 1] >= FLOOR), avg[:, 1]


def test_the_papers_single_cut_overspends_there() -> None:
    # The record of the defect: the aggregated cut lets the slack in-house floor pay for the
    # dollar budget, so the paper's construction spends over the budget in every run.
    _, costs, _, _ = play(llm_problem(), 5000, dual="paper")
    assert np.all(costs.mean(axis=0)[:, 0] > BUDGET)


@pytest.mark.parametrize("coord", [0, 1])
@pytest.mark.parametrize("factor", [1e-4, 1e4])
def test_decisions_do_not_depend_on_the_units(coord: int, factor: float) -> None:
    horizon = 1500
    ref_draws, ref_costs, ref_rewards, ref = play(llm_problem(), horizon)
    f = (factor, 1.0) if coord == 0 else (1.0, factor)
    draws, costs, rewards, pol = play(llm_problem(*f), horizon)
    np.testing.assert_array_equal(draws, ref_draws)  # every decision, bit for bit
    np.testing.assert_array_equal(rewards, ref_rewards)
    np.testing.assert_array_equal(pol.q, ref.q)
    # The dual is in normalized units (u / s rounds differently in other units: to ulps).
    np.testing.assert_allclose(pol.w, ref.w, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(costs[..., coord] / f[coord], ref_costs[..., coord], rtol=1e-12)


def test_the_paper_construction_depends_on_the_units() -> None:
    # What the invariant construction fixes: the same instance in other units decides otherwise.
    a, _, _, _ = play(llm_problem(), 1500, dual="paper")
    b, _, _, _ = play(llm_problem(1.0, 100.0), 1500, dual="paper")
    assert not np.array_equal(a, b)


def test_no_weight_against_a_missing_bound() -> None:
    # Coordinate 0 has only an upper bound, 1 only a lower one, 2 none.
    lo = np.array([[0.0, 0.5, 0.0]])
    hi = np.array([[0.2, 9.0, 9.0]])
    dual = ApproachabilityDual(
        lo,
        hi,
        0.5,
        1e-12,
        construction="invariant",
        scale=np.ones((1, 3)),
        has_lower=np.array([[False, True, False]]),
        has_upper=np.array([[True, False, False]]),
    )
    dual.step(np.array([[0.1, 0.9, 5.0]]))  # all inside: the dual stays at 0 (tie rule)
    assert np.all(dual.w == 0.0)
    dual.step(np.array([[0.4, 0.1, 5.0]]))  # both bounds broken
    assert dual.w[0, 0] > 0 and dual.w[0, 1] < 0 and dual.w[0, 2] == 0
    for _ in range(10):  # far inside: the weights return to exactly 0, never past it
        dual.step(np.array([[0.0, 3.0, 0.0]]))
    assert np.all(dual.w == 0.0)
    np.testing.assert_array_equal(dual.active(), [[0, 0, 0]])


def test_cuts_are_one_per_active_bound() -> None:
    costs = np.array([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]])  # (R, K, d)
    lo, hi = np.array([[0.0, 0.3]]), np.array([[0.4, 1.0]])
    dual = ApproachabilityDual(
        lo,
        hi,
        0.05,
        1e-12,
        construction="invariant",
        scale=cost_scale(costs, np.array([[-np.inf, 0.3]]), np.array([[2.0, np.inf]])),
        has_lower=np.array([[False, True]]),
        has_upper=np.array([[True, False]]),
    )
    dual.w = np.array([[0.3, -0.01]])
    a, b = dual.cuts(costs, np.array([0]))
    np.testing.assert_array_equal(a[0], [[1.0, 0.0, 0.5], [-0.0, -1.0, -0.5]])
    np.testing.assert_array_equal(b[0], [0.4, -0.3])
    q = dual.project(np.array([[0.8, 0.1, 0.1]]), 0.0, costs, np.array([0]))
    assert q[0] @ costs[0, :, 0] <= 0.4 + 1e-12 and q[0] @ costs[0, :, 1] >= 0.3 - 1e-12


def test_cost_scale_follows_the_column() -> None:
    costs = np.array([[[2.0, 0.0, 0.0], [4.0, 0.0, 0.0]]])
    lo = np.array([[-np.inf, 0.5, -np.inf]])
    hi = np.array([[9.0, np.inf, np.inf]])
    np.testing.assert_array_equal(cost_scale(costs, lo, hi), [[4.0, 0.5, 1.0]])


def test_construction_is_validated() -> None:
    assert check_construction("paper") == "paper"
    with pytest.raises(ValueError, match="invariant"):
        check_construction("scaled")
    with pytest.raises(ValueError, match="dual"):
        msroute.OMDApproachability(llm_problem(), horizon=10, dual="nope")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["cbwk", "ts-bwk", "moe"])
def test_lagrangian_baselines_do_not_depend_on_the_units(name: str) -> None:
    horizon = 600
    env = msroute.StochasticEnv(V, kappa=20, seed=[0, 1, 2, 3])
    out = []
    for f in [(1.0, 1.0), (1e-4, 1e4), (1e4, 1e-4)]:
        batch = msroute.ProblemBatch(llm_problem(*f), 4)
        pol = msroute.make_policy(name, batch, horizon=horizon, seed=3)
        trajectory = msroute.simulate({name: pol}, env, batch, horizon)[name]
        out.append((trajectory, pol.lambda_, f))  # type: ignore[attr-defined]
    (ref, lam, _), *others = out
    assert np.any(lam > 0)  # the dual acted
    for tr, lam_f, f in others:
        np.testing.assert_array_equal(tr.rewards, ref.rewards)  # the same decisions
        np.testing.assert_allclose(tr.costs / np.array(f), ref.costs, rtol=1e-12)
        np.testing.assert_allclose(lam_f, lam, rtol=1e-9, atol=1e-15)


def test_budget_holds_when_two_table_prices_are_off_by_a_factor_two() -> None:
    # Models 1 and 2 really cost twice their table price; the bounds must hold on what is spent.
    true = np.stack([USD, INHOUSE], 1)
    true[[1, 2], 0] *= 2.0
    horizon = 5000
    spend = {}
    # The paper's variant keeps a fixed floor, so every price is observed often enough to be
    # learned to 10%; the default variant's floor decays, so it sees the prices it avoids less
    # often (its bounds must hold all the same: "model" below).
    for mode, variant in (("distinct", "paper"), ("table", "paper"), ("model", "model")):
        batch = msroute.ProblemBatch(llm_problem(), 4)
        env = msroute.StochasticEnv(V, kappa=20, seed=[0, 1, 2, 3])
        pol = msroute.OMDApproachability(
            batch,
            horizon=horizon,
            seed=1,
            cost_estimate="distinct" if mode == "model" else mode,
            variant=variant,
        )
        skills = env.skills(0, horizon)
        total = np.zeros((4, 2))
        for t in range(horizon):
            d = pol.select()
            mask = draws_to_mask(d.draws, 6)
            cost = team_cost(mask, np.broadcast_to(true, (4, 6, 2)))
            pol.update(d, batch_sum_max_reward(skills[t], mask), cost)
            total += cost
        spend[mode] = total / horizon
        if mode == "distinct":  # the estimates found the real prices
            np.testing.assert_allclose(
                pol.cost_est.costs[:, :, 0], np.broadcast_to(true[:, 0], (4, 6)), rtol=0.1
            )
    for mode in ("distinct", "model"):
        assert np.all(spend[mode][:, 0] <= BUDGET) and np.all(spend[mode][:, 1] >= FLOOR)
    assert np.all(spend["table"][:, 0] > BUDGET)  # the table alone overspends


def test_realized_costs_equal_to_the_table_change_nothing() -> None:
    # Feeding the table's own costs leaves every estimate, hence every decision, bit for bit.
    d_est, _, _, pol = play(llm_problem(), 800)
    d_tab, _, _, _ = play(llm_problem(), 800, cost_estimate="table")
    np.testing.assert_array_equal(d_est, d_tab)
    np.testing.assert_array_equal(
        pol.cost_est.costs, np.broadcast_to(pol.problem_batch.costs, pol.cost_est.costs.shape)
    )


def test_update_with_scaled_realized_costs_moves_the_policy() -> None:
    # update(d, r, 100 * cost) used to leave q unchanged: now the estimates follow the spend.
    _, _, _, ref = play(llm_problem(), 300)
    batch = msroute.ProblemBatch(llm_problem(), 4)
    env = msroute.StochasticEnv(V, kappa=20, seed=[0, 1, 2, 3])
    pol = msroute.OMDApproachability(batch, horizon=300, seed=1)
    skills = env.skills(0, 300)
    for t in range(300):
        d = pol.select()
        mask = draws_to_mask(d.draws, 6)
        pol.update(d, batch_sum_max_reward(skills[t], mask), 100.0 * batch.realized_cost(mask))
    assert not np.array_equal(pol.q, ref.q)
    assert np.all(pol.cost_est.costs[:, :, 0] > 10 * USD)


def test_a_cut_out_of_reach_is_met_at_its_cheapest_vertex() -> None:
    """One cut below its reach (learned costs above the bound), beside an inactive one: the
    step is the floored vertex on the cut's cheapest expert, which a general solver finds as
    the limit of the projection onto the cut moved just above its reach."""
    from scipy.optimize import minimize

    from msroute.policies.duals import _reach

    gamma, k = 0.02, 5
    y = np.array([[0.1, 0.9, 0.3, -0.2, 0.4]])
    a = np.zeros((1, 2, k))
    a[0, 0] = [3.0, 2.0, 0.5, 4.0, 1.0]  # cheapest expert: 2
    b = np.array([[0.1, 0.0]])  # reach = gamma * 10.5 + 0.9 * 0.5 = 0.66 > 0.1
    assert b[0, 0] < _reach(a, gamma)[0, 0]
    q = ApproachabilityDual._project_unreachable(y, gamma, a, b)
    want = np.full(k, gamma)
    want[2] = 1 - (k - 1) * gamma
    np.testing.assert_allclose(q[0], want, rtol=0, atol=1e-15)
    # The general solver on the cut moved to reach + 1e-6 lands next to it.
    bound = _reach(a, gamma)[0, 0] + 1e-6
    res = minimize(
        lambda v: 0.5 * np.sum((v - y[0]) ** 2),
        np.full(k, 1 / k),
        jac=lambda v: v - y[0],
        bounds=[(gamma, 1)] * k,
        constraints=[
            {"type": "eq", "fun": lambda v: v.sum() - 1},
            {"type": "ineq", "fun": lambda v: bound - a[0, 0] @ v},
        ],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    np.testing.assert_allclose(res.x, q[0], atol=1e-5)


def test_a_cut_out_of_reach_with_a_tied_cheapest_expert_is_solved_numerically() -> None:
    """Two experts tie for the cheapest: the face has a segment, and the moved cut's
    projection picks the point of it nearest to y (not a vertex)."""
    gamma, k = 0.02, 4
    y = np.array([[0.0, 0.7, 0.6, 0.0]])
    a = np.zeros((1, 1, k))
    a[0, 0] = [3.0, 1.0, 1.0, 4.0]
    b = np.array([[0.1]])
    q = ApproachabilityDual._project_unreachable(y, gamma, a, b)
    np.testing.assert_allclose(q[0, [0, 3]], gamma, atol=1e-7)
    np.testing.assert_allclose(q[0, 1] - q[0, 2], 0.1, atol=1e-6)  # y's split, shifted equally


def _numpy_step(w, u, scale, lo, hi, pad_sd, pad_den, m2, n_obs, cap, lower, upper, tol, step):
    """The invariant dual's step written with numpy's array operations (the reference)."""
    if pad_sd > 0.0:
        pad = np.minimum(pad_sd * np.sqrt(m2 / (n_obs - 1)) / pad_den, cap)
        lo, hi = lo + pad, hi - pad
    u, lo, hi = u / scale, lo / scale, hi / scale
    grad = u - np.where(w > 0, hi, np.where(w < 0, lo, u.clip(lo, hi)))
    grad[(w == 0.0) & (np.abs(grad) <= tol)] = 0.0
    v = w + step * grad
    v = np.where(lower, v, np.maximum(v, 0.0))
    v = np.where(upper, v, np.minimum(v, 0.0))
    return v / np.maximum(np.sqrt((v * v).sum(axis=1, keepdims=True)), 1.0)


@pytest.mark.parametrize("d", [1, 2, 3, 7, 8, 9, 17, 64, 128])
@pytest.mark.parametrize("margin", [False, True])
def test_the_step_gives_numpys_floats_in_python_and_compiled(d: int, margin: bool) -> None:
    from msroute.policies._approach_rows import observe_rows, step_rows
    from msroute.policies._compiled.dual import approach_step, observe_cost

    rng = np.random.default_rng(d + 100 * margin)
    for _ in range(40):
        r = int(rng.integers(1, 5))
        w = rng.standard_normal((r, d)) * (rng.random((r, d)) < 0.7)  # zeros: the clip branch
        w /= max(1.0, float(np.abs(w).max()))
        scale = 10.0 ** rng.integers(-4, 4, (r, d)).astype(float)
        u = rng.random((r, d)) * scale * 2
        lower, upper = rng.random((r, d)) < 0.5, rng.random((r, d)) < 0.7
        w = np.where(lower, w, np.maximum(w, 0.0))  # in the cone, as the dual keeps it
        w = np.where(upper, w, np.minimum(w, 0.0))
        lo = np.where(lower, rng.random((r, d)) * scale * 0.5, -np.inf)
        hi = np.where(upper, lo.clip(0) + rng.random((r, d)) * scale, np.inf)
        m2, n_obs = rng.random((r, d)) * scale**2 * 50, int(rng.integers(2, 500))
        cap = 0.1 * np.maximum(np.abs(np.where(upper, hi, 0)), np.abs(np.where(lower, lo, 0)))
        pad = (3.0, 2 * math.sqrt(n_obs)) if margin else (0.0, 1.0)
        args = (scale, lo, hi, *pad, m2, n_obs, cap, lower, upper, 1e-12, 0.3)
        want = _numpy_step(w, u, *args)
        got = np.empty_like(w)
        approach_step(w, u, *args, got)
        assert_bitwise(got, want, "compiled")
        out = [[0.0] * d for _ in range(r)]
        step_rows(
            w.tolist(),
            u.tolist(),
            *(x.tolist() if isinstance(x, np.ndarray) else x for x in args),
            out,
        )
        assert_bitwise(np.array(out), want, "python")
        # The realized cost's running moments, as numpy's Welford step gives them.
        cost, mean = rng.random((r, d)) * scale, rng.random((r, d)) * scale
        delta = cost - mean
        mean_np = mean + delta / n_obs
        m2_np = m2 + delta * (cost - mean_np)
        mean_c, m2_c = np.empty_like(mean), np.empty_like(m2)
        observe_cost(cost, mean, m2, n_obs, mean_c, m2_c)
        mean_l, m2_l = [[0.0] * d for _ in range(r)], [[0.0] * d for _ in range(r)]
        observe_rows(cost.tolist(), mean.tolist(), m2.tolist(), n_obs, mean_l, m2_l)
        for a, b in (
            (mean_c, mean_np),
            (m2_c, m2_np),
            (np.array(mean_l), mean_np),
            (np.array(m2_l), m2_np),
        ):
            assert_bitwise(a, b, "moments")


def test_more_than_128_cost_coordinates_are_refused() -> None:
    d = 129
    with pytest.raises(msroute.errors.InvalidValueError, match="at most 128 cost coordinates"):
        ApproachabilityDual(
            np.zeros((1, d)),
            np.ones((1, d)),
            0.1,
            1e-12,
            construction="invariant",
            scale=np.ones((1, d)),
            has_lower=np.zeros((1, d), bool),
            has_upper=np.ones((1, d), bool),
        )


def assert_bitwise(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, what
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), what


def test_a_cut_kept_alone_at_its_reach_with_tied_cheapest_experts_is_met_on_their_face() -> None:
    """The case a live router at M = 5 met: an expert cap's tangent cut out of reach, its
    cheapest experts tied (cost 0), beside an inactive cut. The moved cut is within the
    solver's tolerance of its reach, so the step is the limit of the projection: the
    projection of y onto the face of the tied experts, which a general solver confirms."""
    from scipy.optimize import minimize

    gamma, k = 0.0009622504486493762, 20
    y = np.array(
        [
            [
                -0.10852724693913578,
                1.2608916144846236,
                2.065974683254075,
                0.9068203615283131,
                0.876303200670587,
                0.5676364839384052,
                0.3264285267120061,
                0.250681612417936,
                -0.42068500891268074,
                0.6729404164818352,
                0.06512883676405086,
                0.04370514871011571,
                -0.5495187043510308,
                -0.5016871889574702,
                -0.0950606321408964,
                0.7733353718268267,
                0.8639912539298645,
                0.4875036846049326,
                -0.02015112649218348,
                -0.2625432080589877,
            ]
        ]
    )
    a = np.zeros((1, 2, k))
    a[0, 1, [0, 2, 3, 4, 5, 6, 7, 16, 18]] = 4.980417213787329
    a[0, 1, 1] = 6.024454511834346e-07
    b = np.array([[0.0, -0.10008577540432817]])
    q = ApproachabilityDual._project_unreachable(y, gamma, a, b)
    tied = a[0, 1] == 0.0
    np.testing.assert_allclose(q[0, ~tied], gamma, atol=1e-15)
    assert q.sum() == pytest.approx(1.0, abs=1e-12)
    res = minimize(
        lambda v: 0.5 * np.sum((v - y[0, tied]) ** 2),
        np.full(tied.sum(), (1 - (k - tied.sum()) * gamma) / tied.sum()),
        jac=lambda v: v - y[0, tied],
        bounds=[(gamma, 1)] * int(tied.sum()),
        constraints=[{"type": "eq", "fun": lambda v: v.sum() - (1 - (k - tied.sum()) * gamma)}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    np.testing.assert_allclose(q[0, tied], res.x, atol=1e-7)


def test_an_exact_tangent_out_of_reach_moves_toward_the_cheap_expert() -> None:
    """Near the vertex of a dear expert the exact surrogate's tangent gives it a slope near 0,
    so the tangent cut is out of reach and its own cheapest expert is the dear one. The step
    must lower the team's true expected cost instead: mass leaves the dear expert, and the
    cost the step reaches is at most halfway from the current cost to the floor's least."""
    from msroute.policies.duals import expected_team_cost

    costs = np.array([[[0.05], [0.004], [0.001]]])  # (R, K, d): one dear, two cheap
    m, gamma, budget = 3, 0.01, 0.01
    dual = ApproachabilityDual(
        np.array([[-np.inf]]),
        np.array([[budget]]),
        0.05,
        1e-12,
        construction="invariant",
        scale=np.array([[0.05]]),
        has_lower=np.array([[False]]),
        has_upper=np.array([[True]]),
        surrogate="exact",
        m_draws=m,
    )
    dual.w = np.array([[0.5]])  # the budget's cut is on
    q0 = np.array([[0.98, 0.01, 0.01]])
    y = q0 + np.array([[0.05, -0.02, -0.03]])  # the reward's gradient pulls to the dear one
    q = dual.project(y, gamma, costs, np.array([0]), q0)
    before = expected_team_cost(q0, costs[:, :, :], m)[0, 0]
    after = expected_team_cost(q, costs[:, :, :], m)[0, 0]
    assert q[0, 0] < q0[0, 0] - 0.3  # the dear expert loses mass
    assert after < before  # toward the budget on the true cost
    np.testing.assert_allclose(q.sum(), 1.0)
    assert q.min() >= gamma - 1e-12


def test_an_unpaced_team_router_keeps_its_budget_on_three_experts() -> None:
    """A cold router with a team of three (exact surrogate, anytime eta) used to settle on the
    dear expert's vertex and spend several times its budget; unpaced, the learner alone now
    stays within it."""
    cfg = {
        "policy": "omd",
        "m_draws": 3,
        "cost_names": ["usd"],
        "seed": 0,
        "pacing": False,
        "experts": {"cheap": [0.00013], "mid": [0.00064], "dear": [0.0081]},
        "constraints": {"upper": {"usd": 0.0015}},
    }
    quality = {"cheap": 0.31, "mid": 0.79, "dear": 0.85}
    rng = np.random.default_rng(0)
    router = msroute.Router(cfg)
    for _ in range(3000):
        d = router.route()
        p = max(quality[e] for e in d.team)
        router.feedback(d.decision_id, float(rng.random() < p))
    assert router.state()["avg_cost"]["usd"] <= 0.0015
