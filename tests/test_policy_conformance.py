"""Conformance of every registered policy to the batched ``Policy`` contract."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from _policy_sim import beta_skills, run
from msroute import Constraints, Problem, batch_sum_max_reward
from msroute.policies.base import BasePolicy, Decision, Policy, draws_to_mask
from msroute.policies.registry import POLICIES, available_policies, get_policy_class, make_policy
from msroute.policies.state_walk import state_dict

NAMES = available_policies()
#: The multinomial (MSR) policies draw M times with replacement from a distribution they
#: report (the has_propensity trait): their subset is the distinct draws. Every other policy
#: routes M distinct experts.
MULTINOMIAL = {n for n in available_policies() if get_policy_class(n).has_propensity}
#: Index policies with deterministic tie-breaking: they draw nothing from their random stream,
#: so their decisions depend on the feedback only, never on the seed.
SEED_FREE = {"greedy", "cucb", "cbwk"}
# Fixed routing distributions: nothing to learn from feedback.
NON_LEARNING = {"uniform", "fixed"}

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
        "uniform",
        "fixed",
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
    decision = pol.select()
    assert decision.draws.shape == (1, M)
    pol.update(decision, np.array([1.0]), np.zeros((1, 2)))
    assert pol.select().draws.shape == (1, M)


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
    decision = pol.select()
    reward = np.linspace(0.5, 1.5, R)
    cost = np.tile([0.7, 0.3], (R, 1))
    copies = decision.draws.copy(), reward.copy(), cost.copy()
    pol.update(decision, reward, cost)
    for before, after in zip(copies, (decision.draws, reward, cost), strict=True):
        np.testing.assert_array_equal(before, after)
    # A decision is a value: its arrays are read-only, so nobody changes a pending decision.
    nxt = pol.select()
    for arr in (nxt.draws, nxt.probs):
        if arr is not None:
            with pytest.raises(ValueError, match="read-only"):
                arr[...] = 0


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
        ("draws one negative", {"draws": np.eye(R, M, dtype=np.int64) * -(2**62)}, "draws"),
        ("draws negative int32", {"draws": np.full((R, M), -1, dtype=np.int32)}, "draws"),
        ("draws range uint8", {"draws": np.full((R, M), K, dtype=np.uint8)}, "draws"),
        ("future round", {"round": 1}, "not a decision of this policy"),
        ("negative round", {"round": -1}, "not a decision of this policy"),
    ]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("case", "bad", "match"), _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
def test_bad_update_inputs_raise(name, case, bad, match):
    pol = make(name)
    decision = pol.select()
    fields = {k: v for k, v in bad.items() if k in ("draws", "round")}
    args = {"reward": np.ones(R), "cost": np.zeros((R, 2)), **bad}
    before = state_dict(pol)
    with pytest.raises(ValueError, match=match):
        pol.update(dataclasses.replace(decision, **fields), args["reward"], args["cost"])
    assert_same_state(state_dict(pol), before)  # a refused update changes nothing


@pytest.mark.parametrize("name", NAMES)
def test_a_run_decides_the_same_alone_or_in_a_batch(name, skills):
    """Each run has its own stream (docs/architecture.md): run 1 of a batch seeded [5, 6, ...] is
    the run seeded [6] alone, decision for decision, since its feedback is the same."""
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
        np.testing.assert_array_equal(d_all.draws[1:2], d_one.draws)
        for pol, dec, v in ((together, d_all, skills[t]), (alone, d_one, skills[t][1:2])):
            mask = draws_to_mask(dec.draws, pol.n_experts)
            pol.update(dec, batch_sum_max_reward(v, mask), pol.problem_batch.realized_cost(mask))


def assert_same_state(a: dict[str, object], b: dict[str, object]) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(b[key], value, err_msg=key)
        else:
            assert b[key] == value, key


def play_one(pol: BasePolicy, decision: Decision, skills_t: np.ndarray) -> None:
    mask = draws_to_mask(decision.draws, pol.n_experts)
    pol.update(
        decision, batch_sum_max_reward(skills_t, mask), pol.problem_batch.realized_cost(mask)
    )


def context_of(name: str, t: int) -> np.ndarray | None:
    return (np.arange(R) + t) % 2 if name == "omd-contextual" else None


def make_ctx(name: str, seed: int = 0) -> BasePolicy:
    kwargs = {"n_contexts": 2} if name == "omd-contextual" else {}
    return make_policy(name, PROBLEM, horizon=1000, n_runs=R, seed=seed, **kwargs)


# ---------------------------------------------------------------------- the decision is a value
@pytest.mark.parametrize("name", NAMES)
def test_decision_fields(name):
    pol = make_ctx(name)
    for t in range(3):
        ctx = context_of(name, t)
        dec = pol.select(ctx)
        assert isinstance(dec, Decision)
        assert dec.round == t and pol.t == t + 1
        assert dec.draws.shape == (R, M) and dec.draws.dtype == np.int64
        if ctx is None:
            assert dec.context is None
        else:
            np.testing.assert_array_equal(dec.context, ctx)
        if name in MULTINOMIAL:  # closed form: the distribution sampled from
            assert dec.probs is not None and dec.probs.shape == (R, K)
            np.testing.assert_allclose(dec.probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        else:
            assert dec.probs is None


@pytest.mark.parametrize("name", NAMES)
def test_warmup_advances_on_select(name):
    """Two selects in a row are two rounds: a warm-up team is never handed out twice."""
    pol = make(name, n_runs=1)
    first, second = pol.select(), pol.select()
    assert (first.round, second.round) == (0, 1)
    if getattr(pol, "warmup", 0) > 0:
        assert set(first.draws[0].tolist()).isdisjoint(second.draws[0].tolist())


@pytest.mark.parametrize("name", NAMES)
def test_many_pending_decisions_fed_back_in_any_order(name, skills):
    """Select 8 rounds ahead, then feed 7 of them back in a shuffled order (one never): each
    is accepted, the counter counts decisions, and the learned state moves."""
    pol = make_ctx(name)
    before = state_dict(pol)
    pending = [pol.select(context_of(name, t)) for t in range(8)]
    order = np.random.default_rng(3).permutation(8)[:7]
    for i in order:
        play_one(pol, pending[i], skills[i])
    assert pol.t == 8
    if name in NON_LEARNING:
        return
    after = state_dict(pol)
    moved = [k for k, v in before.items() if isinstance(v, np.ndarray) and k != "streams._buffer"]
    assert any(not np.array_equal(before[k], after[k]) for k in moved)


def random_masks(rounds: int, seed: int, k_min: int = 1) -> np.ndarray:
    """Eligibility masks (T, R, K) with between k_min and K eligible experts per row."""
    rng = np.random.default_rng(seed)
    masks = rng.random((rounds, R, K)) < 0.5
    for t, r in zip(*np.nonzero(masks.sum(axis=2) < k_min), strict=True):
        masks[t, r, rng.permutation(K)[:k_min]] = True
    return masks


@pytest.mark.parametrize("name", NAMES)
def test_only_eligible_experts_are_drawn(name, skills):
    pol = make_ctx(name)
    masks = random_masks(ROUNDS, seed=4)
    for t in range(ROUNDS):
        dec = pol.select(context_of(name, t), eligible=masks[t])
        drawn = draws_to_mask(dec.draws, K)
        assert not (drawn & ~masks[t]).any(), f"round {t}: an ineligible expert was drawn"
        if name not in MULTINOMIAL:  # a team routes min(M, eligible) distinct experts
            np.testing.assert_array_equal(drawn.sum(axis=1), np.minimum(M, masks[t].sum(axis=1)))
        if dec.probs is not None:  # the logged propensity is the masked, renormalized q
            assert (dec.probs[~masks[t]] == 0.0).all()
            np.testing.assert_allclose(dec.probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        play_one(pol, dec, skills[t])


@pytest.mark.parametrize("name", NAMES)
def test_all_eligible_mask_decides_like_no_mask(name, skills):
    a, b = make_ctx(name, seed=8), make_ctx(name, seed=8)
    full = np.ones((R, K), dtype=bool)
    for t in range(20):
        da, db = a.select(context_of(name, t)), b.select(context_of(name, t), eligible=full)
        np.testing.assert_array_equal(da.draws, db.draws)
        play_one(a, da, skills[t])
        play_one(b, db, skills[t])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("eligible", "match"),
    [
        (np.zeros((R, K), dtype=bool), r"no eligible expert in run\(s\) \[0, 1, 2, 3\]"),
        (np.ones((R, K + 1), dtype=bool), "eligible must be booleans of shape"),
        (np.ones((R, K)), "eligible must be booleans"),
    ],
    ids=["empty", "shape", "dtype"],
)
def test_bad_eligibility_is_refused_and_changes_nothing(name, eligible, match):
    pol = make_ctx(name)
    before = state_dict(pol)
    with pytest.raises(ValueError, match=match):
        pol.select(context_of(name, 0), eligible=eligible)
    assert pol.t == 0
    assert_same_state(state_dict(pol), before)
