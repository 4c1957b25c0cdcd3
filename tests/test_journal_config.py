"""Configuration is versioned: runtime changes (bounds, experts added, removed or repriced) and
a changed config on restart are journaled events, replayed like every other. A restart merges
three ways: what the config file changed since the one applied last wins, the rest of the
router's state (runtime changes included) stays; what a running router cannot take is
refused."""

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
    bad["experts"] = {**CONFIG["experts"], "big": [0.05, 1.0]}  # a price: that one it takes
    with pytest.raises(RouterConfigError) as info:
        Router.open(path, config=bad)
    message = str(info.value)
    assert "\n" not in message
    for key in ("seed (3 -> 4)", "m_draws (2 -> 3)"):
        assert key in message
    assert "experts.big" not in message
    assert kinds(path) == before
    Router.open(path).close()  # and the journal was closed again


def test_an_expert_removed_at_runtime_stays_removed_unless_the_file_changes_it(
    tmp_path: Path,
) -> None:
    """An expert removed at runtime and left in the file as it was stays removed at a restart
    (nothing journaled). A file that changes its price, or drops it and lists it again later,
    asks for an id that is never reused: refused, naming it and what to do."""
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    gone = next(iter(CONFIG["experts"]))
    router.remove_expert(gone)
    router.close()
    before = kinds(path)
    with Router.open(path, config=CONFIG) as reopened:
        assert gone not in reopened.expert_ids
    assert kinds(path) == before
    repriced = cfg(experts={**CONFIG["experts"], gone: [0.5, 1.0]})
    with pytest.raises(RouterConfigError, match=f"experts.{gone} .*drop it from the config"):
        Router.open(path, config=repriced)
    assert kinds(path) == before
    dropped = cfg()
    del dropped["experts"][gone]
    Router.open(path, config=dropped).close()  # recorded as the configuration applied last
    with pytest.raises(RouterConfigError, match=f"experts.{gone} .*never reused"):
        Router.open(path, config=CONFIG)
    assert kinds(path) == before  # no event: only the applied configuration was recorded


# ---------------------------------------------------------------------- runtime changes last
def test_runtime_changes_last_over_a_restart_with_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 10)
    router.set_bounds(upper={"usd": 0.03})
    router.add_expert("new", [0.004, 0.2])
    router.set_expert_cost("mid", {"usd": 0.008})
    router.remove_expert("tiny")
    traffic(router, 10, start=10)
    state = router.state()
    router.close()
    before = kinds(path)
    for _ in range(2):
        with Router.open(path, config=CONFIG) as reopened:
            assert comparable(reopened.state()) == comparable(state)
            assert reopened.config.experts["mid"] == (0.008, 0.5)
            assert "new" in reopened.expert_ids and "tiny" not in reopened.expert_ids
    assert kinds(path) == before  # nothing to apply, nothing journaled


def test_the_files_later_edits_win_and_what_it_left_keeps_the_state(tmp_path: Path) -> None:
    """Three-way: the file applied last, the journal's state, the new file. Each value the new
    file changed is applied (a bound, a price, an expert dropped, a setting, the price of an
    expert added at runtime); each it left keeps the runtime value. The next restart with that
    file applies nothing, and a runtime change made after it lasts again."""
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 10)
    router.set_bounds(upper={"usd": 0.03}, lower={"gpu": 0.2})
    router.add_expert("new", [0.004, 0.2])
    router.set_expert_cost("mid", [0.008, 0.5])
    router.close()
    edited = cfg(
        experts={
            "big": [0.03, 1.0],
            "small": [0.003, 0.0],  # repriced by the file
            "mid": [0.010, 0.5],  # as before in the file: the runtime price stays
            "new": [0.005, 0.2],  # the expert added at runtime, priced by the file
        },  # "tiny" dropped by the file
        constraints={"upper": {"usd": 0.04}, "lower": {"gpu": 0.15}},  # lower edited
        feedback_ttl_s=900.0,
    )
    with Router.open(path, config=edited) as reopened:
        assert reopened.config.experts == {
            "big": (0.03, 1.0),
            "small": (0.003, 0.0),
            "mid": (0.008, 0.5),
            "new": (0.005, 0.2),
        }
        # upper: the file left it at 0.04, the runtime 0.03 stays; lower: the file's edit.
        assert reopened.state()["bounds"] == {"upper": {"usd": 0.03}, "lower": {"gpu": 0.15}}
        assert reopened.config.feedback_ttl_s == 900.0
        state = reopened.state()
        reopened.set_bounds(upper={"usd": 0.035})  # after the restart, at runtime again
    assert kinds(path)[-6:] == [
        "set_cost",
        "set_cost",
        "set_bounds",
        "remove_expert",
        "configure",
        "set_bounds",
    ]
    before = kinds(path)
    with Router.open(path, config=edited) as again:
        assert comparable(again.state()) == comparable(state) | {
            "bounds": {"upper": {"usd": 0.035}, "lower": {"gpu": 0.15}},
            "policy_version": state["policy_version"] + 1,  # the runtime change
        }
    assert kinds(path) == before
    with Router.open(path, use_snapshot=False) as replayed:  # every change replays
        assert replayed.config.experts["small"] == (0.003, 0.0)
        assert replayed.state()["bounds"]["upper"] == {"usd": 0.035}


def test_a_price_change_is_journaled_and_replayed_exactly_and_keeps_what_was_learned(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    live = Router(CONFIG, journal=path)
    traffic(live, 30)
    held = live.route(decision_id="held")  # routed at the old price
    learned = state_dict(live.policy)
    assert live.set_expert_cost("mid", {"usd": 0.02}) == {"usd": 0.02, "gpu": 0.5}
    after = state_dict(live.policy)
    # What OMD learned of the experts' rewards and realized costs is carried over; the new
    # price is news about what a call to "mid" costs: its estimates start from it.
    kept = [
        k
        for k in learned
        if k.startswith(("_visits", "_steps", "_reward_sum", "estimator.", "cost_est."))
    ]
    assert len(kept) == 8
    mid = list(CONFIG["experts"]).index("mid")
    for k in kept:
        if k.startswith("cost_est."):
            others = [i for i in range(learned[k].shape[1]) if i != mid]
            assert np.array_equal(learned[k][:, others], after[k][:, others])
        else:
            assert np.array_equal(learned[k], after[k])
    assert after["cost_est.costs"][0, mid].tolist() == [0.02, 0.5]
    assert after["pacer.est.costs"][0, mid].tolist() == [0.02, 0.5]
    assert live.state()["experts"] == list(CONFIG["experts"])
    assert live.config.experts["mid"] == (0.02, 0.5)
    assert live.route(decision_id="x", eligible=["mid"]).cost == {"usd": 0.02, "gpu": 0.5}
    live.feedback("held", 0.5)  # learned at the cost it was routed at
    traffic(live, 30, start=30)
    state = live.state()
    backup = tmp_path / "copy.db"  # a live journal is read through its router's connection
    with contextlib.closing(sqlite3.connect(backup)) as b:
        live._journal._db.backup(b)  # type: ignore[union-attr]
    assert kinds(backup).count("set_cost") == 1
    for use_snapshot in (True, False):
        reopened = Router.open(backup, use_snapshot=use_snapshot)
        assert comparable(reopened.state()) == comparable(state)
        assert reopened.config.experts["mid"] == (0.02, 0.5)
        same_policy(reopened, live)
        reopened.close()
    replayed = Router.open(backup, use_snapshot=False)
    for i in range(60, 70):  # and the next decisions are the same
        a, b = live.route(decision_id=f"q{i}"), replayed.route(decision_id=f"q{i}")
        assert (a.draws, a.propensities, a.cost) == (b.draws, b.propensities, b.cost)
    replayed.close()
    live.close()
    assert held.cost["usd"] != 0.02 or "mid" not in held.team


@pytest.mark.parametrize(
    ("expert", "cost", "error", "match"),
    [
        ("nope", {"usd": 0.1}, InvalidFeedbackError, "expert_id: unknown expert 'nope'"),
        ("small", {"cpu": 0.1}, InvalidFeedbackError, r"cost: unknown cost name\(s\) \['cpu'\]"),
        ("small", {"usd": -1.0}, InvalidFeedbackError, r"cost\.usd: costs must be >= 0"),
        ("small", {"usd": math.nan}, InvalidFeedbackError, r"cost\.usd: must be finite"),
        ("small", [0.1], InvalidFeedbackError, "cost: needs 2 values"),
        ("big", {"usd": 5.0}, InfeasibleConstraintsError, "usd"),
    ],
)
def test_a_refused_price_change_changes_nothing(
    tmp_path: Path, expert: str, cost: Any, error: type[Exception], match: str
) -> None:
    path = tmp_path / "j.db"
    router = Router(cfg(experts={"big": [0.03, 1.0], "small": [0.002, 0.0]}), journal=path)
    traffic(router, 10)
    before = router.state()
    with pytest.raises(error, match=match):
        router.set_expert_cost(expert, cost)
    assert router.state() == before
    assert router.set_expert_cost("small", [0.002, 0.0]) == {"usd": 0.002, "gpu": 0.0}
    router.close()
    assert "set_cost" not in kinds(path)  # the same price again: no event


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
