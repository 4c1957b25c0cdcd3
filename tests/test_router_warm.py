"""A router's warm_start = {table, strength}: applied, recorded, replayed, refused if changed."""

from __future__ import annotations

import csv
import hashlib
import json
import sqlite3
import warnings

import numpy as np
import pytest

from _router import decides_as_twin
from msroute.errors import JournalError, RouterConfigError
from msroute.router import Router
from msroute.router.config import DEFAULT_WARM_STRENGTH
from test_outcomes import write_csv
from test_warm_start import graded


def config(table_path, journal=None, **extra):
    cfg = {
        "policy": "omd",
        "m_draws": 1,
        "cost_names": ["usd"],
        "contexts": ["c0", "c1", "c2"],
        "experts": {f"m{i}": [p] for i, p in enumerate([1.0, 1.0, 1.0, 4.0])},
        "constraints": {"upper": {"usd": 1.6}},
        "warm_start": {"table": str(table_path), "strength": 30},
        "seed": 3,
        **extra,
    }
    if journal is not None:
        cfg["journal"] = str(journal)
    return cfg


def traffic(router, n, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        d = router.route(context=f"c{rng.integers(3)}")
        router.feedback(d.decision_id, float(rng.random() < 0.7))


def test_a_router_starts_from_its_table_and_replays_exactly(tmp_path):
    table = tmp_path / "eval.csv"
    write_csv(table, graded(0, 600))
    router = Router(config(table, tmp_path / "r.db", snapshot_every=50))
    assert router.policy.prior.on
    state = router.state()
    assert state["decisions"] == 0 and all(v == 0 for v in state["spent"].values())
    # The table's routing: each context on its best model the budget allows (never uniform).
    assert np.all(router.policy.q[0].max(axis=1) > 0.5)
    traffic(router, 120)
    router.close()
    db = sqlite3.connect(tmp_path / "r.db")
    (raw,) = db.execute("SELECT value FROM meta WHERE key = 'warm_start'").fetchone()
    db.close()
    record = json.loads(raw)
    assert record["strength"] == 30 and record["table"] == str(table)
    assert record["sha256"] == hashlib.sha256(table.read_bytes()).hexdigest()
    twin = Router(config(table, tmp_path / "twin.db", snapshot_every=50))
    traffic(twin, 120)
    decides_as_twin(tmp_path / "r.db", twin, 30, context="c1")


def test_a_changed_table_or_a_bad_one_is_refused(tmp_path):
    table = tmp_path / "eval.csv"
    write_csv(table, graded(1, 300))
    Router(config(table, tmp_path / "r.db")).close()
    write_csv(table, graded(2, 300))
    with pytest.raises(JournalError, match="has changed since this router was created"):
        Router.open(tmp_path / "r.db")
    cfg = config(table)
    cfg["experts"] = {**cfg["experts"], "m7": [1.0]}
    with pytest.raises(RouterConfigError, match=r"no column for model.*'m7'"):
        Router(cfg)
    with pytest.raises(RouterConfigError, match="cannot start from a table"):
        Router(config(table, policy="cbwk"))
    with pytest.raises(RouterConfigError, match="not among the router's contexts"):
        Router(config(table, contexts=["c0", "c1"]))
    with pytest.raises(RouterConfigError, match=r"warm_start\.strength: must be >= 0"):
        Router({**config(table), "warm_start": {"table": str(table), "strength": -1}})
    with pytest.raises(RouterConfigError, match=r"warm_start\.anchor: must be true or false"):
        Router({**config(table), "warm_start": {"table": str(table), "anchor": "yes"}})
    with pytest.raises(RouterConfigError, match=r"warm_start\.margin: must be true or false"):
        Router({**config(table), "warm_start": {"table": str(table), "margin": 1}})
    with pytest.raises(RouterConfigError, match=r"warm_start\.explored: must be true or false"):
        Router({**config(table), "warm_start": {"table": str(table), "explored": "no"}})
    with pytest.raises(RouterConfigError, match="cannot read"):
        Router(config(tmp_path / "absent.csv"))


def test_a_moved_table_is_read_where_the_reopening_configuration_says(tmp_path):
    table = tmp_path / "eval.csv"
    write_csv(table, graded(1, 300))
    router = Router(config(table, tmp_path / "r.db", snapshot_every=50))
    traffic(router, 80)
    state = router.state()
    router.close()
    moved = tmp_path / "moved" / "eval.csv"
    moved.parent.mkdir()
    table.rename(moved)
    with pytest.raises(JournalError, match=r"moved\? reopen with a configuration naming where"):
        Router.open(tmp_path / "r.db")
    # The same warm start, its table's new path: the same router, which goes on deciding.
    reopened = Router.open(tmp_path / "r.db", config=config(moved, snapshot_every=50))
    assert reopened.state() == state
    assert reopened.config.warm_start["table"] == str(table)  # the journal's record stays
    traffic(reopened, 20, seed=1)
    reopened.close()
    # Another table's bytes there, or another warm start with the new path, are refused.
    write_csv(moved, graded(2, 300))
    with pytest.raises(JournalError, match="has changed since this router was created"):
        Router.open(tmp_path / "r.db", config=config(moved))
    write_csv(moved, graded(1, 300))
    stronger = config(moved)
    stronger["warm_start"] = {"table": str(moved), "strength": 60}
    with pytest.raises(JournalError, match="its other warm_start settings as they were"):
        Router.open(tmp_path / "r.db", config=stronger)
    Router.open(tmp_path / "r.db", config=config(moved)).close()
    moved.rename(table)  # back in place, another strength is a change of a fixed key
    with pytest.raises(RouterConfigError, match=r"cannot change: warm_start"):
        Router.open(
            tmp_path / "r.db",
            config={**stronger, "warm_start": {"table": str(table), "strength": 60}},
        )


def test_a_toml_config_finds_its_table_next_to_it(tmp_path):
    write_csv(tmp_path / "eval.csv", graded(3, 300))
    (tmp_path / "router.toml").write_text(
        'policy = "omd"\nm_draws = 1\ncost_names = ["usd"]\ncontexts = ["c0", "c1", "c2"]\n'
        'journal = "r.db"\n[experts]\nm0 = [1.0]\nm1 = [1.0]\nm2 = [1.0]\nm3 = [4.0]\n'
        '[constraints]\nupper = { usd = 1.6 }\n[warm_start]\ntable = "eval.csv"\n'
    )
    router = Router.from_config(tmp_path / "router.toml")
    assert router.config.warm_start == {
        "table": str(tmp_path / "eval.csv"),
        "strength": DEFAULT_WARM_STRENGTH,
        "anchor": True,
        "margin": True,
        "explored": True,
    }
    assert router.policy.prior.on
    router.close()


@pytest.mark.parametrize(
    ("key", "part"), [("anchor", "anchor"), ("margin", "fade"), ("explored", "explored")]
)
def test_a_warm_start_setting_is_recorded_and_a_journal_without_it_replays_without_it(
    tmp_path, key, part
):
    table = tmp_path / "eval.csv"
    write_csv(table, graded(0, 600))
    router = Router(config(table, tmp_path / "new.db"))
    assert getattr(router.policy.prior, part).all()
    router.close()
    db = sqlite3.connect(tmp_path / "new.db")
    (raw,) = db.execute("SELECT value FROM meta WHERE key = 'warm_start'").fetchone()
    db.close()
    assert json.loads(raw)[key] is True
    # A journal written before the setting existed names none: it ran (and replays) without.
    settings = {"table": str(table), "strength": 30, key: False}
    reopened = _replayed_without(tmp_path, table, key, settings)
    assert not getattr(reopened.policy.prior, part).any()
    assert key == "anchor" or reopened.policy.prior.anchor.all()  # the others keep the anchor
    reopened.close()
    _decides_as_its_twin(tmp_path, table, settings)


def _replayed_without(tmp_path, table, key, settings):
    """A router run with ``settings`` (``key`` False) whose journal then loses ``key`` from its
    recorded configuration, as a journal written before ``key`` existed: reopened, it names
    ``key`` False."""
    router = Router(config(table, tmp_path / "old.db", snapshot_every=40, warm_start=settings))
    traffic(router, 100)
    router.close()
    db = sqlite3.connect(tmp_path / "old.db")
    for name in ("config", "warm_start"):
        (raw,) = db.execute("SELECT value FROM meta WHERE key = ?", (name,)).fetchone()
        entry = json.loads(raw)
        (entry["warm_start"] if name == "config" else entry).pop(key)
        db.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(entry), name))
    db.commit()
    db.close()
    reopened = Router.open(tmp_path / "old.db")
    assert reopened.config.warm_start is not None and reopened.config.warm_start[key] is False
    return reopened


def _decides_as_its_twin(tmp_path, table, settings):
    twin = Router(config(table, tmp_path / "twin.db", snapshot_every=40, warm_start=settings))
    traffic(twin, 100)
    decides_as_twin(tmp_path / "old.db", twin, 30, context="c1")


def _with_costs(path, table, costs):
    """``table`` written as a wide CSV whose cost columns are ``costs`` (name -> the factor
    of the table's usd), in that order."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["prompt_id", "category", *table.models]
            + [f"{m}|{c}" for c in costs for m in table.models]
        )
        for i in range(table.n_prompts):
            w.writerow(
                [table.prompt_ids[i], table.categories[table.category[i]], *table.scores[i, 0]]
                + [f * v for f in costs.values() for v in table.costs[i, :, 0]]
            )


def test_a_tables_costs_are_matched_to_the_routers_by_name(tmp_path):
    """A table's cost columns are read by the router's cost names, in any order; a table
    without one of them is refused, naming it (not read as that cost by its position)."""
    table = graded(0, 600)
    two = {
        "cost_names": ["usd", "gpu"],
        "experts": {f"m{i}": [p, 1.2 * p] for i, p in enumerate([1.0, 1.0, 1.0, 4.0])},
    }
    plans = []
    for name, costs in (
        ("in_order.csv", {"usd": 1.0, "gpu": 1.2}),
        ("swapped.csv", {"gpu": 1.2, "usd": 1.0}),
    ):
        _with_costs(tmp_path / name, table, costs)
        router = Router(config(tmp_path / name, **two))
        plans.append(router.policy.q.copy())
        router.close()
    np.testing.assert_array_equal(plans[0], plans[1])
    _with_costs(tmp_path / "tokens.csv", table, {"tokens": 1.0})
    with pytest.raises(
        RouterConfigError, match=r"no cost column for 'usd' \(MODEL\|usd; its costs: 'tokens'\)"
    ):
        Router(config(tmp_path / "tokens.csv"))
    write_csv(tmp_path / "usd.csv", table)
    with pytest.raises(RouterConfigError, match="no cost column for 'gpu'"):
        Router(config(tmp_path / "usd.csv", **two))


def test_a_huge_strength_routes_and_replays_without_a_warning(tmp_path):
    """A strength whose explored steps overflow a float (infinitely many: the floor at its
    least) routes and replays without numpy's overflow warning."""
    table = tmp_path / "eval.csv"
    write_csv(table, graded(0, 300))
    cfg = config(table, tmp_path / "r.db", snapshot_every=20)
    cfg["warm_start"] = {"table": str(table), "strength": 1e300}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        router = Router(cfg)
        traffic(router, 60)
        router.close()
        Router.open(tmp_path / "r.db", use_snapshot=False).close()
