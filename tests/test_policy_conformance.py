"""Conformance of every registered policy to the batched ``Policy`` contract."""

from __future__ import annotations

import numpy as np
import pytest

from _policy_sim import beta_skills, run
from msroute import Constraints, Problem, batch_sum_max_reward
from msroute.policies.base import BasePolicy, Policy, draws_to_mask
from msroute.policies.registry import POLICIES, available_policies, get_policy_class, make_policy

NAMES = available_policies()
#: The multinomial (MSR) policies draw M times with replacement: their subset is the distinct
#: draws. Every other policy routes M distinct experts.
MULTINOMIAL = {"omd", "omd-contextual"}
#: Index policies with deterministic tie-breaking: they draw nothing from their random stream,
#: so their decisions depend on the feedback only, never on the seed.
SEED_FREE = {"greedy", "cucb", "cbwk"}

K, M, N, R = 6, 2, 2, 4
COSTS = np.array([[1.0, 0.0], [0.8, 0.2], [0.5, 0.5], [0.2, 0.4], [0.0, 1.0], [0.3, 0.3]])
# Both kinds of bound, and both on one coordinate; feasible for OMD's floor 1/(10K).
PROBLEM = Problem(COSTS, M, Constraints(upper=[0.9, 1.2], lower=[0.2, None]))
MEANS = np.array([[0.9, 0.7, 0.6, 0.5, 0.4, 0.3], [0.4, 0.8, 0.5, 0.6, 0.7, 0.2]])
ROUNDS = 50


@pytest.fixture(scope="module")
def skills() -> np.ndarray:
    return beta_skills(MEANS, R, ROUNDS, seed=99)


def make(name: str, seed: int | None = 0, n_runs: int = R) -> BasePolicy:
    return make_policy(name, PROBLEM, horizon=1000, n_runs=n_runs, seed=seed)


def test_registry_names_and_classes():
    assert set(NAMES) == {
        "random",
        "greedy",
        "cucb",
        "cbwk",
        "ts",
        "ts-bwk",
        "moe",
        "omd",
        "omd-contextual",
    }
    expected = {
        "random": "RandomPolicy",
        "greedy": "GreedyPolicy",
        "cucb": "CUCB",
        "cbwk": "CBwK",
        "ts": "ThompsonSampling",
        "ts-bwk": "ThompsonSamplingBwK",
        "moe": "MoEGating",
    }
    for name, cls in expected.items():
        assert POLICIES[name].endswith(":" + cls)
        assert get_policy_class(name).__name__ == cls
    assert get_policy_class("CBWK") is get_policy_class("cbwk")
    with pytest.raises(ValueError, match="unknown policy"):
        get_policy_class("ucb")


@pytest.mark.parametrize("name", NAMES)
def test_is_a_policy_with_its_registered_name(name):
    pol = make(name)
    assert isinstance(pol, Policy)
    assert pol.name == name
    assert (pol.n_runs, pol.n_experts, pol.m_draws) == (R, K, M)


@pytest.mark.parametrize("name", NAMES)
def test_selections_are_valid_over_a_run(name, skills):
    rec = run(make(name), skills)
    assert rec.draws.dtype == np.int64
    assert rec.draws.shape == (ROUNDS, R, M)
    assert rec.draws.min() >= 0 and rec.draws.max() < K
    if name not in MULTINOMIAL:
        ordered = np.sort(rec.draws, axis=2)
        assert (np.diff(ordered, axis=2) > 0).all(), "the M experts of a row must be distinct"


@pytest.mark.parametrize("name", NAMES)
def test_single_run_shapes(name):
    pol = make(name, n_runs=1)
    draws = pol.select()
    assert draws.shape == (1, M)
    pol.update(draws, np.array([1.0]), np.zeros((1, 2)))
    assert pol.select().shape == (1, M)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_selections(name, skills):
    a = run(make(name, seed=123), skills)
    b = run(make(name, seed=123), skills)
    np.testing.assert_array_equal(a.draws, b.draws)
    np.testing.assert_array_equal(a.rewards, b.rewards)


@pytest.mark.parametrize("name", NAMES)
def test_different_seeds_differ_unless_seed_free(name, skills):
    a = run(make(name, seed=1), skills)
    b = run(make(name, seed=2), skills)
    if name in SEED_FREE:
        np.testing.assert_array_equal(a.draws, b.draws)
    else:
        assert not np.array_equal(a.draws, b.draws)


@pytest.mark.parametrize("name", NAMES)
def test_seed_sequence_is_accepted(name, skills):
    a = run(
        make_policy(name, PROBLEM, horizon=1000, n_runs=R, seed=np.random.SeedSequence(5)),
        skills[:20],
    )
    b = run(
        make_policy(name, PROBLEM, horizon=1000, n_runs=R, seed=np.random.SeedSequence(5)),
        skills[:20],
    )
    np.testing.assert_array_equal(a.draws, b.draws)


@pytest.mark.parametrize("name", NAMES)
def test_update_does_not_mutate_its_inputs(name, skills):
    pol = make(name)
    run(pol, skills[:15])  # past any warm-up
    draws = pol.select()
    reward = np.linspace(0.5, 1.5, R)
    cost = np.tile([0.7, 0.3], (R, 1))
    copies = draws.copy(), reward.copy(), cost.copy()
    pol.update(draws, reward, cost)
    for before, after in zip(copies, (draws, reward, cost), strict=True):
        np.testing.assert_array_equal(before, after)
    # The returned selection is the caller's: changing it does not change the policy.
    nxt = pol.select()
    keep = nxt.copy()
    nxt[:] = 0
    pol.update(keep, reward, cost)


def _bad_inputs() -> list[tuple[str, dict[str, object], str]]:
    return [
        ("nan reward", {"reward": np.array([1.0, np.nan, 1.0, 1.0])}, "reward"),
        ("inf cost", {"cost": np.full((R, 2), np.inf)}, "cost"),
        ("reward shape", {"reward": np.ones(R + 1)}, "reward"),
        ("reward 2-d", {"reward": np.ones((R, 1))}, "reward"),
        ("cost shape", {"cost": np.ones((R, 3))}, "cost"),
        ("draws shape", {"draws": np.zeros((R, M + 1), dtype=np.int64)}, "draws"),
        ("draws float", {"draws": np.zeros((R, M))}, "draws"),
        ("draws range", {"draws": np.full((R, M), K, dtype=np.int64)}, "draws"),
        ("draws negative", {"draws": np.full((R, M), -1, dtype=np.int64)}, "draws"),
    ]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("case", "bad", "match"), _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
def test_bad_update_inputs_raise(name, case, bad, match):
    pol = make(name)
    draws = pol.select()
    args: dict[str, object] = {"draws": draws, "reward": np.ones(R), "cost": np.zeros((R, 2))}
    args.update(bad)
    t = pol.t
    with pytest.raises(ValueError, match=match):
        pol.update(args["draws"], args["reward"], args["cost"])
    assert pol.t == t  # a refused update leaves the round counter alone


@pytest.mark.parametrize("name", NAMES)
def test_a_run_decides_the_same_alone_or_in_a_batch(name, skills):
    """Each run has its own stream (DESIGN.md): run 1 of a batch seeded [5, 6, ...] is the run
    seeded [6] alone, decision for decision, since its feedback is the same."""
    kwargs = {"n_contexts": 2} if name == "omd-contextual" else {}
    together = make_policy(
        name, PROBLEM, horizon=200, n_runs=R, seed=list(range(5, 5 + R)), **kwargs
    )
    alone = make_policy(name, PROBLEM, horizon=200, n_runs=1, seed=[6], **kwargs)
    ctx = np.arange(ROUNDS * R).reshape(ROUNDS, R) % 2
    for t in range(ROUNDS):
        context = ctx[t] if name == "omd-contextual" else None
        d_all = together.select(context)
        d_one = alone.select(None if context is None else context[1:2])
        np.testing.assert_array_equal(d_all[1:2], d_one)
        for pol, draws, v in ((together, d_all, skills[t]), (alone, d_one, skills[t][1:2])):
            mask = draws_to_mask(draws, pol.n_experts)
            pol.update(draws, batch_sum_max_reward(v, mask), pol.batch.realized_cost(mask))
