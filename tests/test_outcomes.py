"""Recorded outcome tables, the recorded-outcome environment and the outcome bench."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.cli import main
from msroute.datasets import outcomes
from msroute.datasets.outcomes import OutcomeTable, load_llmrouter, load_outcomes, read_outcomes
from msroute.errors import DataFormatError, InvalidValueError, ResourceError
from msroute.experiments.outcomes import (
    LLMROUTER_BUDGETS,
    OutcomeBenchConfig,
    budget_levels,
    default_budgets,
    load_table,
)
from msroute.experiments.output import write_csv as write_results_csv
from msroute.outcome_env import OutcomeEnv
from msroute.policies.registry import make_policy
from msroute.simulate import simulate

#: The format's example (docs/llm-routing.md shows the same five lines).
EXAMPLE = """prompt_id,category,small,large,small|usd,large|usd
p1,math,0,1,0.00012,0.0021
p2,math,1,1,0.00009,0.0018
p3,code,0,0,0.00020,0.0035
p4,code,1,1,0.00015,0.0029
"""


def test_the_example_table_reads_as_documented():
    t = read_outcomes(EXAMPLE, "ex.csv")
    assert t.prompt_ids == ("p1", "p2", "p3", "p4")
    assert t.categories == ("math", "code") and t.category.tolist() == [0, 0, 1, 1]
    assert t.models == ("small", "large") and t.dims == ("score",) and t.cost_names == ("usd",)
    np.testing.assert_array_equal(t.scores[:, 0], [[0, 1], [1, 1], [0, 0], [1, 1]])
    assert t.costs[2, 1, 0] == 0.0035
    assert t.best_single(0.0002, "usd")[0] == "small"
    assert t.best_single(None, "usd")[0] == "large"
    assert t.best_single(1e-6, "usd")[0] is None


def test_the_docs_page_shows_the_tested_example():
    page = (Path(__file__).parents[1] / "docs" / "llm-routing.md").read_text()
    assert EXAMPLE.strip() in page


def test_json_lines_read_like_csv(tmp_path):
    rows = list(csv.DictReader(EXAMPLE.splitlines()))
    path = tmp_path / "t.jsonl"
    lines = []
    for r in rows:
        obj: dict[str, object] = {"prompt_id": r["prompt_id"], "category": r["category"]}
        obj.update({k: float(v) for k, v in r.items() if k not in ("prompt_id", "category")})
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n")
    a, b = load_outcomes(path), read_outcomes(EXAMPLE, "x.csv")
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.costs, b.costs)
    assert a.categories == b.categories and a.models == b.models


def test_dimensions_and_no_category():
    text = "prompt_id,a:acc,a:style,b:acc,b:style,a|usd,b|usd\nq1,1,0,0,1,1,2\nq2,0,0,1,0.5,1,2\n"
    t = read_outcomes(text, "d.csv")
    assert t.dims == ("acc", "style") and t.categories == ("all",)
    env = OutcomeEnv(t, horizon=50, seed=3)
    problem = Problem(t.mean_costs(), 2, Constraints(upper=[None]))
    fixed_both = make_policy("fixed", problem, horizon=50, q=[0.5, 0.5], seed=0)
    traj = simulate({"f": fixed_both}, env, problem, 50)["f"]
    # A team of both models earns, per dimension, the best member's score: each round's
    # reward is the prompt's score of a alone, of b alone, or that sum of maxima.
    both = t.scores.max(axis=2).sum(axis=1)  # (P,)
    alone = t.scores.sum(axis=1)  # (P, K)
    prompts = env.prompts[:, 0]
    options = np.c_[alone[prompts], both[prompts]]  # (T, 3)
    rewards = traj.rewards[:, 0]
    assert np.all(np.isclose(options, rewards[:, None], rtol=0, atol=1e-12).any(axis=1))
    # q1: a alone 1, b alone 1, together max(1, 0) + max(0, 1) = 2.
    assert np.any((prompts == 0) & (rewards == 2.0))


BAD = [
    ("prompt_id,a,a|usd\np1,,1\n", r"bad\.csv, line 2, column 'a': the cell is blank"),
    ("prompt_id,a,a|usd\np1,nan,1\n", r"line 2, column 'a': nan is not a finite number"),
    ("prompt_id,a,a|usd\np1,1.5,1\n", r"line 2, column 'a': score 1.5 must be in \[0, 1\]"),
    ("prompt_id,a,a|usd\np1,1,-1\n", r"line 2, column 'a\|usd': cost -1 must be >= 0"),
    ("prompt_id,a,a|usd\np1,1,1\np1,0,1\n", r"line 3: prompt_id 'p1' repeats \(bad\.csv, line 2\)"),
    ("prompt_id,a,b|usd,a|usd\np1,1,1,1\n", r"cost column 'b\|usd' names model 'b'"),
    ("prompt_id,a,b,a|usd\np1,1,1,1\n", r"model 'b' has no cost column"),
    ("id,a,a|usd\np1,1,1\n", r"no 'prompt_id' column"),
    ("prompt_id,a,a|usd\np1,x,1\n", r"column 'a': expected a number, got 'x'"),
    ("prompt_id,a,a|usd\np1,1\n", r"line 2: expected 3 fields"),
    ("prompt_id,a,a|usd,a|s,b,b|usd\np1,1,1,1,1,1\n", r"model 'b' has no 'b\|s' column"),
    ("", r"is empty"),
    ("prompt_id,a,a|usd\np1,0_1,1\n", r"column 'a': expected a number, got '0_1'"),
    ("prompt_id,a,a|usd\np1,1,1\n,,\n", r"line 3, column 'prompt_id'"),  # blank cells all
    # only ASCII decimal numbers: float() reads the digits of every script
    ("prompt_id,a,a|usd\np1,1,\u0663\n", r"column 'a\|usd': expected a number, got '\u0663'"),
    ("prompt_id,a,a|usd\np1,\uff11,1\n", r"column 'a': expected a number, got '\uff11'"),
    ("prompt_id,a,a|usd\np1,1,1e\u0663\n", r"column 'a\|usd': expected a number, got '1e"),
    # ``a`` is ``a:score``: two columns for one cell (one was silently dropped)
    ("prompt_id,a,a:score,a|usd\np1,1,0,1\n", r"columns 'a' and 'a:score' both name model 'a'"),
    ("prompt_id,a:score,a,a|usd\np1,1,0,1\n", r"columns 'a:score' and 'a' both name model 'a'"),
]


@pytest.mark.parametrize(("text", "match"), BAD)
def test_malformed_tables_name_file_line_and_column(text, match):
    with pytest.raises(DataFormatError, match=match):
        read_outcomes(text, "bad.csv")


def test_a_header_of_20000_models_reads_every_column_in_place():
    # The header's checks are linear in its columns (benchmarks/bench_outcome_header.py
    # measures it: they were quadratic, 20 s for this table); this reads one that wide.
    k = 20_000
    header = ["prompt_id"] + [f"m{i}" for i in range(k)] + [f"m{i}|usd" for i in range(k)][::-1]
    row = ["p1"] + [str(i % 2) for i in range(k)] + [str(k - 1 - i) for i in range(k)]
    t = read_outcomes(",".join(header) + "\n" + ",".join(row) + "\n", "wide.csv")
    assert t.models == tuple(f"m{i}" for i in range(k))
    np.testing.assert_array_equal(t.scores[0, 0], np.arange(k) % 2)
    np.testing.assert_array_equal(t.costs[0, :, 0], np.arange(k))  # cost columns reversed
    with pytest.raises(DataFormatError, match=r"columns 'm5' and 'm5:score' both name"):
        read_outcomes(",".join([*header, "m5:score"]) + "\n", "wide.csv")


def test_malformed_json_lines_are_named(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt_id": "p1", "a": 1, "a|usd": 1}\n{"prompt_id": "p2", "a": true}\n')
    with pytest.raises(DataFormatError, match=r"t\.jsonl, line 2: keys differ"):
        load_outcomes(path)
    path.write_text('{"prompt_id": "p1", "a": true, "a|usd": 1}\n')
    with pytest.raises(DataFormatError, match=r"line 1, column 'a': expected a number, got True"):
        load_outcomes(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(DataFormatError, match="expected a JSON object"):
        load_outcomes(path)
    path.write_text('{"prompt_id": "p1", "a": 1, "a": 0, "a|usd": 1}\n')
    with pytest.raises(DataFormatError, match=r"line 1: .*the key 'a' appears twice"):
        load_outcomes(path)
    path.write_text('{"prompt_id": "p1", "a": 1, "a|usd": 9' + "0" * 400 + "}\n")
    with pytest.raises(DataFormatError, match=r"column 'a\|usd': inf is not a finite number"):
        load_outcomes(path)
    path.write_text('{"prompt_id": "p1", "a": 1, "a|usd": 9' + "0" * 5000 + "}\n")
    with pytest.raises(DataFormatError, match=r"line 1: not a JSON object"):
        load_outcomes(path)


def test_packaged_table_is_checked_and_holds_no_prompt_text(monkeypatch):
    t = load_llmrouter()
    assert (t.n_prompts, t.n_experts, t.n_contexts) == (6108, 9, 14)
    assert t.cost_names == ("usd", "tokens")
    # The facts of the source's PROVENANCE.md: best single model and per-prompt oracle.
    per_model = t.scores[:, 0].mean(axis=0)
    assert t.models[int(per_model.argmax())] == "llama-3.1-nemotron-51b-instruct"
    assert per_model.max() == pytest.approx(0.617, abs=5e-4)
    assert t.scores[:, 0].max(axis=1).mean() == pytest.approx(0.797, abs=5e-4)
    from importlib import resources

    with resources.files("msroute.datasets").joinpath("data", "llmrouter.csv").open() as fh:
        header = fh.readline()
    assert header.startswith("prompt_id,category,") and "question" not in header
    assert (
        "MIT"
        in resources.files("msroute.datasets").joinpath("data", "llmrouter.LICENSE").read_text()
    )
    monkeypatch.setitem(outcomes.LLMROUTER_SHA256, "llmrouter.csv", "0" * 64)
    with pytest.raises(DataFormatError, match="fails its SHA-256 check"):
        load_llmrouter()


def small_table(seed: int = 0, p: int = 40, k: int = 4, x: int = 3) -> OutcomeTable:
    rng = np.random.default_rng(seed)
    return OutcomeTable(
        prompt_ids=tuple(f"p{i}" for i in range(p)),
        categories=tuple(f"c{i}" for i in range(x)),
        category=rng.integers(0, x, p),
        models=tuple(f"m{i}" for i in range(k)),
        dims=("score",),
        scores=(rng.random((p, 1, k)) < 0.5).astype(float),
        cost_names=("usd",),
        costs=rng.uniform(0.1, 1.0, (p, k, 1)) * np.arange(1, k + 1)[None, :, None],
    )


def test_env_streams_are_seeded_per_run_and_permutations_cover_the_table():
    t = small_table()
    a = OutcomeEnv(t, horizon=100, n_runs=3, seed=[1, 2, 3])
    b = OutcomeEnv(t, horizon=100, n_runs=1, seed=2)
    np.testing.assert_array_equal(a.prompts[:, 1], b.prompts[:, 0])
    np.testing.assert_array_equal(a.skills(10, 20)[:, 1], b.skills(10, 20)[:, 0])
    np.testing.assert_array_equal(a.contexts(0, 100), t.category[a.prompts])
    np.testing.assert_array_equal(a.round_costs(5, 6)[0, 2], t.costs[a.prompts[5, 2]])
    perm = OutcomeEnv(t, horizon=100, n_runs=2, seed=0, mode="permutation")
    for r in range(2):
        assert sorted(perm.prompts[:40, r]) == list(range(40))
        assert sorted(perm.prompts[40:80, r]) == list(range(40))
    with pytest.raises(InvalidValueError, match="mode == 'shuffle'"):
        OutcomeEnv(t, horizon=10, mode="shuffle")  # type: ignore[arg-type]


@pytest.mark.parametrize("team_answer", ["best", "judge:0.5"])
def test_env_refuses_a_horizon_beyond_memory_before_allocating(team_answer: str) -> None:
    # numpy's bare MemoryError ("Unable to allocate 72.8 TiB") before, or a machine driven
    # into swap for a horizon that almost fits.
    with pytest.raises(ResourceError, match=r"OutcomeEnv: T = 10000000000000 rounds x 1 run"):
        OutcomeEnv(small_table(), horizon=10**13, team_answer=team_answer)


def test_simulate_charges_the_recorded_cost_of_each_distinct_model():
    t = small_table(1)
    env = OutcomeEnv(t, horizon=300, n_runs=2, seed=[4, 5])
    prior = t.mean_costs()
    problem = Problem(prior, 2, Constraints(upper=[None]))
    pol = make_policy("fixed", problem, horizon=300, q=[0.0, 0.0, 0.0, 1.0], n_runs=2, seed=0)
    traj = simulate({"f": pol}, env, problem, 300)["f"]
    # Two draws of the one model: charged once, at the prompt's own price, not the table's.
    np.testing.assert_array_equal(traj.costs[:, :, 0], t.costs[env.prompts, 3, 0])
    np.testing.assert_array_equal(traj.rewards, t.scores[env.prompts, 0, 3])


def test_contextual_omd_sees_the_prompts_category():
    t = small_table(2)
    env = OutcomeEnv(t, horizon=200, n_runs=1, seed=0)
    problem = Problem(t.mean_costs(), 1, Constraints(upper=[None]))
    pol = make_policy("omd", problem, horizon=200, n_contexts=3, seed=0)
    simulate({"omd": pol}, env, problem, 200)
    played = np.bincount(env.contexts(0, 200)[:, 0], minlength=3)
    assert np.all(played > 0)


def write_csv(path, t: OutcomeTable) -> None:
    """A one-score, one-cost (usd) table as the wide CSV users write."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt_id", "category", *t.models, *(f"{m}|usd" for m in t.models)])
        for i in range(t.n_prompts):
            w.writerow(
                [t.prompt_ids[i], t.categories[t.category[i]], *t.scores[i, 0], *t.costs[i, :, 0]]
            )


def test_bench_outcomes_cli_writes_the_frontier(tmp_path):
    path = tmp_path / "mine.csv"
    t = small_table(3, p=60)
    write_csv(path, t)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "msroute.cli", "bench", "--outcomes", str(path), "--seeds", "2"]
    cmd += ["--horizon", "400", "--m-draws", "1", "--out", str(out), "--jobs", "1", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with (out / "bench-mine.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    for key in ("budget", "policy", "seed", "avg_reward", "opt_reward", "feasible", "avg_usd"):
        assert key in rows[0]
    assert {r["policy"] for r in rows} == {"omd", "cbwk", "ts-bwk", "uniform"}
    assert len(rows) == 4 * 3 * 2
    for r in rows:
        # No fixed policy beats the certified per-category optimum by more than noise, and
        # the contextual comparator is at least the context-free one.
        assert float(r["opt_reward"]) >= float(r["opt_flat_reward"]) - 1e-6
        assert r["best_single"] == "" or float(r["best_single"]) <= float(r["opt_reward"]) + 1e-6
    sidecar = json.loads((out / "bench-mine.json").read_text())
    assert sidecar["table"]["prompts"] == 60 and sidecar["headline"].startswith("at $")
    assert (out / "bench-mine.png").stat().st_size > 0


def test_a_users_table_named_like_the_packaged_one_gets_its_own_budgets(tmp_path, monkeypatch):
    t = small_table(3, p=60)
    path = tmp_path / "llmrouter.csv"
    write_csv(path, t)
    monkeypatch.chdir(tmp_path)
    mine = load_table("llmrouter.csv")
    assert mine.n_prompts == 60
    levels = budget_levels(OutcomeBenchConfig(table="llmrouter.csv"), mine, "usd")
    assert levels == default_budgets(mine, "usd", 2) != LLMROUTER_BUDGETS
    packaged = budget_levels(OutcomeBenchConfig(), load_llmrouter(), "usd")
    assert packaged == LLMROUTER_BUDGETS


def test_a_model_named_like_a_spreadsheet_formula_is_written_as_text(tmp_path):
    """OWASP's advice against CSV injection: a text cell that begins with = + - @ is written
    behind a ' (a spreadsheet then shows it and runs nothing); numbers stay numbers."""
    formula = '=HYPERLINK("x.example","ok")'
    path = tmp_path / "f.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt_id", formula, "-2+3", f"{formula}|usd", "-2+3|usd"])
        w.writerows([["p1", 1, 0, 1, 0.1], ["p2", 1, 1, 1, 0.1]])
    argv = ["bench", "--outcomes", str(path), "--seeds", "1", "--horizon", "50", "--budgets", "1"]
    argv += ["--policies", "uniform", "--m-draws", "1", "--quiet", "--no-plot", "--jobs", "1"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    with (tmp_path / "out" / "f.csv").with_name("bench-f.csv").open(newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["best_single_model"] == "'" + formula  # it ran as a formula before
    out = tmp_path / "rows.csv"
    rows = [{"name": "@SUM(A1)", "tab": "\t=1", "plain": "small", "x": -0.5, "n": -3}]
    write_results_csv(out, rows)
    text = out.read_text()
    assert text.splitlines()[1] == "'@SUM(A1),'\t=1,small,-0.5,-3"


def test_bench_outcomes_cli_refuses_a_bad_file(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("prompt_id,a,a|usd\np1,,1\n")
    cmd = [sys.executable, "-m", "msroute.cli", "bench", "--outcomes", str(path), "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "bad.csv, line 2, column 'a': the cell is blank" in done.stderr
    assert "Traceback" not in done.stderr
