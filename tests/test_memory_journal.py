"""The journal of a router without a file (``msroute.router.eventlog.MemoryJournal``).

- It gives its events back as the file journal does: the same kinds and payloads, sequences
  as lists, whatever the router keeps inside.
- An event holds what was decided: a caller that changes the lists of its routed decision
  changes nothing in the journal (the two shared the lists before).
- A long run's events are values the garbage collector stops tracking, so that they neither
  trigger full collections nor make them longer (about eight tracked objects a pair before).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from msroute.router import Router


def _config() -> dict[str, Any]:
    return {
        "policy": "omd",
        "m_draws": 2,
        "seed": 3,
        "cost_names": ["usd", "s"],
        "contexts": ["a", "b"],
        "experts": {"x": [0.1, 1.0], "y": [0.4, 2.0], "z": [1.0, 0.5]},
        "constraints": {"upper": {"usd": 0.6}},
    }


def _traffic(router: Router) -> None:
    """Decisions with and without contexts and masks, feedback with and without a cost, a
    cost report, a repeated feedback and a late one, and a change of bounds."""
    ids = []
    for t in range(60):
        eligible = ["x", "z"] if t % 7 == 0 else None
        d = router.route(context="ab"[t % 2], eligible=eligible)
        ids.append(d.decision_id)
        if t % 5 == 0:
            router.report_cost(d.decision_id, {"usd": 0.3, "s": 1.5})
        if t % 3 == 0:
            router.feedback(d.decision_id, t % 2, cost={"usd": 0.2, "s": 1.0})
        elif t % 3 == 1:
            router.feedback(d.decision_id, 0.5)
    router.feedback(ids[0], 0, cost={"usd": 0.2, "s": 1.0})  # a repeat: the same outcome
    router.set_bounds(upper={"usd": 0.5})
    router.route(context="a")


def _without_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events without what differs between two routers: ids, times, deadlines."""
    return [{k: v for k, v in e.items() if k not in ("ref", "time", "deadline")} for e in events]


def test_memory_and_file_journals_read_back_the_same_events(tmp_path: Path) -> None:
    memory, file = Router(_config()), Router(_config(), journal=tmp_path / "j.db")
    _traffic(memory)
    _traffic(file)
    got, want = memory.decisions_since(0, 10_000), file.decisions_since(0, 10_000)
    assert len(got) == len(want) > 100
    assert _without_ids(got) == _without_ids(want)
    decision = next(e for e in got if e["kind"] == "decision" and e["eligible"] is not None)
    for key in ("draws", "team", "probs", "cost", "eligible"):
        assert type(decision[key]) is list, key
    costed = next(e for e in got if e["kind"] == "feedback" and e["cost"] is not None)
    assert type(costed["cost"]) is list
    # Each read is a copy: changing one changes no later read.
    got[0]["draws"].append("x")
    assert memory.decisions_since(0, 1)[0]["draws"] == want[0]["draws"]
    bounds = next(e for e in got if e["kind"] == "set_bounds")
    bounds["upper"]["usd"] = 9.0
    again = next(e for e in memory.decisions_since(0, 10_000) if e["kind"] == "set_bounds")
    assert again["upper"] == {"usd": 0.5}
    assert memory.export_rows(0, 10_000) != [] and len(memory.export_rows(0, 10_000)) == len(got)


def test_a_caller_changing_its_routed_decision_leaves_the_journal_as_decided() -> None:
    router = Router(_config())
    d = router.route(context="a")
    team, draws = list(d.team), list(d.draws)
    d.team.append("z")
    d.draws.clear()
    event = router.decisions_since(0, 1)[0]
    assert (event["team"], event["draws"]) == (team, draws)
    router.feedback(d.decision_id, 1.0)  # the pending decision kept its draws too
    assert router.decisions_since(1, 1)[0]["status"] == "applied"


def test_a_long_run_leaves_the_collector_nothing_to_track() -> None:
    router = Router(_config())
    for t in range(200):
        d = router.route(context="ab"[t % 2])
        router.feedback(d.decision_id, 1.0)
    gc.collect()
    gc.collect()
    before = len(gc.get_objects())
    pairs = 2_000
    for t in range(pairs):
        d = router.route(context="ab"[t % 2])
        router.feedback(d.decision_id, float(t % 2))
    gc.collect()
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 0.1 * pairs, f"{grown / pairs:.2f} tracked objects kept a pair"
    assert len(router.decisions_since(0, 10_000)) == 2 * (pairs + 200)
