"""The live Router: config, routing, feedback, experts, expiry, determinism, journal, group."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import re
import sqlite3
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import msroute
from msroute.cli import main
from msroute.errors import (
    DecisionConflictError,
    InfeasibleConstraintsError,
    InvalidFeedbackError,
    JournalError,
    MSRouteError,
    ResourceError,
    RouterConfigError,
    UnknownDecisionError,
)
from msroute.policies.state_walk import state_dict
from msroute.router import RoutedDecision, Router, RouterConfig
from msroute.router import core as router_core
from msroute.router import journal as journal_module
from msroute.router import tail as tail_module
from msroute.router.snapshots import SNAPSHOTS_KEPT

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd", "gpu"],
    "seed": 3,
    "experts": {
        "big": [0.030, 1.0],
        "small": [0.002, 0.0],
        "mid": [0.010, 0.5],
        "tiny": {"usd": 0.001, "gpu": 0.0},
    },
    "constraints": {"upper": {"usd": 0.04}, "lower": {"gpu": 0.1}},
    "snapshot_every": 40,
}
#: Each expert's skill on one dimension: the reward of a team is its best member's skill.
SKILL = {"big": 0.9, "small": 0.3, "mid": 0.6, "tiny": 0.1, "new": 0.8}


def cfg(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(CONFIG)
    out.update(changes)
    return out


def reward_of(d: RoutedDecision) -> float:
    return max(SKILL[e] for e in d.team)


def traffic(router: Router, rounds: int, seed: int = 0, *, start: int = 0) -> list[str]:
    """Route ``rounds`` queries; feed back a random earlier pending one 80% of the time."""
    rng = np.random.default_rng(seed)
    pending: list[RoutedDecision] = []
    for i in range(rounds):
        pending.append(router.route(decision_id=f"q{start + i}"))
        if rng.random() < 0.8:
            d = pending.pop(int(rng.integers(len(pending))))
            router.feedback(d.decision_id, reward_of(d))
    return [d.decision_id for d in pending]


def backup(router: Router, dst: Path) -> Path:
    """A consistent copy of a live router's journal (SQLite's online backup, through the
    router's own connection: no other connection may open a live journal)."""
    b = sqlite3.connect(dst)
    with b:
        router._journal._db.backup(b)  # type: ignore[union-attr]
    b.close()
    return dst


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "seq"}


def same_decision(a: RoutedDecision, b: RoutedDecision) -> None:
    da, db = a.to_dict(), b.to_dict()
    da.pop("deadline")
    db.pop("deadline")
    assert da == db


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"polcy": "omd"}, r"unknown key\(s\) \['polcy'\]"),
        ({"policy": "ucb"}, "policy: unknown policy 'ucb'"),
        ({"m_draws": 0}, "m_draws: must be >= 1"),
        ({"m_draws": 2.5}, "m_draws: must be an integer"),
        ({"cost_names": ["usd", "usd"]}, "cost_names: duplicate"),
        ({"experts": {"big": [0.1]}}, r"experts\.big: needs 2 values"),
        ({"experts": {"big": [0.1, -1.0]}}, r"experts\.big\.gpu: costs must be >= 0"),
        ({"experts": {"big": {"usd": 0.1, "cpu": 1.0}}}, r"experts\.big: unknown cost name"),
        ({"experts": {"big": [0.1, math.nan]}}, r"experts\.big\.gpu: must be finite"),
        ({"constraints": {"upper": {"eur": 1.0}}}, r"constraints\.upper\.eur: unknown cost"),
        ({"constraints": {"uper": {}}}, r"constraints: unknown key"),
        ({"journal_sync": "off"}, "journal_sync: must be 'full' or 'normal'"),
        ({"feedback_ttl_s": 0}, "feedback_ttl_s: must be > 0"),
        ({"on_missing": "zero"}, "on_missing: must be a number"),
        ({"on_missing": -1.0}, "on_missing: the default reward -1.0 is outside"),
        ({"params": {"seed": 1}}, r"params\.seed: set by the router"),
        ({"contexts": []}, "contexts: must be a non-empty list"),
        ({"snapshot_every": 0}, "snapshot_every: must be >= 1"),
        # integers the journal cannot store: a raw ValueError or OverflowError before
        ({"horizon": 10**5000}, r"horizon: must be <= 2\*\*63 - 1, got <an integer of 5001 dig"),
        ({"seed": 2**63}, r"seed: must be <= 2\*\*63 - 1, got 9223372036854775808"),
        ({"seed": -(10**5000)}, "seed: must be >= 0, got <an integer of 5001 digits>"),
        ({"params": {"batch": 10**5000}}, r"params\.batch: an integer beyond 64 bits, <an int"),
        ({"params": {"eta_mult": -(10**400)}}, r"params\.eta_mult: an integer beyond 64 bits"),
    ],
)
def test_config_errors_name_the_key(change: dict[str, Any], match: str) -> None:
    with pytest.raises(RouterConfigError, match=match):
        RouterConfig.from_dict(cfg(**change))


def test_config_from_toml_round_trips(tmp_path: Path) -> None:
    toml = tmp_path / "router.toml"
    toml.write_text(
        'policy = "omd"\nm_draws = 2\ncost_names = ["usd", "gpu"]\ncontexts = ["a", "b"]\n'
        'journal = "r.db"\non_missing = 0.5\n[experts]\nbig = [0.03, 1.0]\n'
        "small = { usd = 0.002, gpu = 0.0 }\n[constraints]\nupper = { usd = 0.04 }\n"
    )
    c = RouterConfig.from_toml(toml)
    assert c.experts == {"big": (0.03, 1.0), "small": (0.002, 0.0)}
    assert RouterConfig.from_dict(c.to_dict()) == c
    router = Router.from_config(toml)  # the journal path is relative to the TOML file
    assert router.journal_path == tmp_path / "r.db" and router.context_names == ["a", "b"]
    router.close()
    bad = tmp_path / "bad.toml"
    bad.write_text('policy = "omd"\nm_draws = "two"\n')
    with pytest.raises(RouterConfigError, match=r"bad\.toml: cost_names: required"):
        RouterConfig.from_toml(bad)


def test_infeasible_bounds_fail_at_construction_naming_the_cost() -> None:
    with pytest.raises(InfeasibleConstraintsError, match="usd"):
        Router(cfg(constraints={"upper": {"usd": 0.0001}}))


@pytest.mark.parametrize("policy", ["ts", "cbwk", "ts-bwk", "uniform"])
def test_every_policy_takes_contexts(policy: str) -> None:
    router = Router(cfg(policy=policy, contexts=["a", "b"]))
    for i in range(30):
        d = router.route(context="ab"[i % 2])
        router.feedback(d.decision_id, reward_of(d))
    assert router.state()["decisions"] == 30
    with pytest.raises(InvalidFeedbackError, match="unknown context 'c'"):
        router.route(context="c")


# ---------------------------------------------------------------------- routing and feedback
def test_a_decision_and_its_feedback() -> None:
    router = Router(CONFIG)
    d = router.route()
    assert len(d.draws) == 2 and d.team == list(dict.fromkeys(d.draws))
    assert d.propensities is not None and math.isclose(sum(d.propensities.values()), 1.0)
    costs = CONFIG["experts"]
    want_usd = sum((costs[e]["usd"] if isinstance(costs[e], dict) else costs[e][0]) for e in d.team)
    assert d.cost["usd"] == pytest.approx(want_usd)
    assert set(d.to_dict()) == {
        "decision_id",
        "team",
        "draws",
        "propensities",
        "policy_version",
        "cost",
        "deadline",
    }
    assert router.state()["pending"] == 1
    assert router.feedback(d.decision_id, 0.7) == "applied"
    assert router.feedback(d.decision_id, 0.7) == "duplicate"
    # A repeat is validated like a first feedback, and must be the first one again.
    with pytest.raises(InvalidFeedbackError, match="eur"):
        router.feedback(d.decision_id, 0.7, cost={"eur": 1.0})
    with pytest.raises(DecisionConflictError, match=r"already reported with reward 0\.7"):
        router.feedback(d.decision_id, 0.2)
    st = router.state()
    assert (st["decisions"], st["feedback_applied"], st["pending"]) == (1, 1, 0)
    assert st["policy_version"] == 1
    assert st["avg_cost"]["usd"] == pytest.approx(d.cost["usd"])
    assert math.isclose(sum(st["q"].values()), 1.0)
    with pytest.raises(UnknownDecisionError, match="'nope'"):
        router.feedback("nope", 1.0)


@pytest.mark.parametrize(
    ("reward", "cost", "match"),
    [
        (math.nan, None, "reward"),
        (math.inf, None, "reward"),
        (np.float64(math.nan), None, "reward: must be finite"),
        (np.float64(-math.inf), None, "reward: must be finite"),
        (np.float64(-0.5), None, "reward"),
        (-0.5, None, "reward"),
        (True, None, "reward"),
        ("1", None, "reward"),
        (0.5, {"eur": 1.0}, "cost: unknown cost name"),
        (0.5, {"usd": -1.0}, r"cost\.usd: costs must be >= 0"),
        (0.5, [0.1], "cost: needs 2 values"),
        (0.5, {"usd": math.inf}, r"cost\.usd: must be finite"),
        (2e6, None, r"\[0, 1e\+06\] \(reward_max unset: the most the policy learns from\)"),
    ],
)
def test_bad_feedback_changes_nothing(reward: Any, cost: Any, match: str) -> None:
    router = Router(CONFIG)
    d = router.route()
    before = router.state()
    with pytest.raises(InvalidFeedbackError, match=match):
        router.feedback(d.decision_id, reward, cost)
    assert router.state() == before
    assert router.feedback(d.decision_id, 0.5) == "applied"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"reward_min": -1.0}, r"\[-1, 1e\+06\] is outside the rewards policy 'omd' learns"),
        ({"reward_max": 2e6}, r"\[0, 2e\+06\] is outside"),
        ({"on_missing": 2e6}, "on_missing: the default reward 2e[+]06 is above 1e[+]06"),
    ],
)
def test_rewards_the_policy_cannot_learn_from_are_refused_by_the_config(
    tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    """The configured reward range lies in the policy's ``reward_range``, which a replay
    checks every reward against: so every feedback the router takes replays (at construction,
    and at a change of the settings, which changes nothing when refused)."""
    with pytest.raises(RouterConfigError, match=match):
        Router({**CONFIG, **change})
    router = Router(CONFIG, journal=tmp_path / "j.db")
    d = router.route()
    router.feedback(d.decision_id, 1e6)  # the most the policy learns from
    before = router.state()
    with pytest.raises(RouterConfigError, match=match):
        router.reconfigure({**CONFIG, **change})
    assert router.state() == before
    router.close()
    Router.open(tmp_path / "j.db", use_snapshot=False).close()  # and it replays


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: r.route(context=["billing"]), "context: unknown context"),
        (lambda r: r.expire("x"), "now: must be a number, got 'x'"),
        (lambda r: r.expire(math.nan), "now: must be finite, got nan"),
        (lambda r: r.decisions_since("x"), "seq: must be an integer >= 0, got 'x'"),
        (lambda r: r.decisions_since(0, -1), "limit: must be an integer >= 0, got -1"),
        (lambda r: r.export_rows(1.5), "seq: must be an integer >= 0, got 1.5"),
    ],
)
def test_bad_arguments_are_named_and_change_nothing(call: Any, match: str) -> None:
    router = Router(cfg(contexts=["billing", "tech"]))
    router.route(context="tech")
    before = router.state()
    with pytest.raises(InvalidFeedbackError, match=re.escape(match)):
        call(router)
    assert router.state() == before


def test_reported_cost_replaces_the_realized_one() -> None:
    router = Router(CONFIG)
    d = router.route()
    router.feedback(d.decision_id, 0.5, cost={"usd": 0.5})
    assert router.state()["avg_cost"] == {"usd": 0.5, "gpu": pytest.approx(d.cost["gpu"])}


def test_same_decision_id_returns_the_same_decision() -> None:
    router = Router(CONFIG)
    a = router.route(decision_id="req-1")
    seq = router.state()["seq"]
    b = router.route(decision_id="req-1")
    assert a == b and router.state()["seq"] == seq and router.state()["decisions"] == 1


def test_client_ids_never_collide_with_generated_ids() -> None:
    router = Router(CONFIG)
    generated = router.route().decision_id
    prefix, _, n = generated.rpartition("-")
    assert n.isdigit()
    before = router.state()
    for taken in (f"{prefix}-{int(n) + 1}", f"{prefix}-{int(n) + 50}"):  # the next ones
        with pytest.raises(InvalidFeedbackError, match="has the form of the ids this router"):
            router.route(decision_id=taken)
    assert router.state() == before
    assert router.route(decision_id=generated).decision_id == generated  # a retry: the same
    for free in (f"{prefix}-x1", f"{prefix}1-2", f"other-{n}", prefix):
        assert router.route(decision_id=free).decision_id == free
    assert router.route().decision_id == f"{prefix}-{int(n) + 5}"  # generated: still unique


def test_draws_per_decision_beyond_memory_are_refused_before_allocating() -> None:
    with pytest.raises(ResourceError, match=r"M = 200000000 draws needs about .* GiB"):
        msroute.OMDApproachability(
            msroute.Problem([[0.1], [0.2]], 200_000_000, msroute.Constraints(upper=[1e9])),
            horizon=10,
        )
    with pytest.raises(ResourceError, match=r"M = 200000000 draws needs about .* GiB"):
        Router(cfg(m_draws=200_000_000))


def test_a_repeated_decision_id_must_repeat_its_request() -> None:
    router = Router(cfg(contexts=["billing", "tech"]))
    a = router.route(context="billing", eligible=["big", "small"], decision_id="req-1")
    b = router.route(context="tech", decision_id="req-2")  # routed with every expert eligible
    state = router.state()
    assert router.route(context="billing", eligible=["small", "big"], decision_id="req-1") == a
    assert router.route(decision_id="req-1") == a  # arguments left out are not compared
    for context, eligible, named in [
        ("tech", None, "context 'billing'"),
        (None, ["big"], re.escape("eligible ['big', 'small'], not ['big']")),
        (None, [], "eligible"),
        (None, "big", "eligible"),
        (None, [["big"]], "eligible"),
    ]:
        with pytest.raises(DecisionConflictError, match=named):
            router.route(context=context, eligible=eligible, decision_id="req-1")
    with pytest.raises(DecisionConflictError, match="all experts"):
        router.route(eligible=list(router.expert_ids), decision_id="req-2")
    assert router.route(context="tech", decision_id="req-2") == b
    assert router.state() == state  # nothing changed: no new decision, no new row


def test_contexts_and_eligibility() -> None:
    router = Router(cfg(contexts=["billing", "tech"]))
    with pytest.raises(InvalidFeedbackError, match="context: unknown context 'sales'"):
        router.route(context="sales")
    with pytest.raises(InvalidFeedbackError, match="context: none given; this router routes"):
        router.route()
    with pytest.raises(InvalidFeedbackError, match="eligible: unknown expert id 'huge'"):
        router.route(context="tech", eligible=["big", "huge"])
    with pytest.raises(InvalidFeedbackError, match="eligible: empty"):
        router.route(context="tech", eligible=[])
    assert router.state()["decisions"] == 0  # nothing changed
    supports = set()
    for _ in range(50):
        d = router.route(context="tech", eligible=["mid", "tiny"])
        assert set(d.team) <= {"mid", "tiny"}
        assert d.propensities is not None and set(d.propensities) <= {"mid", "tiny"}
        supports.add(frozenset(d.propensities))
        router.feedback(d.decision_id, reward_of(d))
    # The first decisions go to "mid" alone (the gpu floor must hold from the first one on);
    # then to both eligible experts.
    assert frozenset({"mid", "tiny"}) in supports
    q = router.state()["q_by_context"]
    assert q["billing"] == {e: 0.25 for e in CONFIG["experts"]}  # only "tech" learned
    assert q["tech"] != q["billing"]


def test_every_registered_policy_routes() -> None:
    for name in msroute.available_policies():
        router = Router(cfg(policy=name))
        traffic(router, 30)
        st = router.state()
        assert st["decisions"] == 30 and st["policy"] == name


# ---------------------------------------------------------------------- experts
def test_add_and_remove_experts() -> None:
    # Algorithm 1's fixed floor, so that every kept share stays above the floor and the
    # learned proportions carry over exactly (a decayed floor is raised back to gamma).
    router = Router(cfg(params={"variant": "paper", "eta_mult": 0.1}))
    traffic(router, 60)
    q_before = router.state()["q"]
    learned = router.policy.cost_est.costs.copy()  # type: ignore[attr-defined]
    router.add_expert("new", {"usd": 0.005, "gpu": 0.2})
    carried = router.policy.cost_est.costs  # type: ignore[attr-defined]
    np.testing.assert_array_equal(carried[:, :4], learned)  # what was learned is kept
    assert carried[0, 4].tolist() == pytest.approx([0.005, 0.2])  # the new one: its table
    q = router.state()["q"]
    gamma = 1.0 / (10 * 5)
    assert q["new"] == pytest.approx(gamma) and math.isclose(sum(q.values()), 1.0)
    assert q["big"] / q["mid"] == pytest.approx(q_before["big"] / q_before["mid"], rel=1e-9)
    traffic(router, 30, start=60)
    held = router.route(eligible=["mid"])
    router.remove_expert("mid")
    assert router.expert_ids == ["big", "small", "tiny", "new"]
    assert math.isclose(sum(router.state()["q"].values()), 1.0)
    # It routed to a removed expert, before its deadline: its own status, logged, not learned.
    assert held.deadline > time.time()
    version = router.state()["policy_version"]
    assert router.feedback(held.decision_id, 0.6) == "expert_removed"
    assert router.state()["policy_version"] == version
    assert router.feedback(held.decision_id, 0.6) == "duplicate"
    with pytest.raises(InvalidFeedbackError, match="ids are never reused"):
        router.add_expert("mid", [0.01, 0.5])
    with pytest.raises(InvalidFeedbackError, match="already an expert"):
        router.add_expert("big", [0.01, 0.5])
    with pytest.raises(InvalidFeedbackError, match=r"cost\.gpu: costs must be >= 0"):
        router.add_expert("x", [0.01, -0.5])
    traffic(router, 30, start=100)
    assert "mid" not in router.state()["q"]


def test_infeasible_removal_changes_nothing() -> None:
    router = Router(cfg(constraints={"lower": {"gpu": 0.6}}))
    traffic(router, 20)
    before = router.state()
    with pytest.raises(InfeasibleConstraintsError, match="gpu"):
        router.remove_expert("big")
    assert router.state() == before


# ---------------------------------------------------------------------- expiry
def test_expired_decisions_drop_or_learn_the_default() -> None:
    for on_missing, version in (("drop", 0), (0.25, 2)):
        router = Router(cfg(on_missing=on_missing, feedback_ttl_s=10.0))
        a, b = router.route(), router.route()
        assert router.expire(now=a.deadline - 1.0) == 0
        assert router.expire(now=b.deadline + 1.0) == 2
        st = router.state()
        assert (st["pending"], st["expired"], st["policy_version"]) == (0, 2, version)
        assert router.feedback(a.decision_id, 0.5) == "late"
        assert router.feedback(a.decision_id, 0.5) == "duplicate"
        assert router.state()["feedback_late"] == 1


def test_the_deadline_heap_follows_the_pending_decisions_not_the_traffic() -> None:
    """Closed decisions leave the deadline heap once it holds more than twice the pending ones
    (plus a slack), and the decisions left still expire, all of them, oldest first."""
    from msroute.router.state import _HEAP_SLACK

    router = Router(cfg(feedback_ttl_s=3600.0))
    kept = []
    for i in range(3 * _HEAP_SLACK):
        d = router.route()
        heap, pending = router._state.deadlines, router._state.pending
        assert len(heap) <= 2 * len(pending) + _HEAP_SLACK  # as the decision is pushed
        if i % 7:
            router.feedback(d.decision_id, reward_of(d))
        else:
            kept.append(d.decision_id)
    assert set(router._state.pending) <= {entry[2] for entry in router._state.deadlines}
    assert router.expire(now=time.time() + 7200.0) == len(kept)
    expired = [e[2] for e in router._journal.events() if e[1] == "expire"]
    assert expired == kept


# ---------------------------------------------------------------------- determinism, journal
def test_decision_n_is_a_function_of_seed_and_n() -> None:
    a, b = Router(CONFIG), Router(CONFIG)
    for i in range(40):
        da, db = a.route(decision_id=str(i)), b.route(decision_id=str(i))
        same_decision(da, db)
        a.feedback(da.decision_id, reward_of(da))
        b.feedback(db.decision_id, reward_of(db))
    other = Router(cfg(seed=4))
    draws = [other.route().draws for _ in range(40)]
    assert draws != [a.route().draws for _ in range(40)]


@pytest.mark.parametrize(
    ("policy", "params"),
    [
        ("omd", {}),
        # The model estimator reads the whole q of a decision: a snapshot's pending decisions
        # get it back from the journal.
        ("omd", {"variant": "model"}),
        ("omd", {"variant": "model", "model_fit": "sparse"}),
        ("omd-contextual", {}),
        ("ts-bwk", {}),
        ("cucb", {}),
        ("moe", {}),
    ],
)
def test_reopened_journal_continues_bit_for_bit(
    policy: str, params: dict[str, str], tmp_path: Path
) -> None:
    contexts = ["a", "b"] if policy == "omd-contextual" else None
    live = Router(
        cfg(policy=policy, contexts=contexts, params=params), journal=tmp_path / "live.db"
    )

    def route(r: Router, i: int) -> RoutedDecision:
        return r.route(context=None if contexts is None else contexts[i % 2], decision_id=f"d{i}")

    rng = np.random.default_rng(1)
    pending: list[RoutedDecision] = []
    for i in range(150):
        pending.append(route(live, i))
        if i == 70:
            live.add_expert("new", [0.005, 0.2])
        if rng.random() < 0.7:
            d = pending.pop(int(rng.integers(len(pending))))
            live.feedback(d.decision_id, reward_of(d))
    reopened = Router.open(backup(live, tmp_path / "copy.db"))
    from_start = Router.open(backup(live, tmp_path / "copy2.db"), use_snapshot=False)
    assert comparable(reopened.state()) == comparable(live.state())
    assert comparable(from_start.state()) == comparable(live.state())
    for i in range(150, 200):  # the same calls give the same decisions and the same state
        da, db = route(live, i), route(reopened, i)
        same_decision(da, db)
        if i % 3:
            assert live.feedback(da.decision_id, reward_of(da)) == "applied"
            assert reopened.feedback(db.decision_id, reward_of(db)) == "applied"
    assert comparable(reopened.state()) == comparable(live.state())
    _assert_same_policy_state(reopened, live)
    for r in (live, reopened, from_start):
        r.close()


def test_snapshots_are_taken_and_used(tmp_path: Path) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    traffic(router, 100)
    router.close()
    db = sqlite3.connect(tmp_path / "j.db")
    snaps = [s for (s,) in db.execute("SELECT seq FROM snapshots ORDER BY seq")]
    (last,) = db.execute("SELECT max(seq) FROM events").fetchone()
    db.close()
    # Every 40 events a snapshot; only the newest SNAPSHOTS_KEPT are kept.
    assert len(snaps) == SNAPSHOTS_KEPT and all(b - a >= 40 for a, b in itertools.pairwise(snaps))
    assert last - 40 < snaps[-1] <= last
    reopened = Router.open(tmp_path / "j.db")
    assert reopened._snap_seq == snaps[-1]
    reopened.close()


def test_new_router_refuses_an_existing_journal(tmp_path: Path) -> None:
    Router(CONFIG, journal=tmp_path / "j.db").close()
    with pytest.raises(JournalError, match="already holds a journal"):
        Router(CONFIG, journal=tmp_path / "j.db")


@pytest.mark.parametrize("damage", ["text", "version", "missing"])
def test_damaged_journals_are_refused(damage: str, tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    if damage == "text":
        path.write_text("not a database at all, just some text\n" * 50)
    elif damage == "version":
        Router(CONFIG, journal=path).close()
        db = sqlite3.connect(path)
        db.execute("PRAGMA user_version = 99")
        db.close()
    with pytest.raises(JournalError, match=r"j\.db"):
        Router.open(path)


def _probs_rows(path: Path) -> tuple[int, int]:
    """(decision rows, decision rows holding their own distribution) of a closed journal."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(
            "SELECT count(*), count(probs) FROM events WHERE kind = 'decision'"
        ).fetchone()


def test_decisions_share_a_stored_distribution_until_the_policy_learns(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(cfg(contexts=["a", "b"], snapshot_every=10_000), journal=path)
    routed = []
    for i in range(60):
        eligible = ["big", "tiny"] if i % 7 == 0 else None  # masked: stored in full
        d = router.route(context="ab"[i % 2], eligible=eligible, decision_id=f"q{i}")
        routed.append(d)
        if i % 3 == 0:
            router.feedback(d.decision_id, reward_of(d))
    router.close()
    decisions, stored = _probs_rows(path)
    assert decisions == 60 and 9 <= stored < 40  # the masked ones, and one per change of q
    # Every decision's distribution is read back: the replay verifies each one, and a decision
    # routed before the restart is returned again with its propensities.
    reopened = Router.open(path, use_snapshot=False)
    for d in routed:
        same_decision(reopened.route(decision_id=d.decision_id), d)
    reopened.close()


def _as_version_2(db: sqlite3.Connection) -> None:
    """Turn a journal into version 2: an index on events.ref, no table refs."""
    db.execute("DROP TABLE refs")
    db.execute("DELETE FROM meta WHERE key = 'refs_upto'")
    db.execute("CREATE INDEX events_ref ON events(ref)")
    db.execute("PRAGMA user_version = 2")


def test_a_version_2_journal_is_upgraded_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 2 indexed events.ref; version 3 keeps the ids in refs, written in batches: the
    upgrade moves every id there, and the lookups of retried requests still find them."""
    monkeypatch.setattr(journal_module, "REFS_BATCH", 8)
    path = tmp_path / "j.db"
    router = Router(cfg(snapshot_every=10_000), journal=path)
    routed = [router.route(decision_id=f"q{i}") for i in range(20)]
    for d in routed[::2]:
        router.feedback(d.decision_id, reward_of(d))
    state = router.state()
    router.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        _as_version_2(db)
    reopened = Router.open(path, use_snapshot=False)
    assert comparable(reopened.state()) == comparable(state)
    same_decision(reopened.route(decision_id="q3"), routed[3])
    assert reopened.feedback("q0", reward_of(routed[0])) == "duplicate"
    assert reopened.feedback("q1", 0.5) == "applied"
    reopened.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        assert "events_ref" not in names and "refs" in names
        with_ref = db.execute("SELECT count(*) FROM events WHERE ref IS NOT NULL").fetchone()[0]
        upto = int(db.execute("SELECT value FROM meta WHERE key = 'refs_upto'").fetchone()[0])
        indexed = db.execute("SELECT count(*) FROM refs").fetchone()[0]
        unindexed = db.execute(
            "SELECT count(*) FROM events WHERE seq > ? AND ref IS NOT NULL", (upto,)
        ).fetchone()[0]
    assert indexed >= 30 and indexed + unindexed == with_ref


def test_a_version_1_journal_is_upgraded_when_opened(tmp_path: Path) -> None:
    """Version 1 had no events.probs_seq: every decision row held its distribution."""
    path = tmp_path / "j.db"
    router = Router(cfg(snapshot_every=10_000), journal=path)
    routed = [router.route(decision_id=f"q{i}") for i in range(20)]
    for d in routed[::2]:
        router.feedback(d.decision_id, reward_of(d))
    state = router.state()
    router.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE events SET probs = (SELECT e.probs FROM events AS e "
            "WHERE e.seq = events.probs_seq) WHERE probs_seq IS NOT NULL"
        )
        _as_version_2(db)
        db.execute("ALTER TABLE events DROP COLUMN probs_seq")
        db.execute("PRAGMA user_version = 1")
    reopened = Router.open(path, use_snapshot=False)  # verifies every decision
    assert comparable(reopened.state()) == comparable(state)
    same_decision(reopened.route(decision_id="q3"), routed[3])
    assert reopened.feedback("q1", 0.5) == "applied"
    reopened.route()  # new rows in the upgraded table
    reopened.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    Router.open(path, use_snapshot=False).close()


def test_replay_detects_a_tampered_decision(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    router = Router(cfg(snapshot_every=10_000), journal=path)
    traffic(router, 30)
    router.close()
    assert main(["journal", "replay", str(path)]) == 0
    db = sqlite3.connect(path)
    (seq, payload) = db.execute(
        "SELECT seq, payload FROM events WHERE kind = 'decision' AND ref = 'q7'"
    ).fetchone()
    p = json.loads(payload)
    p["draws"] = ["tiny", "tiny"] if p["draws"] != ["tiny", "tiny"] else ["big", "big"]
    with db:
        db.execute("UPDATE events SET payload = ? WHERE seq = ?", (json.dumps(p), seq))
    db.close()
    assert main(["journal", "replay", str(path)]) == 1
    with pytest.raises(JournalError, match=rf"event {seq}: decision 'q7'"):
        Router.open(path)


def test_export_jsonl_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 10)
    n = router.state()["seq"]
    router.close()
    assert main(["journal", "export", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == n and rows[0]["kind"] == "decision" and rows[0]["decision_id"] == "q0"
    out = tmp_path / "e.csv"
    assert main(["journal", "export", str(path), "--format", "csv", "--out", str(out)]) == 0
    text = out.read_text().splitlines()
    assert text[0].startswith("seq,kind,time,decision_id,") and len(text) == n + 1


# ---------------------------------------------------------------------- group commit
def test_group_commits_once_and_refused_calls_write_nothing(tmp_path: Path) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    with router.group():
        a = router.route()
        with pytest.raises(InvalidFeedbackError):
            router.feedback(a.decision_id, math.nan)
        with router.group():  # re-entrant
            b = router.route()
        router.feedback(a.decision_id, 0.5)
        assert router._journal.in_transaction  # one transaction, still open
    assert not router._journal.in_transaction
    assert router.feedback(b.decision_id, 0.5) == "applied"
    router.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "j.db")) as db:
        kinds = [k for (k,) in db.execute("SELECT kind FROM events ORDER BY seq")]
    assert kinds == ["decision", "decision", "feedback", "feedback"]
    router.close()  # idempotent
    with pytest.raises(MSRouteError, match="closed"):
        router.route()


@pytest.mark.parametrize("where", ["memory", "full", "normal"])
@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_a_group_an_exception_leaves_is_rolled_back(
    tmp_path: Path, where: str, error: type[BaseException]
) -> None:
    """An error the caller's code raises inside ``group()`` (or an interrupt) leaves the block
    rolled back: none of its calls happened, in memory or in the journal, and the router
    routes on as a twin that never saw them."""
    path = None if where == "memory" else tmp_path / "j.db"
    router = Router(cfg(journal_sync="full" if where == "memory" else where), journal=path)
    twin = Router(CONFIG)
    for r in (router, twin):
        r.feedback(r.route(decision_id="a").decision_id, 0.5)
    before = router.state()
    with pytest.raises(error), router.group():
        router.route(decision_id="b")
        router.feedback("b", 0.25)
        router.route(decision_id="c")
        raise error("the caller's own")
    assert router.state() == before
    with pytest.raises(UnknownDecisionError):
        router.feedback("b", 0.25)
    for r in (router, twin):
        r.feedback(r.route(decision_id="c").decision_id, 1.0)  # "c" is a new decision
    if path is not None:
        router.close()
        router = Router.open(path)
    for i in range(3):
        a, b = router.route(decision_id=f"d{i}"), twin.route(decision_id=f"d{i}")
        assert {**a.to_dict(), "deadline": 0} == {**b.to_dict(), "deadline": 0}
    assert {k: v for k, v in router.state().items() if k != "seq"} == {
        k: v for k, v in twin.state().items() if k != "seq"
    }
    router.close()


def test_a_refused_transaction_changes_nothing(tmp_path: Path) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    real = router._journal._db  # type: ignore[union-attr]
    router._journal._db = _Refusing(real, "BEGIN IMMEDIATE")  # type: ignore[union-attr]
    with pytest.raises(JournalError, match="cannot start a transaction"):
        router.route()
    router._journal._db = real  # type: ignore[union-attr]
    assert router.state()["decisions"] == 0
    assert router.route().team  # a refused BEGIN changed nothing: the router goes on
    router.close()


class _Refusing:
    """A connection that refuses one statement as a locked database does, delegating all else."""

    def __init__(self, db: sqlite3.Connection, statement: str) -> None:
        self._db = db
        self._statement = statement

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == self._statement:
            raise sqlite3.OperationalError("database is locked")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_live_journal_is_refused_to_any_other_connection_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    traffic(router, 5)
    tic = time.perf_counter()
    with pytest.raises(JournalError, match="in use by another router"):
        Router.open(path)
    assert time.perf_counter() - tic < 2.0  # the short busy timeout, not SQLite's 5 s
    with pytest.raises(JournalError, match="in use by another router"):
        msroute.evaluate(path, {"big": 0.5, "small": 0.5})
    assert main(["journal", "export", str(path)]) != 0
    assert "in use by another router" in capsys.readouterr().err
    with (
        contextlib.closing(sqlite3.connect(path, timeout=0.0)) as other,
        pytest.raises(sqlite3.OperationalError, match="locked"),
    ):
        other.execute("SELECT count(*) FROM events")
    assert router.route().team  # the refused openings disturbed nothing
    router.close()
    Router.open(path).close()  # closed: the lock is released


# ---------------------------------------------------------------------- failed commits
class _FailingCommits:
    """A connection whose COMMIT fails (a full disk, an I/O error), delegating all else."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def _assert_same_policy_state(a: Router, b: Router) -> None:
    sa, sb = state_dict(a.policy), state_dict(b.policy)
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        same = np.array_equal(value, sb[key]) if isinstance(value, np.ndarray) else None
        assert same if same is not None else value == sb[key], key


def test_a_durable_router_learns_exactly_as_in_memory(tmp_path: Path) -> None:
    durable = Router(CONFIG, journal=tmp_path / "j.db")  # synchronous=FULL
    memory = Router(CONFIG)
    for r in (durable, memory):
        traffic(r, 120, seed=5)
    assert comparable(durable.state()) == comparable(memory.state())
    _assert_same_policy_state(durable, memory)
    durable.close()


def test_a_failed_feedback_commit_changes_nothing_until_the_disk_recovers(
    tmp_path: Path,
) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    twin = Router(CONFIG)  # the same calls, without the failed one
    for r in (router, twin):
        traffic(r, 30)
        r.route(decision_id="last")
    before = router.state()
    real = router._journal._db  # type: ignore[union-attr]
    router._journal._db = _FailingCommits(real)  # type: ignore[union-attr]
    with pytest.raises(JournalError, match="cannot commit the journal: disk I/O error"):
        router.feedback("last", 0.7)
    assert router.state() == before
    assert comparable(router.state()) == comparable(twin.state())
    _assert_same_policy_state(router, twin)
    assert not router.writable and "disk I/O error" in (router.failure or "")
    with pytest.raises(JournalError, match="disk I/O error"):  # the disk is still failing
        router.feedback("last", 0.7)
    assert router.state() == before and not router.writable
    with pytest.raises(JournalError, match="in use by another router"):
        Router.open(tmp_path / "j.db")  # the router still holds its journal
    router._journal._db = real  # type: ignore[union-attr]  # the disk recovered
    assert router.feedback("last", 0.7) == twin.feedback("last", 0.7) == "applied"
    assert router.writable and router.failure is None
    assert comparable(router.state()) == comparable(twin.state())
    router.close()
    reopened = Router.open(tmp_path / "j.db")  # the journal agrees
    assert comparable(reopened.state()) == comparable(twin.state())
    _assert_same_policy_state(reopened, twin)
    reopened.close()


@pytest.mark.parametrize("call", ["route", "feedback expiring others", "group"])
def test_a_failed_commit_changes_nothing_in_memory(
    tmp_path: Path, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the call (a route, a feedback whose call also expires decisions, a group), a
    failed commit leaves the router's state, policy included, as the journal has it."""
    clock = [1e9]  # the routers' clock, so that what expires does not depend on the machine
    monkeypatch.setattr(router_core, "time", types.SimpleNamespace(time=lambda: clock[0]))
    router = Router(cfg(feedback_ttl_s=60), journal=tmp_path / "j.db")
    twin = Router(cfg(feedback_ttl_s=60))  # the same calls, without the failed one
    for r in (router, twin):
        traffic(r, 30)
        r.route(decision_id="last")
    clock[0] += 120.0  # every pending decision is due to expire
    before = router.state()
    real = router._journal._db  # type: ignore[union-attr]
    router._journal._db = _FailingCommits(real)  # type: ignore[union-attr]
    with pytest.raises(JournalError, match="disk I/O error"):
        if call == "route":
            router.route(decision_id="new")  # expires the due decisions first
        elif call == "feedback expiring others":
            router.feedback("last", 0.7)  # expires the others first (and "last" itself)
        else:
            with router.group():
                router.route(decision_id="new")
                router.feedback("new", 0.7)
    assert router.state() == before
    _assert_same_policy_state(router, twin)
    router.close()
    reopened = Router.open(tmp_path / "j.db")
    assert comparable(reopened.state()) == comparable(before)
    reopened.close()


def test_an_error_while_learning_reaches_the_caller(tmp_path: Path) -> None:
    router = Router(CONFIG, journal=tmp_path / "j.db")
    d = router.route()

    def broken(*args: Any) -> None:
        raise RuntimeError("learning failed")

    router.policy.update_trusted = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="learning failed"):
        router.feedback(d.decision_id, 0.5)
    router.close()


def test_feedback_cost_beyond_the_policys_limit_is_refused_and_changes_nothing() -> None:
    """The router learns through update_trusted, so it applies the policy's cost check itself:
    a realized cost above cost_limit times the column's largest table cost is refused."""
    router = Router(CONFIG)
    d = router.route()
    before = router.state()
    limit = router.policy.cost_limit * 1.0  # the gpu column's largest table cost is 1.0
    with pytest.raises(InvalidFeedbackError, match=r"cost: cost 2e\+06 \(coordinate 1"):
        router.feedback(d.decision_id, 0.5, {"gpu": 2 * limit})
    assert router.state() == before
    assert router.feedback(d.decision_id, 0.5, {"gpu": limit}) == "applied"


@pytest.mark.parametrize(
    "value",
    [
        {"n": 3, "draws": ["m2", 'é"\n\t'], "probs": [0.967340136762891, 5e-324, -0.0, 1e300]},
        {"reward": math.nan, "cost": [math.inf, -math.inf], "status": "applied", "x": None},
        {"nested": {"a": [{"b": True}], "☃": 2**70}, "empty": [{}, []]},
        [np.float64(0.1), 1.5, "s"],
    ],
)
def test_payloads_are_encoded_as_json_dumps_encodes_them(value: Any) -> None:
    """The journal's prebuilt encoder against the stdlib's ``json.dumps``, character for
    character (floats at full precision, non-finite floats, escapes, nesting)."""
    assert tail_module.encode_json(value) == json.dumps(value, separators=(",", ":"))
    with pytest.raises(TypeError, match="ndarray is not JSON serializable"):
        tail_module.encode_json({"a": np.zeros(2)})


def test_costs_too_large_for_the_lp_are_named_and_change_nothing() -> None:
    router = Router(CONFIG)
    before = router.state()
    # Refused by the range of costs before the feasibility LP (tests/test_cost_range.py).
    with pytest.raises(InvalidFeedbackError, match=r"cost\.usd: 1e\+300 is outside the range"):
        router.add_expert("huge", [1e300, 1e300])
    assert router.state() == before
