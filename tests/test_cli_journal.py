"""``msroute journal``: export rows in the API's names (checked against their JSON Schema), CSV with
a column per field, evaluate's output is JSON (no NaN) and refuses a candidate naming no expert,
replay tells a held journal from a mismatch."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from msroute.cli import main
from msroute.router import Router
from msroute.router.rows import ROW_KINDS, export_rows, flatten_row, row_schema

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd", "gpu"],
    "contexts": ["a", "b"],
    "seed": 3,
    "feedback_ttl_s": 3600,
    "reward_max": 1.0,
    "experts": {"big": [0.03, 1.0], "mid": [0.01, 0.5], "small": [0.002, 0.0]},
    "constraints": {"upper": {"usd": 0.03}},
}


def _strict_json(text: str) -> Any:
    """Parse JSON as a strict parser does: NaN and Infinity are not JSON."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """A journal with every kind of event but configure: decisions (with and without an
    eligible set), feedback (with a reported cost, and late), a cost report, an expiry, an
    expert added, one repriced and one removed, bounds changed."""
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    ids = [router.route(context="a", decision_id=f"q{i}").decision_id for i in range(6)]
    router.route(context="b", eligible=["mid", "small"], decision_id="e0")
    router.feedback("q0", 0.5)
    router.feedback("q1", 1.0, cost={"usd": 0.02})
    assert router.report_cost("q3", {"usd": 0.04}) == "applied"
    router.add_expert("tiny", {"usd": 0.001, "gpu": 0.0})
    router.route(context="b", decision_id="after-add")
    router.set_expert_cost("mid", {"usd": 0.009})
    router.set_bounds(upper={"usd": 0.025}, lower={"gpu": None})
    router.expire(now=1e12)  # every pending decision is past its deadline
    router.feedback(ids[2], 0.3)  # late
    router.remove_expert("big")
    router.route(context="a", decision_id="after-remove")
    router.close()
    return path


def _export(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main(["journal", "export", str(path), *extra]) == 0
    out: str = capsys.readouterr().out
    return out


def test_export_rows_use_the_api_names_and_match_the_schema(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [_strict_json(line) for line in _export(journal, capsys).splitlines()]
    validator = jsonschema.Draft202012Validator(row_schema())
    for row in rows:
        validator.validate(row)
    kinds = {row["kind"] for row in rows}
    assert kinds == set(ROW_KINDS) - {"configure"}
    first = rows[0]
    assert first["decision_id"] == "q0" and "ref" not in first and "probs" not in first
    assert set(first["cost"]) == {"usd", "gpu"}
    # The pacer may narrow the first decisions (the budget must hold from the first one on).
    assert len(first["propensities"]) >= 2 and set(first["propensities"]) <= {"big", "mid", "small"}
    assert math.isclose(sum(first["propensities"].values()), 1.0)
    assert first["draw_propensities"] == [first["propensities"][d] for d in first["draws"]]
    eligible = next(r for r in rows if r["decision_id"] == "e0")
    assert eligible["eligible"] == ["mid", "small"] and set(eligible["propensities"]) <= {
        "mid",
        "small",
    }
    after = next(r for r in rows if r.get("decision_id") == "after-add" and r["kind"] == "decision")
    assert "tiny" in after["propensities"]  # the layout after the expert was added
    last = rows[-1]
    assert last["decision_id"] == "after-remove" and set(last["propensities"]) == {
        "mid",
        "small",
        "tiny",
    }  # and after one was removed (a bounds change keeps the layout)
    assert math.isclose(sum(last["propensities"].values()), 1.0)
    repriced = next(r for r in rows if r["kind"] == "set_cost")
    assert repriced["expert_id"] == "mid" and repriced["cost"] == {"usd": 0.009, "gpu": 0.5}
    reported = next(r for r in rows if r["kind"] == "feedback" and r["decision_id"] == "q1")
    assert reported["cost"] == {"usd": 0.02, "gpu": pytest.approx(reported["cost"]["gpu"])}
    booked = next(r for r in rows if r["kind"] == "cost")
    assert booked["decision_id"] == "q3" and booked["cost"]["usd"] == 0.04
    assert booked["status"] == "applied"
    assert next(r for r in rows if r["kind"] == "add_expert")["cost"] == {"usd": 0.001, "gpu": 0.0}
    assert next(r for r in rows if r["kind"] == "set_bounds")["upper"]["usd"] == 0.025


def test_the_schema_refuses_the_journal_names(journal: Path) -> None:
    """The schema can fail: a row in the journal's own shape is not an export row."""
    validator = jsonschema.Draft202012Validator(row_schema())
    jsonschema.Draft202012Validator.check_schema(row_schema())
    bad = {"seq": 1, "kind": "decision", "time": 0.0, "ref": "q0", "probs": [0.5], "cost": [1.0]}
    assert not validator.is_valid(bad)
    good = next(
        export_rows(
            [(1, "feedback", "q0", 0.0, {"reward": 1.0, "cost": None, "status": "applied"}, None)],
            {"cost_names": ["usd"], "experts": {"a": [1.0]}},
        )
    )
    assert validator.is_valid(good)
    assert not validator.is_valid({**good, "reward": "1.0"})


def test_csv_has_one_column_per_field(journal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [_strict_json(line) for line in _export(journal, capsys).splitlines()]
    table = list(csv.DictReader(io.StringIO(_export(journal, capsys, "--format", "csv"))))
    assert len(table) == len(rows)
    header = list(table[0])
    assert header[:5] == ["seq", "kind", "time", "decision_id", "expert_id"]
    assert {"cost.usd", "cost.gpu", "propensities.big", "draws.1", "draws.2"} <= set(header)
    assert "payload" not in header and "cost" not in header and "propensities" not in header
    for row, line in zip(rows, table, strict=True):
        for key, value in flatten_row(row).items():
            cell = line[key]
            if value is None:
                assert cell == ""
            elif isinstance(value, float):
                assert float(cell) == value  # full precision
            else:
                assert cell == str(value)


def test_evaluate_prints_json_without_nan(
    tmp_path: Path, journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"mid": 0.5, "small": 0.5}))
    # A handful of decisions: refused by default, given with --min-ess 0.
    assert main(["journal", "evaluate", str(journal), "--q", str(q)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "effective sample size" in err and "Traceback" not in err
    assert main(["journal", "evaluate", str(journal), "--q", str(q), "--min-ess", "0"]) == 0
    out = _strict_json(capsys.readouterr().out)
    assert out["n"] >= 1 and out["ips"]["reward"]["value"] is not None


@pytest.mark.parametrize(
    ("candidate", "named"),
    [
        ({"gpt-9": 1.0}, "['gpt-9'] are not experts of the log"),
        ({"\ud800": 1.0}, "are not experts of the log"),
        ({"big": 0.0, "nobody": 1.0}, "['nobody'] are not experts"),
        ({"mid": 0.5, "smal": 0.5}, "['smal'] are not experts"),  # a typo is not ignored
        ({"big": 0.0}, "probabilities must sum to 1"),
        ([0.5, 0.5], "must be a JSON object"),
    ],
)
def test_evaluate_refuses_a_candidate_that_names_no_expert(
    tmp_path: Path,
    journal: Path,
    capsys: pytest.CaptureFixture[str],
    candidate: Any,
    named: str,
) -> None:
    q = tmp_path / "q.json"
    q.write_text(json.dumps(candidate))
    assert main(["journal", "evaluate", str(journal), "--q", str(q)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and named in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"mid": 1' + "0" * 5000 + "}", "not JSON: 'Exceeds the limit (4300 digits)"),
        ('{"mid": 1' + "0" * 400 + ', "small": 0}', "got <an integer of 401 digits>"),
        ('{"mid": 1e999, "small": 0}', "candidate_q['mid']: must be a finite probability"),
        ('{"mid": 0.7, "mid": 0.3, "small": 0.7}', "not JSON: \"the key 'mid' appears twice"),
        ('{"mid": true, "small": 0}', "candidate_q['mid']: must be a finite probability"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_evaluate_refuses_a_candidate_file_it_cannot_read_as_numbers(
    tmp_path: Path, journal: Path, capsys: pytest.CaptureFixture[str], text: str, named: str
) -> None:
    q = tmp_path / "q.json"
    q.write_text(text)
    assert main(["journal", "evaluate", str(journal), "--q", str(q)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and named in err and "Traceback" not in err
    assert len(err) < 500
    assert main(["journal", "evaluate", str(journal), "--q", str(tmp_path)]) == 2
    assert f"--q {tmp_path}: cannot read it" in capsys.readouterr().err


def test_csv_writes_text_that_begins_like_a_formula_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "f.db"
    experts = {"=1+2": [0.01, 0.0], "-2+3": [0.02, 1.0], "@SUM(A1)": [0.0, 0.0]}
    router = Router({**CONFIG, "contexts": None, "experts": experts}, journal=path)
    for i in range(5):
        router.feedback(router.route(decision_id=f"=cmd{i}").decision_id, 0.5)
    router.close()
    text = _export(path, capsys, "--format", "csv")
    table = list(csv.reader(io.StringIO(text)))
    cells = {cell for row in table for cell in row}
    assert {"'=cmd0", "'=1+2"} <= cells  # a decision id and an expert id (a draw)
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells), sorted(cells)
    assert "propensities.=1+2" in table[0]  # a header: its field name comes first


def test_export_never_writes_over_the_journal(
    tmp_path: Path, journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = journal.read_bytes()
    for out in (journal, tmp_path / "." / journal.name, tmp_path / f"{journal.name}-tail"):
        assert main(["journal", "export", str(journal), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "is the journal itself" in err and err.count("\n") == 1
    assert journal.read_bytes() == before
    rows = tmp_path / "j.db.jsonl"  # a name that starts with the journal's is fine
    assert main(["journal", "export", str(journal), "--out", str(rows)]) == 0
    assert rows.read_text() == _export(journal, capsys)


def test_replay_of_a_held_journal_says_so(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Router.open(journal):
        assert main(["journal", "replay", str(journal)]) == 2
    err = capsys.readouterr().err
    assert "in use" in err and "MISMATCH" not in err and err.count("\n") == 1
    assert main(["journal", "replay", str(journal)]) == 0  # released: it replays


def test_a_file_that_is_not_a_journal_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "not.db"
    path.write_bytes(bytes(range(256)) * 64)
    for action in ("replay", "export"):
        assert main(["journal", action, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and str(path) in err


def test_schema_action_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["journal", "schema"]) == 0
    assert _strict_json(capsys.readouterr().out) == row_schema()


def test_a_decision_row_holds_what_the_api_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each decision's row has the fields of its API answer with the same values, across
    expert and bounds changes (which change the layout a distribution is stored in)."""
    path = tmp_path / "j.db"
    router = Router(CONFIG, journal=path)
    answered = [router.route(context="a").to_dict()]
    router.add_expert("tiny", {"usd": 0.001, "gpu": 0.0})
    answered.append(router.route(context="b", eligible=["tiny", "mid"]).to_dict())
    router.set_bounds(upper={"usd": 0.02})
    answered.append(router.route(context="a").to_dict())
    router.remove_expert("big")
    answered += [router.route(context="b").to_dict() for _ in range(3)]
    router.close()
    rows = [json.loads(line) for line in _export(path, capsys).splitlines()]
    decisions = [r for r in rows if r["kind"] == "decision"]
    assert len(decisions) == len(answered)
    for row, api in zip(decisions, answered, strict=True):
        assert {key: row[key] for key in api} == api


def test_export_rows_of_a_router_evaluate_as_its_journal(journal: Path) -> None:
    import msroute

    candidate = {"mid": 0.5, "small": 0.25, "tiny": 0.25}
    with Router.open(journal) as router:
        rows = router.export_rows(0, 10_000)
        expected = msroute.evaluate(router, candidate, min_ess=0).to_dict()
    assert rows == list(export_rows(_events(journal), _config(journal)))
    assert msroute.evaluate(rows, candidate, min_ess=0).to_dict() == expected


def _events(path: Path) -> list[Any]:
    from msroute.router.journal import Journal

    journal = Journal(path, create=False)
    try:
        return list(journal.events())
    finally:
        journal.close()


def _config(path: Path) -> dict[str, Any]:
    from msroute.router.journal import Journal

    journal = Journal(path, create=False)
    try:
        config: dict[str, Any] = json.loads(journal.meta("config"))
        return config
    finally:
        journal.close()
