"""Feedback cannot poison a policy: rewards must be finite and in the policy's reward_range,
costs finite, >= 0 and at most cost_limit times their unit; a refused update changes no state;
valid feedback, even at the edges of the range, never leaves a non-finite or invalid state
(checked after every update in tests)."""

from __future__ import annotations

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.errors import InvalidStateError, InvalidValueError
from msroute.policies import available_policies, check_state, make_policy, set_debug_checks
from msroute.policies.state_walk import state_dict

PROBLEM = Problem(
    [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.9]], 2, Constraints(upper=[1.2, 1.5])
)
R = 2


def make(name: str):  # type: ignore[no-untyped-def]
    kwargs = {"n_contexts": 2} if name == "omd-contextual" else {}
    return make_policy(name, PROBLEM, horizon=50, n_runs=R, seed=3, **kwargs)


def _select(policy):  # type: ignore[no-untyped-def]
    ctx = np.zeros(R, dtype=np.int64) if policy.n_contexts > 1 else None
    return policy.select(context=ctx)


def _same(a: dict, b: dict) -> bool:  # type: ignore[type-arg]
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, np.ndarray):
            if not np.array_equal(v, w, equal_nan=True):
                return False
        elif v != w:
            return False
    return True


BAD_FEEDBACK = {
    "reward 1e308": ([1e308, 1.0], [[0.5, 0.5]] * R, "reward must be finite and in"),
    "reward -1e20": ([1.0, -1e20], [[0.5, 0.5]] * R, "reward must be finite and in"),
    "reward NaN": ([np.nan, 1.0], [[0.5, 0.5]] * R, "reward must be finite"),
    "reward inf": ([np.inf, 1.0], [[0.5, 0.5]] * R, "reward must be finite"),
    "negative cost": ([1.0, 1.0], [[0.5, -0.1], [0.5, 0.5]], "cost must be finite and >= 0"),
    "NaN cost": ([1.0, 1.0], [[0.5, 0.5], [np.nan, 0.5]], r"cost must be .* at run\(s\) \[1\]"),
    "inf cost": ([1.0, 1.0], [[np.inf, 0.5], [0.5, 0.5]], "cost must be finite and >= 0"),
    # The units of both columns are 1 (their largest table cost): the limit is 1e6.
    "cost above the limit": (
        [1.0, 1.0],
        [[0.5, 0.5], [0.5, 1.0000001e6]],
        r"cost 1e\+06 \(coordinate 1, run 1\) exceeds cost_limit",
    ),
}


@pytest.mark.parametrize("name", available_policies())
@pytest.mark.parametrize("case", list(BAD_FEEDBACK))
def test_bad_feedback_is_refused_and_changes_no_state(name: str, case: str) -> None:
    policy = make(name)
    for _ in range(3):  # some learning first
        d = _select(policy)
        policy.update(d, np.full(R, 1.5), np.full((R, 2), 0.5))
    d = _select(policy)
    before = state_dict(policy)
    reward, cost, match = BAD_FEEDBACK[case]
    for _ in range(2):  # twice: the first refusal must not have changed anything either
        with pytest.raises(InvalidValueError, match=match):
            policy.update(d, np.array(reward), np.array(cost))
    assert _same(before, state_dict(policy))
    policy.update(d, np.full(R, 1.0), np.full((R, 2), 0.5))  # still usable
    check_state(policy)


@pytest.mark.parametrize("name", available_policies())
def test_feedback_at_the_edges_of_the_range_keeps_the_state_valid(name: str) -> None:
    """Rewards alternating between 0 and the top of reward_range, costs at both ends of what a
    realized cost can be: the debug checks (on in the tests) verify the whole state after
    every update."""
    policy = make(name)
    low, high = policy.reward_range
    rng = np.random.default_rng(0)
    for t in range(60):
        d = _select(policy)
        reward = np.where(rng.random(R) < 0.5, low, high) if t % 3 else np.full(R, high)
        # A realized cost lies in [0, M cbar]: both ends.
        cost = np.where(rng.random((R, 2)) < 0.5, 0.0, PROBLEM.m_draws * PROBLEM.cbar)
        policy.update(d, reward, cost)
    check_state(policy)


@pytest.mark.parametrize(
    ("name", "extra"),
    [(n, {}) for n in available_policies()]
    + [(n, {"dual": "paper"}) for n in available_policies() if n.startswith("omd")],
)
def test_realized_costs_at_the_limit_never_crash_a_policy(name: str, extra: dict[str, str]) -> None:
    """Every round costs cost_limit units (far above every bound): valid, extreme feedback.
    The learned cost estimates then put the bounds out of reach (the estimated constraint set
    is empty); every policy keeps routing (the QP steps move each cut to what it can reach)
    with a finite, valid state, checked after every update."""
    kwargs = {"n_contexts": 2} if name == "omd-contextual" else {}
    policy = make_policy(name, PROBLEM, horizon=50, n_runs=R, seed=3, **kwargs, **extra)
    top = policy.cost_limit * 1.0  # both columns' unit is 1
    for t in range(40):
        d = _select(policy)
        policy.update(d, np.full(R, 1.0), np.full((R, 2), top if t % 4 else 0.0))
    check_state(policy)
    assert np.all(_select(policy).draws < PROBLEM.n_experts)


def test_debug_checks_catch_a_state_that_went_bad() -> None:
    policy = make("omd")
    d = _select(policy)
    policy._q[0, 0, 0] = np.nan  # as a bug in an update could
    with pytest.raises(InvalidStateError, match="'_q' has 1 NaN"):
        policy.update(d, np.full(R, 1.0), np.full((R, 2), 0.5))
    previous = set_debug_checks(False)
    try:
        policy.update(d, np.full(R, 1.0), np.full((R, 2), 0.5))  # unchecked: no error
    finally:
        set_debug_checks(previous)
