"""Warm start from an eval table: OPT^ctx's routing, its dual, pseudo-counts and the bias check."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.cli import main
from msroute.core.oracle import contextual_opt
from msroute.datasets.outcomes import OutcomeTable
from msroute.errors import InvalidStateError, InvalidValueError
from msroute.outcome_env import OutcomeEnv
from msroute.policies import load_policy
from msroute.policies.live import live_kwargs
from msroute.policies.persist import policy_bytes, policy_from_bytes
from msroute.policies.registry import make_policy
from msroute.simulate import simulate
from msroute.warmstart import table_contexts, warm_start, within_margin
from test_outcomes import write_csv

#: Per context, each model's chance of a right answer: the best model differs by context, and
#: the dearest model (3) is the best overall.
MEANS = np.array([[0.9, 0.3, 0.5, 0.8], [0.2, 0.85, 0.4, 0.9], [0.3, 0.4, 0.95, 0.9]])
PRICES = np.array([1.0, 1.0, 1.0, 4.0])


def graded(
    seed: int, p: int, means: np.ndarray = MEANS, prices: np.ndarray = PRICES
) -> OutcomeTable:
    """A table of ``p`` prompts graded by chance at ``means``, each call at its model's price
    (``prices``) give or take a tenth."""
    rng = np.random.default_rng(seed)
    x, k = means.shape
    cat = rng.integers(0, x, p)
    return OutcomeTable(
        prompt_ids=tuple(f"p{i}" for i in range(p)),
        categories=tuple(f"c{i}" for i in range(x)),
        category=cat,
        models=tuple(f"m{i}" for i in range(k)),
        dims=("score",),
        scores=(rng.random((p, 1, k)) < means[cat][:, None, :]).astype(float),
        cost_names=("usd",),
        costs=(prices * rng.uniform(0.9, 1.1, (p, k)))[:, :, None],
    )


def inverted(table: OutcomeTable) -> OutcomeTable:
    return OutcomeTable(
        prompt_ids=table.prompt_ids,
        categories=table.categories,
        category=table.category,
        models=table.models,
        dims=table.dims,
        scores=1.0 - table.scores,
        cost_names=table.cost_names,
        costs=table.costs,
    )


def policy(table: OutcomeTable, budget: float, runs: int = 1, horizon: int = 3000):
    problem = Problem(table.mean_costs(), 1, Constraints(upper=[budget]))
    kwargs = live_kwargs("omd", 1, table.n_contexts)
    return make_policy("omd", [problem] * runs, horizon=horizon, seed=list(range(runs)), **kwargs)


def run(pol, stream: OutcomeTable, horizon: int, runs: int = 1) -> np.ndarray:
    env = OutcomeEnv(stream, horizon=horizon, n_runs=runs, seed=list(range(100, 100 + runs)))
    traj = simulate({"p": pol}, env, pol.problem_batch, horizon)["p"]
    return traj.rewards.mean(axis=0)


def test_a_warm_start_begins_at_the_tables_certified_optimum_and_spends_nothing():
    table = graded(0, 600)
    pol = policy(table, budget=1.6)
    contexts = table_contexts(table, table.categories)
    (plan,) = warm_start(pol, table, contexts, strength=30.0)
    ones = np.ones((3, 1))
    # Counted as explored (the default), the prior counts for the floor as the steps that gave
    # each expert 30 rounds: (30 / (2 B gamma))^2.
    first = (30.0 / (2.0 * pol.batch_size * pol.gamma)) ** 2 + 1.0
    floor = max(pol.floor_min, pol.gamma / np.sqrt(first))
    # Within the live budget margin (the default): the optimum of the bound less its cap, a
    # tenth of it, the box the dual approaches at its first decisions.
    problem = within_margin(pol, 0)
    assert problem.constraints.upper_array()[0] == pytest.approx(0.9 * 1.6)
    opt = contextual_opt(
        table.scores, contexts, ones, problem, floor=floor, round_costs=table.costs
    )
    np.testing.assert_allclose(pol.q[0], opt.q, atol=1e-9)
    np.testing.assert_allclose(plan.value, opt.value)
    assert opt.cost[0] <= 0.9 * 1.6 + 1e-9 and pol.prior.fade.all()
    loose = policy(table, budget=1.6)
    (bare,) = warm_start(loose, table, contexts, strength=30.0, margin=False)
    at_bound = contextual_opt(
        table.scores,
        contexts,
        ones,
        loose.problem_batch.problems[0],
        floor=floor,
        round_costs=table.costs,
    )
    np.testing.assert_allclose(loose.q[0], at_bound.q, atol=1e-9)
    assert bare.value > plan.value and not loose.prior.fade.any()
    # The budget binds at the optimum (model 3 is dearer and better): the dual starts on it.
    assert plan.multipliers[0] > 0 and pol.w[0, 0] > 0
    state = pol.state()
    assert state["decisions"] == 0 and state["feedback"] == 0
    assert np.all(pol.pacer.spend == 0) if pol.pacer is not None else True
    with pytest.raises(InvalidValueError, match="not among the router's contexts"):
        table_contexts(table, ["c0", "c1"])
    run(pol, table, 20)
    with pytest.raises(InvalidStateError, match="decided already"):
        warm_start(pol, table, contexts)


def test_a_warm_start_seeds_the_pacers_cost_estimates_per_context():
    # The table's prompts of context 2 cost three times those of context 0: the pacer books a
    # first decision of each context at its own table cost, not at the all-prompt mean.
    table = graded(5, 600)
    costs = np.array(table.costs)
    costs[table.category == 2] *= 3.0
    table = OutcomeTable(**{**vars(table), "costs": costs})
    pol = policy(table, budget=3.0)
    (plan,) = warm_start(pol, table, table_contexts(table, table.categories), strength=20.0)
    est = pol.pacer.est
    np.testing.assert_allclose(est.costs.reshape(plan.costs.shape), plan.costs)
    np.testing.assert_allclose(est.n_obs, 20.0)
    for x in range(3):
        decision = pol.select(np.array([x]))
        team = np.unique(decision.draws[0])
        np.testing.assert_allclose(decision.cost[0], plan.costs[x, team].sum(axis=0))


def test_a_warm_start_saves_and_resumes_bit_for_bit(tmp_path):
    table = graded(1, 300)
    pol = policy(table, budget=1.6, runs=2)
    warm_start(pol, table, table_contexts(table, table.categories), strength=20.0)
    run(pol, table, 300, runs=2)
    twin = policy_from_bytes(policy_bytes(pol))
    pol.save(tmp_path / "p.npz")
    thrice = load_policy(tmp_path / "p.npz")
    assert twin.prior.on and np.array_equal(twin.prior.weight, pol.prior.weight)
    ctx = np.array([0, 2])
    for _ in range(50):
        a, b, c = pol.select(ctx), twin.select(ctx), thrice.select(ctx)
        assert np.array_equal(a.draws, b.draws) and np.array_equal(a.draws, c.draws)
        for p, d in ((pol, a), (twin, b), (thrice, c)):
            p.update(d, np.array([1.0, 0.0]), np.array([[1.0], [1.0]]))


def test_a_right_prior_learns_faster_and_a_wrong_one_is_refuted_by_the_traffic():
    eval_table, stream = graded(2, 600), graded(3, 2000)
    contexts = table_contexts(eval_table, eval_table.categories)
    runs, horizon = 4, 600
    cold = run(policy(stream, 1.6, runs, horizon), stream, horizon, runs)
    right = policy(stream, 1.6, runs, horizon)
    warm_start(right, eval_table, contexts, strength=20.0)
    wrong = policy(stream, 1.6, runs, horizon)
    warm_start(wrong, inverted(eval_table), contexts, strength=20.0)
    assert np.all(wrong.q[:, np.arange(3), MEANS.argmin(axis=1)] > 0.9)  # each at its worst
    right_reward, wrong_reward = (
        run(right, stream, horizon, runs),
        run(wrong, stream, horizon, runs),
    )
    assert right_reward.mean() > cold.mean() + 0.03
    # The traffic has refuted the inverted table in every context of every run: no pseudo-count
    # is left, and each context went back to a cold start, which it learns from.
    assert not wrong.prior.on and np.all(wrong.prior.weight == 0)
    assert np.all(right.prior.strength == 20.0)
    assert wrong_reward.mean() > cold.mean() - 0.2
    assert np.all(wrong.q[:, np.arange(3), MEANS.argmin(axis=1)] < 0.5)


def test_bench_warm_split_streams_the_other_prompts(tmp_path, capsys):
    path = tmp_path / "mine.csv"
    write_csv(path, graded(4, 400))
    out = tmp_path / "out"
    args = ["bench", "--outcomes", str(path), "--seeds", "2", "--horizon", "400", "--m-draws"]
    args += ["1", "--policies", "omd,uniform", "--budgets", "1.6", "--out", str(out)]
    args += ["--jobs", "1", "--quiet", "--no-plot"]
    assert main([*args, "--warm-split", "0.5"]) == 0
    with (out / "bench-mine.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["warm"] for r in rows} == {"split 0.5"} and len(rows) == 4
    # Each seed streams its own half: the comparators differ between seeds.
    assert len({r["opt_reward"] for r in rows}) == 2
    assert all(r["feasible"] == "True" for r in rows if r["policy"] == "omd")
    other = tmp_path / "other.csv"
    text = path.read_text().replace("m3", "m9")
    other.write_text(text)
    assert main([*args, "--warm-start", str(other)]) == 2
    assert (
        "other models than the stream; missing m3; not in the stream m9" in capsys.readouterr().err
    )


#: Close experts: each context's best is 0.05-0.1 ahead of the others, all at the same price
#: (the budget does not bind), so only the learner's own steps can move it off the table's pick.
CLOSE = np.array(
    [
        [0.6, 0.5, 0.5, 0.55, 0.5, 0.45],
        [0.5, 0.6, 0.55, 0.5, 0.45, 0.5],
        [0.45, 0.5, 0.5, 0.5, 0.55, 0.6],
    ]
)


@pytest.mark.parametrize("anchor", [True, False])
def test_an_anchored_warm_start_stays_on_a_good_prior(anchor):
    # An accurate table (1,000 prompts per context): its pick is each context's best. Anchored
    # (the default), the router keeps most of each context on it over 500 rounds per context
    # and earns near the best; without the anchor (the warm start as it was before it, its
    # floor counting N / B steps), the importance-weighted residual of a few lucky floor draws
    # carries whole contexts off it (the drift the anchor removes).
    eval_table, stream = graded(2, 3000, CLOSE, np.ones(6)), graded(3, 3000, CLOSE, np.ones(6))
    contexts = table_contexts(eval_table, eval_table.categories)
    runs, horizon = 8, 1500
    pol = policy(stream, 2.0, runs, horizon)
    warm_start(pol, eval_table, contexts, anchor=anchor, explored=anchor)
    reward = run(pol, stream, horizon, runs)
    on_best = pol.q[:, np.arange(3), CLOSE.argmax(axis=1)]
    assert pol.prior.on and bool(np.all(pol.prior.anchor == anchor))
    if anchor:
        assert on_best.min() > 0.7 and on_best.mean() > 0.9
        assert reward.mean() > 0.6 - 0.025
    else:
        assert on_best.min() < 0.1 and reward.mean() < 0.6 - 0.04


def test_the_anchor_damps_residuals_counts_steps_and_prices_by_the_priors_weight():
    table = graded(0, 600)
    pol = policy(table, budget=1.6, runs=2)
    (plan,) = warm_start(pol, table, table_contexts(table, table.categories), strength=30.0)
    prior = pol.prior
    np.testing.assert_allclose(prior.offset, 30.0)  # N steps, not N / B
    np.testing.assert_allclose(prior.price, np.tile(plan.multipliers, (2, 1)))
    np.testing.assert_allclose(prior.damping(np.arange(2), np.array([0, 1])), 1.0 / 31.0)
    prior.n[0, 0, 2] = 9.0  # nine live rounds of expert 2: the traffic's share is 10 / 40
    assert prior.damping(np.arange(2), np.array([0, 0]))[0, 2] == pytest.approx(10.0 / 40.0)
    np.testing.assert_allclose(prior.price_of(np.arange(2), np.array([1, 1])), prior.price)
    prior.weight[0, 1] *= 0.25  # the bias check shrank context 1 of run 0 to a quarter
    np.testing.assert_allclose(
        prior.price_of(np.arange(2), np.array([1, 1])), prior.price * [[0.25], [1.0]]
    )
    # Without the anchor: N / B steps, no price, residuals as they are.
    loose = policy(table, budget=1.6, runs=2)
    warm_start(loose, table, table_contexts(table, table.categories), 30.0, anchor=False)
    np.testing.assert_allclose(loose.prior.offset, 30.0 / loose.batch_size)
    assert not loose.prior.anchor.any() and np.all(loose.prior.price == 0)
    np.testing.assert_allclose(loose.prior.damping(np.arange(2), np.array([0, 1])), 1.0)


def test_a_policy_file_from_before_the_anchor_resumes_without_it(tmp_path):
    table = graded(1, 300)
    pol = policy(table, budget=1.6, runs=2)
    warm_start(pol, table, table_contexts(table, table.categories), 20.0, anchor=False)
    run(pol, table, 200, runs=2)
    old = _saved_as_format(pol, tmp_path / "v6.npz", 6, ("prior.anchor", "prior.price"))
    assert old.prior.on and not old.prior.anchor.any()
    _resume_alike(pol, old)


def _saved_as_format(pol, path, version, arrays):
    """``pol`` saved, rewritten as format ``version`` wrote it (without ``arrays``), loaded."""
    import json
    import zipfile

    pol.save(path)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members.pop("manifest.json"))
    manifest["format_version"] = version
    for name in arrays:
        manifest["arrays"].remove(name)
        del members[f"state.{name}.npy"]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        for n, data in members.items():
            zf.writestr(n, data)
    return load_policy(path)


def _resume_alike(pol, old):
    """The policy and its reloaded copy decide the same, draw for draw, as they learn."""
    ctx = np.array([0, 2])
    for _ in range(60):
        a, b = pol.select(ctx), old.select(ctx)
        assert np.array_equal(a.draws, b.draws) and np.array_equal(a.probs, b.probs)
        for p, d in ((pol, a), (old, b)):
            p.update(d, np.array([1.0, 0.0]), np.array([[1.0], [1.0]]))


def test_an_anchored_single_run_decides_as_the_general_paths_bit_for_bit():
    # A live router's single-run paths (the model estimator in Python floats, damped) give the
    # floats of the batched numpy forms.
    from msroute.policies.state_walk import state_dict
    from test_policy_single_run import assert_bitwise, general_paths

    table = graded(4, 600)
    contexts = table_contexts(table, table.categories)
    fast, general = policy(table, budget=1.6), policy(table, budget=1.6)
    for pol in (fast, general):
        warm_start(pol, table, contexts)
    rng = np.random.default_rng(5)
    for t in range(400):
        ctx = rng.integers(0, 3, 1)
        d_fast = fast.select_trusted(ctx, None)
        with general_paths():
            d_gen = general.select(ctx)
        assert_bitwise(d_fast.draws, d_gen.draws, f"draws of round {t}")
        reward = np.array([float(rng.random() < MEANS[ctx[0], d_fast.draws[0, 0]])])
        cost = np.array([[PRICES[d_fast.draws[0, 0]] * rng.uniform(0.9, 1.1)]])
        fast.update_trusted(d_fast, reward, cost)
        with general_paths():
            general.update(d_gen, reward, cost)
    for key, value in state_dict(fast).items():
        assert_bitwise(value, state_dict(general)[key], key)
    assert fast.prior.anchor.all() and int(fast._steps.sum()) > 10


def test_within_the_margin_a_warm_start_keeps_its_start_and_spends_up_to_the_budget():
    # The table's optimum of the bound itself is a tenth over the box the dual approaches at
    # first: each context's first QP step then takes the aggregate's whole excess and moves
    # toward its cheapest models (a 7-10% of the mass in 300 rounds), and the price, gated
    # by the dual's sign, holds the spend where it is as the margin shrinks (0.75-0.86 of the
    # budget). Within the margin the start stays (about 2%) and the faded price lets the
    # spend back up to the budget.
    budget, runs, horizon = 1.6, 8, 3000
    eval_table, stream = graded(2, 600), graded(3, 3000)
    contexts = table_contexts(eval_table, eval_table.categories)
    moved, spend = {}, {}
    for margin in (True, False):
        pol = policy(stream, budget, runs, horizon)
        warm_start(pol, eval_table, contexts, margin=margin)
        start = pol.q
        env = OutcomeEnv(stream, horizon=horizon, n_runs=runs, seed=list(range(100, 100 + runs)))
        simulate({"p": pol}, env, pol.problem_batch, 300)
        moved[margin] = float(np.abs(pol.q - start).sum(axis=-1).mean() / 2)
        traj = simulate({"p": pol}, env, pol.problem_batch, horizon)["p"]
        spend[margin] = float(traj.costs[:, :, 0].mean() / budget)
        assert np.all(traj.costs[:, :, 0].mean(axis=0) <= budget)
    assert moved[True] < 0.04 and moved[False] > 0.06
    assert spend[True] > 0.9 and spend[True] > spend[False] + 0.04


def test_the_margins_price_fades_with_the_spends_slack():
    table = graded(0, 600)
    pol = policy(table, budget=1.6)
    warm_start(pol, table, table_contexts(table, table.categories), strength=30.0)
    prior, dual, runs, ctx = pol.prior, pol.dual, np.array([0]), np.array([1])
    costs = pol.cost_est.costs.reshape(1, 3, 4, 1)[:, 1]
    price = prior.price_of(runs, ctx)
    assert price[0, 0] > 0 and dual.pad_cap[0, 0] == pytest.approx(0.16)
    _, hi = dual.target()  # the bound itself before two realized costs
    full = np.einsum("rkd,rd->rk", costs, price)

    def at(spend: float) -> np.ndarray:
        aggregate = (np.array([0.0]), np.array([[spend]]))  # the contexts' spend, exactly
        return prior.priced(runs, ctx, dual, pol.q[:, 1], costs, aggregate)

    for spend, share in ((hi[0, 0] + 0.3, 1.0), (hi[0, 0], 1.0), (hi[0, 0] - 0.08, 0.5)):
        np.testing.assert_allclose(at(spend), share * full, rtol=1e-12)
    np.testing.assert_allclose(at(hi[0, 0] - 0.16), 0.0, atol=1e-12)  # a cap inside: none
    np.testing.assert_array_equal(at(hi[0, 0] - 0.2), 0.0)
    np.testing.assert_array_equal(at(0.1), 0.0)
    dual.w[0] = 0.0  # the dual's sign plays no part in a faded price
    np.testing.assert_allclose(at(hi[0, 0]), full, rtol=1e-12)
    prior.fade[0] = False  # without the margin: the dual's sign gates it, whatever the spend
    np.testing.assert_array_equal(at(hi[0, 0]), 0.0)
    dual.w[0] = 0.5
    np.testing.assert_allclose(at(0.1), full, rtol=1e-12)


def test_a_policy_file_from_before_the_margin_resumes_without_it(tmp_path):
    table = graded(1, 300)
    pol = policy(table, budget=1.6, runs=2)
    warm_start(pol, table, table_contexts(table, table.categories), 20.0, margin=False)
    run(pol, table, 200, runs=2)
    old = _saved_as_format(pol, tmp_path / "v7.npz", 7, ("prior.fade",))
    assert old.prior.on and old.prior.anchor.all() and not old.prior.fade.any()
    _resume_alike(pol, old)


def test_a_prior_counted_as_explored_starts_the_floor_where_a_cold_one_had_seen_as_much():
    # N pseudo-rounds of every expert are the rounds the decaying floor gamma / sqrt(n) gives
    # each expert in (N / (2 B gamma))^2 steps: the floor starts there, not at the anchor's N.
    table = graded(0, 600)
    contexts = table_contexts(table, table.categories)
    pol, anchored = policy(table, budget=1.6, runs=2), policy(table, budget=1.6, runs=2)
    (plan,) = warm_start(pol, table, contexts, strength=30.0)
    (old,) = warm_start(anchored, table, contexts, strength=30.0, explored=False)
    prior, runs, ctx = pol.prior, np.arange(2), np.array([0, 1])
    seen = (30.0 / (2.0 * pol.batch_size * pol.gamma)) ** 2
    assert prior.explored.all() and not anchored.prior.explored.any()
    np.testing.assert_allclose(prior.floor_offset(runs, ctx, pol.gamma), seen)
    np.testing.assert_allclose(anchored.prior.floor_offset(runs, ctx, pol.gamma), 30.0)
    # The start's floor is the one of that step: the table's picks keep more of the traffic.
    assert plan.q.min() == pytest.approx(pol.gamma / np.sqrt(seen + 1.0))
    assert old.q.min() == pytest.approx(pol.gamma / np.sqrt(31.0))
    assert plan.value > old.value
    # A prior the bias check shrinks explores more (its weight squared), a refuted one as cold.
    prior.weight[1, 1] *= 0.5
    np.testing.assert_allclose(prior.floor_offset(runs, ctx, pol.gamma), [seen, seen / 4])
    prior.weight[1] = 0.0
    prior.offset[1] = 0.0
    np.testing.assert_array_equal(prior.floor_offset(runs, ctx, pol.gamma)[1], 0.0)


def test_counted_as_explored_the_floor_leaves_the_tables_picks_their_traffic():
    # After 600 rounds of an accurate table's own distribution, every context of every run
    # keeps less than a tenth of the anchor's floor on the experts it does not route to: the
    # floor no longer spends a share of the traffic on experts the table graded.
    eval_table, stream = graded(2, 3000, CLOSE, np.ones(6)), graded(3, 3000, CLOSE, np.ones(6))
    contexts = table_contexts(eval_table, eval_table.categories)
    runs, horizon, off = 2, 600, {}
    for explored in (True, False):
        pol = policy(stream, 2.0, runs, horizon)
        warm_start(pol, eval_table, contexts, explored=explored)
        run(pol, stream, horizon, runs)
        others = np.ones(pol.q.shape, dtype=bool)
        others[:, np.arange(3), CLOSE.argmax(axis=1)] = False
        off[explored] = pol.q[others].reshape(runs, 3, -1).min(axis=-1)
    # The anchor's floor after the most steps a context can have taken.
    anchor_floor = pol.gamma / np.sqrt(100.0 + horizon / pol.batch_size + 1.0)
    assert np.all(off[False] >= anchor_floor * (1 - 1e-9))
    assert np.all(off[True] < anchor_floor / 10)


def test_a_policy_file_from_before_the_floor_counted_the_prior_resumes_without_it(tmp_path):
    table = graded(1, 300)
    pol = policy(table, budget=1.6, runs=2)
    warm_start(pol, table, table_contexts(table, table.categories), 20.0, explored=False)
    run(pol, table, 200, runs=2)
    old = _saved_as_format(pol, tmp_path / "v8.npz", 8, ("prior.explored",))
    assert old.prior.on and old.prior.fade.all() and not old.prior.explored.any()
    _resume_alike(pol, old)


def test_a_tables_costs_must_be_the_problems():
    """A table's costs are the problem's by name (its named costs picked, in the problem's
    order), or without names as many as the problem's; else an error names them."""
    table = graded(0, 300)
    gpu = dataclasses.replace(
        table, cost_names=("gpu", "usd"), costs=np.concatenate([2 * table.costs, table.costs], 2)
    )
    named = make_policy(
        "omd",
        [Problem(table.mean_costs(), 1, Constraints(upper=[1.6], names=["usd"]))],
        horizon=3000,
        seed=[0],
        **live_kwargs("omd", 1, 3),
    )
    contexts = table_contexts(table, table.categories)
    (by_name,) = warm_start(named, gpu, contexts, strength=30.0)
    (plain,) = warm_start(policy(table, 1.6), table, contexts, strength=30.0)
    np.testing.assert_array_equal(by_name.q, plain.q)
    with pytest.raises(InvalidValueError, match=r"the table has 2 costs \('gpu', 'usd'\)"):
        warm_start(policy(table, 1.6), gpu, contexts, strength=30.0)
