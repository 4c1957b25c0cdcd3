"""What reaches a journal is checked where it enters, and what a journal holds is checked when it
is read back (issue 44).

- A string the journal cannot store (a lone surrogate: not UTF-8) is refused by the call that
  takes it, naming the argument (a decision id, an expert id, a configuration's names), before
  anything is written: inside a group the other calls commit (at "normal" the encoding error
  came at the COMMIT and rolled the whole group back). A feedback for such an id is for an
  unknown decision.
- Journal positions and row limits beyond SQLite's integers (2^63 and more) read as "none
  after" and "no limit" (a raw OverflowError before).
- A journal row the live router could not have written (a feedback or expiry of an unknown
  decision, an expert added twice or removed while absent, a payload without its fields, a
  configure event setting a fixed key), or a column edited into a value the journal never
  writes (a payload that is not a JSON object, a time that is not a number), refuses the
  journal with a JournalError naming the journal and the event.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from msroute.errors import (
    InvalidFeedbackError,
    JournalError,
    RouterConfigError,
    UnknownDecisionError,
)
from msroute.router import Router
from test_journal_tail import _crash

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 3,
    "snapshot_every": 1000,
    "experts": {"a": [0.03], "b": [0.002], "c": [0.01]},
    "constraints": {"upper": {"usd": 0.04}},
}

LONE = "id\ud800"


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_a_lone_surrogate_is_refused_where_it_enters(tmp_path: Path, sync: str) -> None:
    router = Router({**CONFIG, "journal_sync": sync}, journal=tmp_path / "j.db")
    escaped = "'id\\\\ud800' is not UTF-8 text"
    calls = [
        (lambda: router.route(decision_id=LONE), InvalidFeedbackError, f"decision_id: {escaped}"),
        (lambda: router.add_expert(LONE, [0.01]), InvalidFeedbackError, f"expert_id: {escaped}"),
        (lambda: router.feedback(LONE, 0.5), UnknownDecisionError, "unknown decision"),
    ]
    for call, error, match in calls:
        with pytest.raises(error, match=match) as caught:
            call()
        str(caught.value).encode()  # the message itself can be printed as UTF-8
    for key, value in [
        ("cost_names", ["usd", LONE]),
        ("contexts", [LONE]),
        ("experts", {**CONFIG["experts"], LONE: [0.01]}),
        ("name", LONE),
    ]:
        with pytest.raises(RouterConfigError, match="not UTF-8 text"):
            router.reconfigure({**CONFIG, key: value})
        with pytest.raises(RouterConfigError, match="not UTF-8 text"):
            Router({**CONFIG, key: value})
    assert router.writable and router.state()["decisions"] == 0
    router.close()


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_a_lone_surrogate_in_a_group_fails_its_call_only(tmp_path: Path, sync: str) -> None:
    path = tmp_path / "j.db"
    router = Router({**CONFIG, "journal_sync": sync}, journal=path)
    with router.group():
        router.route(decision_id="before")
        with pytest.raises(InvalidFeedbackError):
            router.add_expert(LONE, [0.01])
        with pytest.raises(InvalidFeedbackError):
            router.route(decision_id=LONE)
        router.route(decision_id="after")
    assert router.writable and router.expert_ids == ["a", "b", "c"]
    _crash(router)
    reopened = Router.open(path)
    assert [e["ref"] for e in reopened.decisions_since()] == ["before", "after"]
    reopened.close()


@pytest.mark.parametrize("journal", ["memory", "full", "normal"])
def test_positions_beyond_sqlites_integers(tmp_path: Path, journal: str) -> None:
    config = CONFIG if journal == "memory" else {**CONFIG, "journal_sync": journal}
    router = Router(config, journal=None if journal == "memory" else tmp_path / "j.db")
    for i in range(5):
        router.route(decision_id=f"q{i}")
    every = router.decisions_since()
    rows = router.export_rows()
    assert len(every) == len(rows) == 5
    for huge in (2**63 - 1, 2**63, 2**64, 10**30):
        assert router.decisions_since(huge) == router.export_rows(huge) == []
        assert router.decisions_since(0, huge) == every
        assert router.export_rows(0, huge) == rows
        assert router.decisions_since(2, huge) == every[2:]
    router.close()


def _journal(path: Path) -> str:
    """A closed journal of three events (a decision, its feedback, a decision): the first
    decision's id."""
    router = Router(CONFIG, journal=path)
    first = router.route().decision_id
    router.feedback(first, 0.5)
    router.route()
    router.close()
    return first


@pytest.mark.parametrize(
    ("kind", "ref", "payload", "match"),
    [
        ("feedback", "nope", {"reward": 0.5, "cost": None, "status": "late"}, "unknown decision"),
        ("feedback", "FIRST", {"cost": None, "status": "applied"}, "payload has no 'reward'"),
        ("expire", "nope", {"reward": None}, "expires but is not pending"),
        ("add_expert", "a", {"cost": [0.1]}, "already an expert"),
        ("add_expert", "z", {"cost": "x"}, "cost: must be a list"),
        ("remove_expert", "zz", {"expired": []}, "removes 'zz'"),
        ("configure", None, {"seed": 4}, r"sets \['seed'\]"),
        ("set_bounds", None, {"upper": {"usd": -1.0}, "lower": {}}, "infeasible"),
        ("decision", "q", {"n": 2}, "payload has no"),
    ],
)
def test_a_bogus_row_is_refused_naming_the_journal_and_the_event(
    tmp_path: Path, kind: str, ref: str | None, payload: Any, match: str
) -> None:
    path = tmp_path / "j.db"
    first = _journal(path)
    ref = first if ref == "FIRST" else ref
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(
            "INSERT INTO events(seq, kind, ref, time, payload) VALUES (4, ?, ?, 0, ?)",
            (kind, ref, json.dumps(payload)),
        )
        db.commit()
    named = f"{path}: event 4 \\({kind}{'' if ref is None else f' {ref!r}'}\\): .*{match}"
    for use_snapshot in (True, False):
        with pytest.raises(JournalError, match=named):
            Router.open(path, use_snapshot=use_snapshot)
    shutil.copy(path, tmp_path / "copy.db")  # refused, not changed: it opens without the row
    with contextlib.closing(sqlite3.connect(tmp_path / "copy.db")) as db:
        db.execute("DELETE FROM events WHERE seq = 4")
        db.commit()
    Router.open(tmp_path / "copy.db").close()


@pytest.mark.parametrize(
    "edit",
    [
        "payload = 'not json'",
        "payload = '[1, 2]'",
        "payload = x'ff00'",
        "time = 'noon'",
        "probs = 'text'",
    ],
)
def test_a_row_edited_into_what_no_journal_writes_is_refused_naming_it(
    tmp_path: Path, edit: str
) -> None:
    """A column of ``events`` edited by hand into a value the journal never writes (a payload
    that is not a JSON object, a time that is not a number, a distribution that is not bytes)
    is a JournalError naming the journal and the event (a raw JSON or conversion error
    before)."""
    path = tmp_path / "j.db"
    _journal(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(f"UPDATE events SET {edit} WHERE seq = 3")
        db.commit()
    named = f"{path}: event 3: not an event the journal wrote"
    with pytest.raises(JournalError, match=named):
        Router.open(path, use_snapshot=False)
