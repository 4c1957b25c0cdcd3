"""The range of costs and bounds, ``|x| <= COST_MAX = 1e12`` in the cost's unit, checked at every
entry point (docs/budgets.md, "The range of costs and bounds"): a number outside it is refused
naming the key, field or cell; one at its end is taken, and a router fed back at its limits keeps
finite sums and snapshots."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute._validation import COST_MAX
from msroute.cli import main
from msroute.datasets.outcomes import OutcomeTable, read_outcomes
from msroute.errors import (
    DataFormatError,
    InvalidFeedbackError,
    InvalidValueError,
    RouterConfigError,
)
from msroute.policies.registry import POLICIES, make_policy
from msroute.router import Router, RouterConfig

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 0,
    "experts": {"big": [0.03], "small": [0.002]},
    "constraints": {"upper": {"usd": 0.04}},
}

OUTSIDE = r"is outside the range of costs and bounds, \[-1e\+12, 1e\+12\]"


def _with(**changes: Any) -> dict[str, Any]:
    return {**CONFIG, **changes}


def _router() -> Router:
    return Router(CONFIG)


def _feedback(cost: dict[str, float]) -> None:
    router = _router()
    router.feedback(router.route().decision_id, 0.5, cost)


def _table(cost: float) -> OutcomeTable:
    return OutcomeTable(
        prompt_ids=("p1",),
        categories=("all",),
        category=np.zeros(1, dtype=np.int64),
        models=("a",),
        dims=("score",),
        scores=np.ones((1, 1, 1)),
        cost_names=("usd",),
        costs=np.full((1, 1, 1), cost),
    )


#: (what is called, the error, what the message names): one row per entry point and value.
REFUSED: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    (
        "Constraints upper",
        lambda: Constraints(upper=[1e308]),
        InvalidValueError,
        r"upper\[0\]: 1e\+308 ",
    ),
    (
        "Constraints lower",
        lambda: Constraints(lower=[-1e13]),
        InvalidValueError,
        r"lower\[0\]: -1e\+13 ",
    ),
    (
        "Problem costs",
        lambda: Problem([[1.0], [1e300]], 1, Constraints(upper=[None])),
        InvalidValueError,
        r"costs\[1, 0\]: 1e\+300 ",
    ),
    (
        "Problem cbar",
        lambda: Problem([[1.0]], 1, Constraints(upper=[None]), cbar=2e12),
        InvalidValueError,
        r"cbar: 2e\+12 ",
    ),
    (
        "config expert",
        lambda: RouterConfig.from_dict(_with(experts={"big": [1e300], "small": [1.0]})),
        RouterConfigError,
        r"experts\.big\.usd: 1e\+300 ",
    ),
    (
        "config upper bound (named params before)",
        lambda: RouterConfig.from_dict(_with(constraints={"upper": {"usd": 1e308}})),
        RouterConfigError,
        r"constraints\.upper\.usd: 1e\+308 ",
    ),
    (
        "config lower bound",
        lambda: RouterConfig.from_dict(_with(constraints={"lower": {"usd": -1e300}})),
        RouterConfigError,
        r"constraints\.lower\.usd: -1e\+300 ",
    ),
    (
        "Router.add_expert",
        lambda: _router().add_expert("huge", [1e300]),
        InvalidFeedbackError,
        r"cost\.usd: 1e\+300 ",
    ),
    (
        "Router.set_bounds upper (a raw scipy error before)",
        lambda: _router().set_bounds(upper={"usd": 1e308}),
        InvalidFeedbackError,
        r"upper\.usd: 1e\+308 ",
    ),
    (
        "Router.set_bounds lower",
        lambda: _router().set_bounds(lower={"usd": -1.5e12}),
        InvalidFeedbackError,
        r"lower\.usd: -1\.5e\+12 ",
    ),
    (
        "Router.feedback cost",
        lambda: _feedback({"usd": 1e300}),
        InvalidFeedbackError,
        r"cost\.usd: 1e\+300 ",
    ),
    (
        "outcome table cell",
        lambda: read_outcomes("prompt_id,a,a|usd\np1,1,1e308\n", "t.csv"),
        DataFormatError,
        r"t\.csv, line 2, column 'a\|usd': 1e\+308 ",
    ),
    (
        "outcome table, JSON Lines",
        lambda: read_outcomes(
            '{"prompt_id": "p1", "a": 1, "a|usd": 2e12}\n', "t.jsonl", jsonl=True
        ),
        DataFormatError,
        r"t\.jsonl, line 1, column 'a\|usd': 2e\+12 ",
    ),
    (
        "OutcomeTable",
        lambda: _table(1e300),
        InvalidValueError,
        r"costs must hold numbers in \[0, 1e\+12\]",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "named"), [row[1:] for row in REFUSED], ids=[row[0] for row in REFUSED]
)
def test_a_number_outside_the_range_is_refused_naming_it(
    call: Callable[[], object], error: type[Exception], named: str
) -> None:
    whole = named.startswith("costs must")  # OutcomeTable says it in its own words
    with pytest.raises(error, match=named if whole else named + OUTSIDE):
        call()


def test_the_end_of_the_range_is_taken_everywhere() -> None:
    assert Constraints(upper=[COST_MAX], lower=[-COST_MAX]).upper == (COST_MAX,)
    problem = Problem([[COST_MAX], [0.0]], 3, Constraints(upper=[COST_MAX]), cbar=COST_MAX)
    problem.check_feasible(0.0)  # the LP solves at the end of the range (HiGHS stops at 1e15)
    assert problem.max_floor() > 0
    router = Router(_with(experts={"big": [COST_MAX], "small": [0.0]}, constraints={}))
    router.add_expert("also-big", [COST_MAX])
    router.set_bounds(upper={"usd": COST_MAX}, lower={"usd": -COST_MAX})
    router.feedback(router.route().decision_id, 0.5, {"usd": COST_MAX})
    table = read_outcomes("prompt_id,a,a|usd\np1,1,1e12\n", "t.csv")
    assert table.costs.max() == COST_MAX


@pytest.mark.parametrize("policy", list(POLICIES))
def test_feedback_at_the_limit_keeps_sums_finite_and_snapshots(policy: str, tmp_path: Path) -> None:
    """Experts at the end of the range, every feedback at the most a cost may be: the sums stay
    finite (they overflowed to inf and NaN, and every snapshot was refused from then on)."""
    cfg = _with(
        policy=policy,
        m_draws=3,
        experts={"big": [COST_MAX], "mid": [COST_MAX / 2], "small": [0.0]},
        constraints={},
        snapshot_every=5,
    )
    path = tmp_path / "j.db"
    router = Router(cfg, journal=path)
    for _ in range(30):
        router.feedback(router.route().decision_id, 1.0, {"usd": COST_MAX})
    state = router.state()
    router.close()
    # Each decision is booked at its estimated cost, then replaced by the one fed back: the
    # average is COST_MAX up to the rounding of those replacements.
    assert math.isfinite(state["avg_cost"]["usd"])
    assert state["avg_cost"]["usd"] == pytest.approx(COST_MAX, rel=1e-12)
    json.dumps(state, allow_nan=False)  # what the service answers: no NaN, no null
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 1
    db.close()
    reopened = Router.open(path)
    assert reopened.state() == state
    reopened.close()


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_realized_cost_cap_agrees_with_the_range(policy: str) -> None:
    """What ``update`` takes is at most M experts at the end of the range, so a run's sum of
    realized costs over 2**63 decisions at the cap stays far below the float limit."""
    m = 4
    problem = Problem([[COST_MAX]] * m + [[1.0]], m, Constraints(upper=[None]))
    kwargs: dict[str, Any] = {"q": [0.2] * 5} if policy == "fixed" else {}
    pol = make_policy(policy, problem, horizon=10, seed=0, **kwargs)
    decision = pol.select()
    with pytest.raises(InvalidValueError, match=r"exceeds M = 4 times 1e\+12"):
        pol.update(decision, np.array([1.0]), np.array([[m * COST_MAX * 1.001]]))
    pol.update(decision, np.array([1.0]), np.array([[m * COST_MAX]]))  # a team at the limit
    assert m * COST_MAX * 2.0**63 < np.finfo(np.float64).max / 1e200


def test_bench_outcomes_with_costs_outside_the_range_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "big.csv"
    table.write_text("prompt_id,a,b,a|usd,b|usd\np1,1,0,1e308,1\np2,0,1,1e308,2\n")
    argv = ["bench", "--outcomes", str(table), "--quick", "--quiet", "--no-plot"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2  # an OverflowError traceback before
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert f"{table}, line 2, column 'a|usd': 1e+308 is outside the range" in err
