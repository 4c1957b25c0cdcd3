"""The router's state machine: ``apply(state, event)`` alone (no journal, no clock) makes the
decisions and the state of a live router, and refuses events that disagree with the state."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from msroute.policies.state_walk import state_dict
from msroute.router import Router, RouterConfig
from msroute.router.state import (
    AddExpert,
    Configure,
    Decide,
    EventMismatch,
    Expire,
    Feedback,
    RemoveExpert,
    RouterState,
    SetBounds,
    apply,
)

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 11,
    "contexts": ["math", "code"],
    "experts": {"big": [0.03], "mid": [0.01], "small": [0.002]},
    "constraints": {"upper": {"usd": 0.03}},
    "feedback_ttl_s": 1000.0,
}
SKILL = {"big": 0.9, "mid": 0.6, "small": 0.3, "new": 0.8}


def _script(router: Router) -> list[tuple[str, Any]]:
    """Drive a live router through every kind of event; return what happened, in order."""
    log: list[tuple[str, Any]] = []
    ids = []
    for i in range(30):
        d = router.route(context=("math", "code")[i % 2], decision_id=f"q{i}")
        ids.append(d)
        log.append(("decide", d))
        if i % 3 == 0:
            fed = ids.pop(0)
            reward = max(SKILL[e] for e in fed.team)
            log.append(
                ("feedback", (fed.decision_id, reward, router.feedback(fed.decision_id, reward)))
            )
        if i == 10:
            router.add_expert("new", [0.02])
            log.append(("add", ("new", [0.02])))
        if i == 15:
            router.set_bounds(upper={"usd": 0.025})
            log.append(("bounds", {"usd": 0.025}))
        if i == 20:
            router.reconfigure(
                RouterConfig.from_dict({**router.config.to_dict(), "on_missing": 0.0})
            )
            log.append(("configure", {"on_missing": 0.0}))
        if i == 25:
            gone = [d.decision_id for d in ids if "mid" in d.draws]
            router.remove_expert("mid")
            ids = [d for d in ids if d.decision_id not in gone]
            log.append(("remove", ("mid", gone)))
    return log


def test_apply_alone_makes_the_live_routers_decisions_and_state() -> None:
    router = Router(CONFIG)
    log = _script(router)
    state = RouterState.initial(RouterConfig.from_dict(CONFIG))
    for what, value in log:
        if what == "decide":
            decided = apply(
                state,
                Decide(
                    value.decision_id,
                    state.context_index("math" if int(value.decision_id[1:]) % 2 == 0 else "code"),
                    None,
                    0.0,
                    value.seq,
                    value.deadline,
                ),
            )
            assert decided is not None
            assert decided[0].draws == value.draws and decided[0].propensities == value.propensities
        elif what == "feedback":
            did, reward, status = value
            realized = state.pending[did].cost
            apply(state, Feedback(did, reward, None, realized, status))
        elif what == "add":
            apply(state, AddExpert(*value))
        elif what == "bounds":
            apply(state, SetBounds(value, {}))
        elif what == "configure":
            apply(state, Configure(value))
        else:
            apply(state, RemoveExpert(*value))
    live = router._state
    assert state.ids == live.ids and state.layouts == live.layouts
    assert state.retired == live.retired == {"mid"}
    assert (state.n, state.applied, state.expired, state.version) == (
        live.n,
        live.applied,
        live.expired,
        live.version,
    )
    assert sorted(state.pending) == sorted(live.pending)
    np.testing.assert_array_equal(state.cost_sum, live.cost_sum)
    assert state.config == live.config and state.config.on_missing == 0.0
    a, b = state_dict(state.policy), state_dict(live.policy)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


def test_events_that_disagree_with_the_state_are_refused_before_any_change() -> None:
    state = RouterState.initial(RouterConfig.from_dict(CONFIG))
    decided = apply(state, Decide("a", 0, None, 0.0, 1))
    assert decided is not None
    cost = state.pending["a"].cost
    with pytest.raises(EventMismatch, match="not pending"):
        apply(state, Expire("b", None))
    with pytest.raises(EventMismatch, match="disagrees"):
        apply(state, Feedback("a", 1.0, None, cost, "late"))
    with pytest.raises(EventMismatch, match="disagrees"):
        apply(state, Feedback("b", 1.0, None, cost, "applied"))
    assert list(state.pending) == ["a"] and (state.applied, state.late, state.version) == (0, 0, 0)
    apply(state, Feedback("a", 1.0, None, cost, "applied"))
    assert not state.pending and (state.applied, state.version) == (1, 1)


def test_expiry_learns_the_default_reward_or_drops_it() -> None:
    state = RouterState.initial(RouterConfig.from_dict(CONFIG))
    for did in ("a", "b"):
        apply(state, Decide(did, 1, None, 0.0, 1, deadline=5.0))
    assert state.due(4.9) == []
    assert state.due(5.0) == ["a", "b"]
    apply(state, Expire("a", None))
    apply(state, Expire("b", 0.0))
    assert state.expired == 2 and state.version == 1  # only the learned default moves the policy
    assert state.due(10.0) == []
