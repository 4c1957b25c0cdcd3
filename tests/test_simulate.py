"""The batched simulator: one round's bookkeeping, common random numbers, contexts."""

from __future__ import annotations

import numpy as np
import pytest

from msroute import (
    Constraints,
    InvalidTypeError,
    OMDApproachability,
    Problem,
    ProblemBatch,
    RandomPolicy,
    SequenceEnv,
    StochasticEnv,
    expected_reward,
    simulate,
)
from msroute.policies import set_debug_checks
from msroute.policies.base import BasePolicy, Decision
from msroute.simulate import simulate_summary

COSTS = np.array([[1.0, 0.0], [0.5, 1.0], [0.0, 1.0], [0.2, 0.0]])


def problem() -> Problem:
    return Problem(COSTS, 2, Constraints(upper=[1.5, None], lower=[None, 0.1]))


def test_rewards_and_costs_follow_the_round_definition() -> None:
    """Replaying the recorded draws by hand gives the recorded reward and distinct-expert cost."""
    rng = np.random.default_rng(0)
    skills = rng.random((30, 3, 4))
    env = SequenceEnv(skills, n_runs=2)
    batch = ProblemBatch(problem(), 2)
    policy = RandomPolicy(batch, horizon=30, seed=1)
    seen = _spying(policy)
    traj = simulate({"random": policy}, env, batch, 30)["random"]
    for t, draws in enumerate(d.draws for d in seen):
        for r in range(2):
            subset = sorted(set(draws[r].tolist()))
            assert traj.rewards[t, r] == pytest.approx(skills[t][:, subset].max(axis=1).sum())
            np.testing.assert_allclose(traj.costs[t, r], COSTS[subset].sum(axis=0))


def test_every_policy_faces_the_same_skills() -> None:
    """Two copies of the same policy with the same seed on one stream give identical runs."""
    env = StochasticEnv(np.full((3, 4), 0.6), seed=[5, 6])
    batch = ProblemBatch(problem(), 2)
    pols = {
        "a": OMDApproachability(batch, horizon=200, seed=3),
        "b": OMDApproachability(batch, horizon=200, seed=3),
    }
    out = simulate(pols, env, batch, 200, chunk=64)
    np.testing.assert_array_equal(out["a"].rewards, out["b"].rewards)
    np.testing.assert_array_equal(out["a"].costs, out["b"].costs)


def test_expected_reward_tracking_matches_expected_reward() -> None:
    skills = np.random.default_rng(2).random((40, 3, 4))
    env = SequenceEnv(skills, n_runs=1)
    batch = ProblemBatch(problem(), 1)
    pol = OMDApproachability(batch, horizon=40, seed=0, batch=1, eta_mult=0.01)
    seen = _spying(pol)
    traj = simulate({"omd": pol}, env, batch, 40, chunk=7, track_expected=True)["omd"]
    assert traj.expected_rewards is not None
    qs = [d.probs[0] for d in seen if d.probs is not None]  # the q these draws came from
    assert len(qs) == 40
    want = [float(expected_reward(q, skills[t], 2)) for t, q in enumerate(qs)]
    np.testing.assert_allclose(traj.expected_rewards[:, 0], want, rtol=1e-12)
    assert not np.allclose(qs[0], qs[-1])  # the policy moved, so the check is not trivial


def test_context_weights_scale_the_reward_dimensions() -> None:
    skills = np.ones((10, 3, 4))
    env = SequenceEnv(skills, n_runs=1)
    batch = ProblemBatch(problem(), 1)
    contexts = np.array([0, 1] * 5)
    weights = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    traj = simulate(
        {"r": RandomPolicy(batch, horizon=10, seed=0)},
        env,
        batch,
        10,
        contexts=contexts,
        context_weights=weights,
    )["r"]
    np.testing.assert_allclose(traj.rewards[:, 0], np.where(contexts == 0, 1.0, 2.0))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"contexts": np.zeros(10, dtype=int)}, "go together"),
        ({"contexts": np.zeros(9, dtype=int), "context_weights": np.ones((1, 3))}, "shape"),
        ({"contexts": np.full(10, 2), "context_weights": np.ones((2, 3))}, r"\[0, 1\]"),
        ({"contexts": np.zeros(10, dtype=int), "context_weights": -np.ones((1, 3))}, ">= 0"),
    ],
)
def test_bad_contexts_are_named(kwargs: dict[str, object], match: str) -> None:
    env = SequenceEnv(np.ones((10, 3, 4)), n_runs=1)
    batch = ProblemBatch(problem(), 1)
    with pytest.raises(ValueError, match=match):
        simulate({"r": RandomPolicy(batch, horizon=10)}, env, batch, 10, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", [simulate, simulate_summary])
@pytest.mark.parametrize("which", ["env", "batch"])
def test_an_env_or_batch_of_the_wrong_type_is_named(entry: object, which: str) -> None:
    # An AttributeError ('NoneType' object has no attribute 'n_runs') before.
    env = SequenceEnv(np.ones((10, 3, 4)), n_runs=1)
    batch = ProblemBatch(problem(), 1)
    args = {"env": env, "batch": batch, which: None}
    with pytest.raises(InvalidTypeError, match=f"{which} must be a"):
        entry({"r": RandomPolicy(batch, horizon=10)}, args["env"], args["batch"], 10)  # type: ignore[operator]


def test_contexts_skip_the_per_round_checks_with_the_same_decisions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With contexts, a package policy decides through ``select_trusted`` (its contexts
    validated once), never through ``select``; a spied ``select`` (a policy with a ``select``
    of its own) takes the checked path: the same runs."""
    env = StochasticEnv(np.full((3, 4), 0.6), seed=[5])
    batch = ProblemBatch(problem(), 1)
    contexts = np.random.default_rng(4).integers(0, 3, 300)
    weights = np.ones((3, 3))

    def run(pol: OMDApproachability) -> tuple[np.ndarray, np.ndarray]:
        traj = simulate({"omd": pol}, env, batch, 300, contexts=contexts, context_weights=weights)
        return traj["omd"].rewards, traj["omd"].costs

    checked_pol = OMDApproachability(batch, horizon=300, seed=3, n_contexts=3)
    seen = _spying(checked_pol)
    checked = run(checked_pol)
    assert len(seen) == 300

    def refuse(*_: object) -> Decision:
        raise AssertionError("select() called: the checks ran every round")

    with monkeypatch.context() as mp:
        mp.setattr(BasePolicy, "select", refuse)
        trusted = run(OMDApproachability(batch, horizon=300, seed=3, n_contexts=3))
    np.testing.assert_array_equal(trusted[0], checked[0])
    np.testing.assert_array_equal(trusted[1], checked[1])


def test_the_simulators_feedback_skips_the_per_round_checks_of_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A package policy learns the simulator's rounds through ``update_built`` (the range
    checks only), never through ``update``; a policy with an ``update`` of its own keeps it:
    the same runs. Feedback out of the policy's range is still named."""
    env = StochasticEnv(np.full((3, 4), 0.6), seed=[5, 6])
    batch = ProblemBatch(problem(), 2)

    def run(pol: OMDApproachability) -> tuple[np.ndarray, np.ndarray]:
        traj = simulate({"omd": pol}, env, batch, 300)
        return traj["omd"].rewards, traj["omd"].costs

    checked_pol = OMDApproachability(batch, horizon=300, seed=3)
    calls: list[int] = []
    own = checked_pol.update

    def update(decision: Decision, reward: object, cost: object) -> None:
        calls.append(decision.round)
        own(decision, reward, cost)  # type: ignore[arg-type]

    checked_pol.update = update  # type: ignore[method-assign]
    checked = run(checked_pol)
    assert len(calls) == 300

    def refuse(*_: object) -> None:
        raise AssertionError("update() called: its checks ran every round")

    debug = set_debug_checks(False)  # the suite checks every state through update
    try:
        with monkeypatch.context() as mp:
            mp.setattr(BasePolicy, "update", refuse)
            built = run(OMDApproachability(batch, horizon=300, seed=3))
    finally:
        set_debug_checks(debug)
    np.testing.assert_array_equal(built[0], checked[0])
    np.testing.assert_array_equal(built[1], checked[1])

    class Narrow(RandomPolicy):
        reward_range = (0.0, 0.5)

    with pytest.raises(ValueError, match=r"reward must be finite and in \[0, 0.5\]"):
        simulate({"n": Narrow(batch, horizon=10, seed=0)}, env, batch, 10)


def test_a_policy_with_a_select_of_its_own_is_asked_through_it() -> None:
    """A subclass that overrides ``select`` (a user's policy) keeps being called through it."""
    calls = []

    class Counting(OMDApproachability):
        def select(self, context: object = None, eligible: object = None) -> Decision:
            calls.append(context)
            return super().select(context, eligible)  # type: ignore[arg-type]

    env = StochasticEnv(np.full((3, 4), 0.6), seed=[5])
    batch = ProblemBatch(problem(), 1)
    pol = Counting(batch, horizon=50, seed=3, n_contexts=2)
    contexts = np.arange(50) % 2
    simulate({"c": pol}, env, batch, 50, contexts=contexts, context_weights=np.ones((2, 3)))
    assert len(calls) == 50


def test_a_context_beyond_the_policys_range_is_named() -> None:
    env = SequenceEnv(np.ones((10, 3, 4)), n_runs=1)
    batch = ProblemBatch(problem(), 1)
    pol = OMDApproachability(batch, horizon=10, seed=0, n_contexts=2)
    contexts = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    with pytest.raises(ValueError, match=r"context values must be in \[0, 1\]"):
        simulate({"omd": pol}, env, batch, 10, contexts=contexts, context_weights=np.ones((3, 3)))


def test_mismatched_runs_are_refused() -> None:
    env = SequenceEnv(np.ones((10, 3, 4)), n_runs=3)
    batch = ProblemBatch(problem(), 2)
    with pytest.raises(ValueError, match="environment"):
        simulate({"r": RandomPolicy(batch, horizon=10)}, env, batch, 10)


def test_policies_that_cannot_run_on_the_batch_are_refused() -> None:
    env = SequenceEnv(np.ones((10, 3, 4)), n_runs=1)
    batch = ProblemBatch(problem(), 1)
    pol = RandomPolicy(batch, horizon=10)
    with pytest.raises(ValueError, match="'a' and 'b' are the same object"):
        simulate({"a": pol, "b": pol}, env, batch, 10)  # it would step twice a round
    other = ProblemBatch(Problem(COSTS * 2.0, 2, Constraints(upper=[1.0, None])), 1)
    with pytest.raises(ValueError, match="built for other costs or bounds"):
        simulate({"r": RandomPolicy(other, horizon=10)}, env, batch, 10)
    looser = ProblemBatch(Problem(COSTS, 2, Constraints(upper=[5.0, None])), 1)
    with pytest.raises(ValueError, match="built for other costs or bounds"):
        simulate({"r": RandomPolicy(looser, horizon=10)}, env, batch, 10)
    with pytest.raises(TypeError, match="policies must be a mapping"):
        simulate([pol], env, batch, 10)  # type: ignore[arg-type]


def _spying(pol: BasePolicy) -> list[Decision]:
    """Record every decision the policy makes (wraps its select)."""
    seen: list[Decision] = []
    original = pol.select

    def spy(context: object = None, eligible: object = None) -> Decision:
        decision = original(context, eligible)  # type: ignore[arg-type]
        seen.append(decision)
        return decision

    pol.select = spy  # type: ignore[method-assign]
    return seen


def test_cost_count_draws_counts_repeated_draws() -> None:
    """With cost_count="draws" an expert drawn twice costs twice; "distinct" counts it once."""
    skills = np.random.default_rng(3).random((200, 3, 4))
    batch = ProblemBatch(problem(), 1)
    out = {}
    for mode in ("distinct", "draws"):
        pol = OMDApproachability(batch, horizon=200, seed=4, batch=1)
        seen = _spying(pol)
        traj = simulate({"omd": pol}, SequenceEnv(skills, n_runs=1), batch, 200, cost_count=mode)[
            "omd"
        ]
        out[mode] = (traj.costs[:, 0], [d.draws for d in seen])
    costs, draws = out["draws"]
    np.testing.assert_allclose(costs, [COSTS[d[0]].sum(axis=0) for d in draws])
    costs_d, draws_d = out["distinct"]
    np.testing.assert_allclose(costs_d, [COSTS[sorted(set(d[0]))].sum(axis=0) for d in draws_d])
    assert any(len(set(d[0])) < 2 for d in draws)  # some round drew an expert twice
    with pytest.raises(ValueError, match="cost_count"):
        simulate({"omd": pol}, SequenceEnv(skills, n_runs=1), batch, 10, cost_count="all")
