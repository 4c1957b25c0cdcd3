"""Configuration is versioned: runtime bound changes and a changed config on restart are
journaled events, replayed like every other; what a running router cannot take is refused."""

from __future__ import annotations

import contextlib
import copy
import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msroute.errors import InfeasibleConstraintsError, InvalidFeedbackError, RouterConfigError
from msroute.policies.state_walk import state_dict
from msroute.router import Router

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd", "gpu"],
    "seed": 3,
    "experts": {
        "big": [0.030, 1.0],
        "small": [0.002, 0.0],
        "mid": [0.010, 0.5],
        "tiny": [0.001, 0.0],
    },
    "constraints": {"upper": {"usd": 0.04}, "lower": {"gpu": 0.1}},
    "snapshot_every": 15,
}


def cfg(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(CONFIG)
    out.update(changes)
    return out


def traffic(router: Router, rounds: int, start: int = 0) -> None:
    """Route; feed back two of every three decisions at once (reward from the id)."""
    for i in range(start, start + rounds):
        d = router.route(decision_id=f"q{i}")
        if i % 3:
            router.feedback(d.decision_id, (i % 7) / 6)


def kinds(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [k for (k,) in db.execute("SELECT kind FROM events ORDER BY seq")]


def same_policy(a: Router, b: Router) -> None:
    sa, sb = state_dict(a.policy), state_dict(b.policy)
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, sb[key], err_msg=key)
        else:
            assert value == sb[key], key


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "seq"}


# ---------------------------------------------------------------------- set_bounds
def test_set_bounds_is_journaled_and_replayed_bit_for_bit(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    live = Router(CONFIG, journal=path)
    traffic(live, 20)
    live.set_bounds(upper={"usd": 0.02})
    traffic(live, 20, start=20)
    live.set_bounds(lower={"gpu": None}, upper={"gpu": 0.8})  # one removed, one added
    traffic(live, 10, start=40)
    state = live.state()
    assert state["bounds"] == {"upper": {"usd": 0.02, "gpu": 0.8}, "lower": {}}
    backup = tmp_path / "copy.db"  # a live journal is read through its router's connection
    with contextlib.closing(sqlite3.connect(backup)) as b:
        live._journal._db.backup(b)  # type: ignore[union-attr]
    assert kinds(backup).count("set_bounds") == 2
    from_snapshot = Router.open(backup)
    assert from_snapshot._snap_seq > 0
    assert comparable(from_snapshot.state()) == comparable(state)
    same_policy(from_snapshot, live)
    from_snapshot.close()
    from_start = Router.open(backup, use_snapshot=False)
    assert comparable(from_start.state()) == comparable(state)
    same_policy(from_start, live)
    for i in range(50, 60):  # and the next decisions are the same
        a, b = live.route(decision_id=f"q{i}"), from_start.route(decision_id=f"q{i}")
        assert (a.draws, a.propensities) == (b.draws, b.propensities)
    live.close()
    from_start.close()


def test_set_bounds_moves_the_spend(tmp_path: Path) -> None:
    """A tighter budget set at runtime is what the policy then routes to."""
    # Algorithm 1's exploring step, so that 600 rounds are enough to reach either budget.
    loose = cfg(
        constraints={"upper": {"usd": 0.05}},
        snapshot_every=1000,
        params={"variant": "paper", "eta_mult": 0.1, "budget_margin": 0.0},
    )
    tight, same = Router(loose), Router(loose)
    traffic(tight, 30)
    traffic(same, 30)
    tight.set_bounds(upper={"usd": 0.006})
    for r in (tight, same):
        traffic(r, 600, start=30)
    spend = {
        name: sum(r.route(decision_id=f"x{i}").cost["usd"] for i in range(200)) / 200
        for name, r in (("tight", tight), ("same", same))
    }
    assert spend["tight"] < 0.006 * 1.5 < spend["same"]


@pytest.mark.parametrize(
    ("upper", "lower", "error", "match"),
    [
        ({"usd": 0.0001}, None, InfeasibleConstraintsError, "usd"),
        ({"cpu": 0.1}, None, InvalidFeedbackError, r"upper\.cpu: unknown cost name"),
        (None, {"cpu": None}, InvalidFeedbackError, r"lower\.cpu: unknown cost name"),
        ({"usd": math.nan}, None, InvalidFeedbackError, r"upper\.usd: must be finite"),
        ({"usd": "0.1"}, None, InvalidFeedbackError, r"upper\.usd: must be a number"),
        ({"gpu": 0.05}, None, InvalidFeedbackError, r"lower\.gpu: 0\.1 is above upper\.gpu"),
        ([0.1], None, InvalidFeedbackError, "upper: must be a mapping"),
    ],
)
def test_a_refused_bound_changes_nothing(
    tmp_path: Path, upper: Any, lower: Any, error: type[Exception], match: str
) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 10)
    before, policy = router.state(), state_dict(router.policy)
    with pytest.raises(error, match=match):
        router.set_bounds(upper=upper, lower=lower)
    assert router.state() == before
    assert state_dict(router.policy).keys() == policy.keys()
    router.set_bounds()  # no change: no event
    router.close()
    assert "set_bounds" not in kinds(path)


# ---------------------------------------------------------------------- config on restart
def test_a_changed_config_is_applied_as_events_on_restart(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 20)
    held = router.route(eligible=["mid"])  # pending, routed to an expert the new config drops
    router.close()
    experts = {k: v for k, v in CONFIG["experts"].items() if k != "mid"} | {"new": [0.004, 0.2]}
    new = cfg(
        experts=experts,
        constraints={"upper": {"usd": 0.05}, "lower": {"gpu": 0.05}},
        feedback_ttl_s=1200.0,
        name="support",
    )
    reopened = Router.open(path, config=new)
    state = reopened.state()
    assert state["experts"] == ["big", "small", "tiny", "new"]
    assert state["bounds"] == {"upper": {"usd": 0.05}, "lower": {"gpu": 0.05}}
    assert reopened.config.feedback_ttl_s == 1200.0 and reopened.name == "support"
    assert reopened.feedback(held.decision_id, 0.5) == "expert_removed"
    reopened.close()
    assert kinds(path)[-5:] == [
        "add_expert",
        "set_bounds",
        "remove_expert",
        "configure",
        "feedback",
    ]
    again = Router.open(path, config=new)  # the same config again: nothing to apply
    logged = {"feedback_late": state["feedback_late"] + 1}  # the feedback: logged, not learned
    assert comparable(again.state()) == comparable(state) | logged
    again.close()
    assert kinds(path)[-1] == "feedback"
    plain = Router.open(path, use_snapshot=False)  # replayed from the start
    assert plain.config.feedback_ttl_s == 1200.0
    assert plain.state()["bounds"] == state["bounds"]
    plain.close()


def test_a_config_a_running_router_cannot_take_is_refused_naming_each_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    Router(CONFIG, journal=path).close()
    before = kinds(path)
    bad = cfg(seed=4, m_draws=3)
    bad["experts"] = {**CONFIG["experts"], "big": [0.05, 1.0]}
    with pytest.raises(RouterConfigError) as info:
        Router.open(path, config=bad)
    message = str(info.value)
    assert "\n" not in message
    for key in ("seed (3 -> 4)", "m_draws (2 -> 3)", "experts.big (cost"):
        assert key in message
    assert kinds(path) == before
    Router.open(path).close()  # and the journal was closed again


def test_an_expert_removed_at_runtime_but_still_configured_is_refused_by_name(
    tmp_path: Path,
) -> None:
    """A restart with a configuration that still lists an expert removed at runtime (ids are
    never reused) is refused, naming it and what to do; without it the journal opens."""
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    gone = next(iter(CONFIG["experts"]))
    router.remove_expert(gone)
    router.close()
    before = kinds(path)
    with pytest.raises(RouterConfigError, match=f"experts.{gone} .*drop it from the config"):
        Router.open(path, config=CONFIG)
    assert kinds(path) == before
    kept = cfg()
    del kept["experts"][gone]
    Router.open(path, config=kept).close()
    assert kinds(path) == before  # nothing to change


def test_an_infeasible_config_change_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 10)
    state = router.state()
    router.close()
    before = kinds(path)
    # The expert is added (feasible) before the bound fails: both are undone.
    new = cfg(
        experts={**CONFIG["experts"], "new": [0.004, 0.2]},
        constraints={"upper": {"usd": 0.0001}},
    )
    with pytest.raises(InfeasibleConstraintsError, match="usd"):
        Router.open(path, config=new)
    assert kinds(path) == before
    reopened = Router.open(path)
    assert comparable(reopened.state()) == comparable(state)
    reopened.close()
