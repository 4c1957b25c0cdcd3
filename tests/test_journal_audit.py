"""Faults a deliberate-fault audit of the live half slipped past; each test fails on its fault.

- A decision expires at exactly its deadline (the rule: expired at the deadline, not after it).
- Pending decisions restored from a snapshot are re-armed for expiry.
- A rolled-back transaction forgets the distributions it stored for sharing.
- ``journal_sync`` reaches SQLite as the setting it names (read back with PRAGMA synchronous).
- A bit flip that sets a policy file's zip "encrypted" flag is a PolicyFileError.
- A snapshot changed with its checksum recomputed (or holding another journal's policy) is
  checked like constructor arguments and skipped; a replay checks costs and rewards against
  the recorded configuration.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import types
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msroute.errors import JournalError, PolicyFileError
from msroute.policies.persist import load_policy, policy_bytes
from msroute.router import Router
from msroute.router import core as router_core
from msroute.router.journal import Journal

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 7,
    "feedback_ttl_s": 60.0,
    "on_missing": 0.25,
    "snapshot_every": 10,
    "experts": {"a": [0.03], "b": [0.002], "c": [0.01]},
    "constraints": {"upper": {"usd": 0.04}},
}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The routers' clock, set by the test."""
    now = [1e9]
    monkeypatch.setattr(router_core, "time", types.SimpleNamespace(time=lambda: now[0]))
    return now


@pytest.mark.parametrize(("offset", "status"), [(-1e-6, "applied"), (0.0, "late")])
def test_a_decision_expires_at_exactly_its_deadline(
    clock: list[float], offset: float, status: str
) -> None:
    router = Router(CONFIG)
    d = router.route()
    assert d.deadline == clock[0] + CONFIG["feedback_ttl_s"]
    clock[0] = d.deadline + offset
    assert router.feedback(d.decision_id, 0.5) == status


def test_expire_at_the_deadline_counts_it(clock: list[float]) -> None:
    router = Router(CONFIG)
    d = router.route()
    assert router.expire(d.deadline - 1e-6) == 0
    assert router.expire(d.deadline) == 1
    assert router.state()["expired"] == 1


def test_pending_decisions_restored_from_a_snapshot_are_rearmed(
    tmp_path: Path, clock: list[float]
) -> None:
    path = tmp_path / "j.db"
    live = Router(CONFIG, journal=path)
    ids = [live.route(decision_id=f"q{i}").decision_id for i in range(25)]  # no feedback
    live.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        (snap,) = db.execute("SELECT max(seq) FROM snapshots").fetchone()
    assert snap >= 20  # the reopened router starts from a snapshot holding pending decisions
    reopened = Router.open(path)
    assert reopened._snap_seq == snap and reopened.state()["pending"] == len(ids)
    twin = Router(CONFIG)  # the same decisions, never stopped
    for i in range(25):
        twin.route(decision_id=f"q{i}")
    clock[0] += CONFIG["feedback_ttl_s"] + 1.0
    assert reopened.expire() == twin.expire() == len(ids)
    assert reopened.state()["pending"] == 0
    # The default reward was learned for each, as in the router that never stopped.
    assert reopened.state()["q"] == twin.state()["q"]
    assert reopened.state()["policy_version"] == twin.state()["policy_version"] == len(ids)
    reopened.close()


def test_a_rollback_forgets_the_distributions_it_stored(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal = Journal(path, create=True)
    probs = np.array([0.5, 0.25, 0.25]).tobytes()
    journal.begin()
    assert journal.append("decision", "x", 1.0, {"n": 0}, probs, share=(None,)) == 1
    journal.rollback()
    journal.begin()
    seq = journal.append("decision", "y", 2.0, {"n": 0}, probs, share=(None,))
    again = journal.append("decision", "z", 3.0, {"n": 1}, probs, share=(None,))
    journal.commit()
    assert seq == 1 and again == 2
    events = list(journal.events())
    assert [(e[0], e[2], e[5]) for e in events] == [(1, "y", probs), (2, "z", probs)]
    journal.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT seq, probs IS NOT NULL, probs_seq FROM events").fetchall()
    assert rows == [(1, 1, None), (2, 0, 1)]  # the second points at the first, which exists


@pytest.mark.parametrize(("sync", "level"), [("full", 2), ("normal", 1)])
def test_journal_sync_reaches_sqlite(tmp_path: Path, sync: str, level: int) -> None:
    path = tmp_path / "j.db"
    router = Router({**CONFIG, "journal_sync": sync}, journal=path)
    db = router._journal._db  # type: ignore[union-attr]
    assert db.execute("PRAGMA synchronous").fetchone()[0] == level
    router.route()
    router.close()
    reopened = Router.open(path)
    db = reopened._journal._db  # type: ignore[union-attr]
    assert db.execute("PRAGMA synchronous").fetchone()[0] == level
    reopened.close()


def test_a_policy_file_with_the_encrypted_flag_set_is_a_policy_file_error(tmp_path: Path) -> None:
    blob = bytearray(policy_bytes(Router(CONFIG).policy))
    with zipfile.ZipFile(io.BytesIO(bytes(blob))) as zf:
        infos = zf.infolist()
    assert infos
    path = tmp_path / "p.zip"
    start = 0
    for _ in infos:  # each entry's flags in the central directory (the ones readers use)
        start = blob.index(b"PK\x01\x02", start + 1)
        flipped = bytearray(blob)
        flipped[start + 8] |= 0x01  # general purpose flags, bit 0: encrypted
        path.write_bytes(bytes(flipped))
        with pytest.raises(PolicyFileError, match="unreadable policy file"):
            load_policy(path)


def _traffic(path: Path, n: int, experts: dict[str, list[float]]) -> dict[str, Any]:
    """A closed journal of ``n`` decisions (every other one fed back), with its snapshots
    (every 10 events); the router's state at the end."""
    router = Router({**CONFIG, "feedback_ttl_s": 1e6, "experts": experts}, journal=path)
    for i in range(n):
        d = router.route(decision_id=f"q{i}")
        if i % 2:
            router.feedback(d.decision_id, 0.5)
    state = router.state()
    router.close()
    return state


def test_a_damaged_snapshot_is_skipped_for_the_one_before_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.db"
    state = _traffic(path, 35, CONFIG["experts"])
    with contextlib.closing(sqlite3.connect(path)) as db:
        seqs = [s for (s,) in db.execute("SELECT seq FROM snapshots ORDER BY seq")]
        assert len(seqs) == 2
        (raw,) = db.execute("SELECT router FROM snapshots WHERE seq = ?", (seqs[1],)).fetchone()
        damaged = raw.replace('"applied":', '"applied":1', 1)  # a digit more, checksum kept
        assert damaged != raw
        db.execute("UPDATE snapshots SET router = ? WHERE seq = ?", (damaged, seqs[1]))
        db.commit()
    with caplog.at_level("WARNING", logger="msroute.router"):
        reopened = Router.open(path)
    assert "HMAC does not match" in caplog.text and "not used" in caplog.text
    assert reopened._snap_seq == seqs[0]  # the one before it, then the events after it
    assert reopened.state() == state
    reopened.close()


def resign(db: sqlite3.Connection, seq: int, st: dict[str, Any]) -> None:
    """Store ``st`` as the router state of snapshot ``seq``, its HMAC recomputed with the
    journal's key (what only someone holding the journal's meta can do)."""
    from msroute.router.snapshots import snapshot_state

    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    (policy,) = db.execute("SELECT policy FROM snapshots WHERE seq = ?", (seq,)).fetchone()
    fields = {k: v for k, v in st.items() if k not in ("format", "hmac")}
    signed = snapshot_state(
        bytes.fromhex(meta["snapshot_key"]), meta["run_id"], seq, policy, **fields
    )
    db.execute("UPDATE snapshots SET router = ? WHERE seq = ?", (json.dumps(signed), seq))


def _forged(st: dict[str, Any], change: str) -> None:
    """Change one thing of a snapshot's router state (its checksum is recomputed after)."""
    if change == "counters":
        st["counters"]["applied"] += 1
    elif change == "negative n":
        st["counters"]["n"] = -5
    elif change == "cost_sum":
        st["cost_sum"] = [float("nan")]
    elif change == "costs":
        st["costs"][0] = [-1.0]
    elif change == "ids":
        st["ids"] = st["ids"][::-1]
    elif change == "duplicate ids":
        st["ids"][1] = st["ids"][0]
    elif change == "seed":
        st["config"]["seed"] += 1
    elif change == "policy":
        st["config"]["policy"] = "greedy"
    elif change == "bounds":
        st["config"]["constraints"]["upper"]["usd"] = 5.0
    elif change == "configured cost":
        st["config"]["experts"]["a"] = [0.5]


@pytest.mark.parametrize(
    "change",
    [
        "counters",
        "negative n",
        "cost_sum",
        "costs",
        "ids",
        "duplicate ids",
        "seed",
        "policy",
        "bounds",
        "configured cost",
        "other policy",
    ],
)
def test_a_snapshot_its_journal_could_not_have_made_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    """A snapshot whose contents were changed and its HMAC recomputed with the journal's own
    key (or whose policy is another journal's) is checked like constructor arguments: it is
    skipped for the one before it, and the state is the one the events give."""
    path, other = tmp_path / "j.db", tmp_path / "other.db"
    _traffic(path, 25, CONFIG["experts"])
    _traffic(other, 25, {"a": [0.05], "b": [0.001], "c": [0.02]})
    replayed = Router.open(path, use_snapshot=False)  # the state the events give
    state = replayed.state()
    replayed.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        seqs = [s for (s,) in db.execute("SELECT seq FROM snapshots ORDER BY seq")]
        if change == "other policy":
            with contextlib.closing(sqlite3.connect(other)) as o:
                (blob,) = o.execute(
                    "SELECT policy FROM snapshots WHERE seq = ?", (seqs[1],)
                ).fetchone()
            db.execute("UPDATE snapshots SET policy = ? WHERE seq = ?", (blob, seqs[1]))
        (raw,) = db.execute("SELECT router FROM snapshots WHERE seq = ?", (seqs[1],)).fetchone()
        st = json.loads(raw)
        _forged(st, change)
        resign(db, seqs[1], st)
        db.commit()
    with caplog.at_level("WARNING", logger="msroute.router"):
        reopened = Router.open(path)
    assert "not used" in caplog.text, change
    assert reopened._snap_seq == seqs[0]
    assert reopened.state() == state
    reopened.close()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ("cost", r"re-derives with cost \[0\.5\], the journal has \[0\.03\]"),
        (
            "reward_max",
            r"reward: 0\.5 is not in \[reward_min, reward_max\] = \[0, 0\.4\]",
        ),
    ],
)
def test_a_replay_checks_decisions_and_rewards_against_the_configuration(
    tmp_path: Path, edit: str, match: str
) -> None:
    """A journal whose recorded configuration was edited (an expert's cost, the reward range)
    no longer re-derives its events: opening it is refused, naming the event."""
    path = tmp_path / "j.db"
    router = Router({**CONFIG, "snapshot_every": 1000}, journal=path)
    for _ in range(4):
        d = router.route(eligible=["a"])
        router.feedback(d.decision_id, 0.5)
    router.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        (raw,) = db.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()
        cfg = json.loads(raw)
        if edit == "cost":
            cfg["experts"]["a"] = [0.5]
        else:
            cfg["reward_max"] = 0.4
        db.execute("UPDATE meta SET value = ? WHERE key = 'config'", (json.dumps(cfg),))
        db.commit()
    with pytest.raises(JournalError, match=match):
        Router.open(path)


def test_the_newest_snapshot_is_used_whatever_closed_the_pending_decisions(
    tmp_path: Path, clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """Decisions closed by a feedback, an expiry and an expert's removal before the snapshot:
    recovery finds exactly the pending ones again from the newest snapshot (a wrong count
    would fall back to an older snapshot, hiding the fault behind a slower recovery)."""
    path = tmp_path / "j.db"
    config = {**CONFIG, "experts": {**CONFIG["experts"], "d": [0.005]}, "snapshot_every": 1000}
    live = Router(config, journal=path)
    for i in range(12):
        d = live.route(decision_id=f"q{i}")
        if i % 4 == 1:
            live.feedback(d.decision_id, 0.5)
    clock[0] += CONFIG["feedback_ttl_s"] + 1.0
    routed = [live.route(decision_id=f"r{i}") for i in range(6)]  # expires the q's
    live.route(decision_id="held", eligible=["d"])
    live.remove_expert("d")  # closes "held" (and any r that drew d)
    fresh = [d.decision_id for d in routed if "d" not in d.team]
    live.snapshot()
    state = live.state()
    assert fresh and state["pending"] == len(fresh) and state["expired"] > 0
    live.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        (newest,) = db.execute("SELECT max(seq) FROM snapshots").fetchone()
    with caplog.at_level("WARNING", logger="msroute.router"):
        reopened = Router.open(path)
    assert "not used" not in caplog.text
    assert reopened._snap_seq == newest and reopened.state() == state
    assert reopened.feedback("held", 0.5) == "expert_removed"
    assert reopened.feedback("q0", 0.5) == "late"
    assert reopened.feedback(fresh[0], 0.5) == "applied"
    reopened.close()


def test_a_decision_that_expired_before_an_older_one_is_not_found_pending(
    tmp_path: Path, clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """With a shorter feedback_ttl_s configured in between, a newer decision expires before
    an older one: the newest snapshot still finds exactly the older one pending."""
    path = tmp_path / "j.db"
    live = Router({**CONFIG, "snapshot_every": 1000}, journal=path)
    live.route(decision_id="old")  # deadline in 60 s
    live.reconfigure({**CONFIG, "snapshot_every": 1000, "feedback_ttl_s": 10.0})
    live.route(decision_id="new")  # deadline in 10 s
    clock[0] += 20.0
    assert live.expire() == 1
    live.snapshot()
    state = live.state()
    assert state["pending"] == 1
    live.close()
    with caplog.at_level("WARNING", logger="msroute.router"):
        reopened = Router.open(path)
    assert "not used" not in caplog.text and reopened._snap_seq > 0
    assert reopened.state() == state
    assert reopened.feedback("new", 0.5) == "late"
    assert reopened.feedback("old", 0.5) == "applied"
    reopened.close()
