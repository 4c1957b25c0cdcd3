"""``msroute bench``: the OPT frontier, its bound on feasible runs, the separation of policies,
the outputs and the command line."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msroute.cli import main
from msroute.core.reward import expected_reward
from msroute.experiments.bench import (
    BenchConfig,
    bench_specs,
    oracle_worker,
    resolve_levels,
    run_bench,
)
from msroute.experiments.cells import build_batch
from msroute.experiments.sweep import sweep_worker
from msroute.policies.registry import POLICIES
from msroute.scenarios import FILES, files_scenario, get_scenario, parse_budget

#: Policies that draw M experts i.i.d. from a distribution: the class eq. (3) optimizes over.
IID_POLICIES = tuple(p for p in ("omd", "uniform") if p in POLICIES)


def _specs(cfg: BenchConfig) -> tuple[list[Any], tuple[str, ...]]:
    scenario = get_scenario(cfg.scenario, cfg.scenario_params)
    levels, first = resolve_levels(cfg, scenario)
    return bench_specs(cfg, scenario, levels, first.n_experts, first.n_dims), levels


@pytest.mark.parametrize("name", ["llm-sim", "trec-sharp"])
def test_frontier_is_non_decreasing_in_the_budget(name: str) -> None:
    cfg = BenchConfig(scenario=name, seeds=2, horizon=200, n_budgets=4, policies=("omd",))
    labelled, levels = _specs(cfg)
    assert levels[-1] == "none" and len(levels) == 5
    opt = oracle_worker(labelled[0][1])
    value = opt["opt_reward"].reshape(len(levels), 2)
    gap = opt["opt_gap"].reshape(len(levels), 2)
    assert np.all(gap <= 1e-6)
    # value_i <= OPT_i <= OPT_{i+1} <= value_{i+1} + gap_{i+1}: certified monotonicity
    assert np.all(value[1:] + gap[1:] >= value[:-1] - 1e-12)
    assert np.all(value[-1] > value[0])  # the budget binds at the cheapest level


def _write_instance(tmp_path: Path) -> tuple[Path, Path]:
    skills = tmp_path / "skills.csv"
    skills.write_text(
        "expert,a,b\ncheap,0.30,0.35\nmid,0.55,0.50\ngood,0.70,0.80\nbest,0.90,0.85\n"
    )
    costs = tmp_path / "costs.csv"
    costs.write_text("expert,usd\ncheap,0.1\nmid,0.3\ngood,0.6\nbest,1.0\n")
    return skills, costs


def _check_no_run_beats_opt(
    cfg: BenchConfig, policies: tuple[str, ...], *, unpaced: bool = False
) -> int:
    """Feasible runs against OPT of their own skill sequence; returns how many were checked.

    ``unpaced`` runs the policies as the class eq. (3) optimizes over at M >= 2: without the
    pacer and with OMD's linear surrogate. A paced run alternates between routings restricted
    to what fits and its own q (a mixture of i.i.d. routings, which can earn more than any one
    q); the exact surrogate keeps the expected *distinct* cost within the bound, a larger set
    than eq. (3)'s ``C^T q`` in ``S`` (whose optimum here spends 0.75 of the budget)."""
    labelled, _ = _specs(cfg)
    opt = oracle_worker(labelled[0][1])
    checked = 0
    for label, spec in labelled[1:]:
        if label not in policies:
            continue
        if unpaced:
            params = tuple((k, v) for k, v in spec.policy_params if k != "pacing")
            if spec.policy == "omd":
                params = tuple((k, "linear" if k == "surrogate" else v) for k, v in params)
            spec = dataclasses.replace(spec, policy_params=params)
        res = sweep_worker(dataclasses.replace(spec, record=("rewards",)))
        rewards = res["rewards"].astype(np.float64)  # (T, R)
        sampling_error = rewards.std(axis=0) / np.sqrt(rewards.shape[0])
        ok = res["feasible"]
        excess = res["avg_reward"] - (opt["opt_reward"] + opt["opt_gap"])
        bad = ok & (excess > 4.0 * sampling_error)
        assert not bad.any(), (label, excess[bad], sampling_error[bad])
        checked += int(ok.sum())
    return checked


def test_no_feasible_run_beats_opt_with_one_draw(tmp_path: Path) -> None:
    # M = 1: every policy routes one expert, the class eq. (3) optimizes over; stationary skills
    skills, costs = _write_instance(tmp_path)
    scen = files_scenario(str(skills), str(costs), m_draws=1)
    cfg = BenchConfig(
        scenario=FILES,
        scenario_params=scen.params,
        seeds=3,
        horizon=2000,
        n_budgets=3,
        policies=tuple(p for p in POLICIES if p not in ("omd-contextual", "fixed")),
    )
    assert _check_no_run_beats_opt(cfg, cfg.policies) > 20


@pytest.mark.skipif(not IID_POLICIES, reason="no i.i.d.-draw policy registered")
def test_no_feasible_iid_run_beats_opt_with_two_draws() -> None:
    cfg = BenchConfig(scenario="llm-sim", seeds=2, horizon=2000, n_budgets=3, policies=IID_POLICIES)
    assert _check_no_run_beats_opt(cfg, IID_POLICIES, unpaced=True) > 0


def test_trec_sharp_uniform_routing_is_separated_from_opt(tmp_path: Path) -> None:
    """Uniform routing (q = 1/K, M i.i.d. draws) earns >= 0.05 per task group less than OPT at
    every budget of the --quick sweep where it is feasible: the registered ``uniform`` policy's
    feasible runs, and its exact expected reward (expected_reward on the same skill sequence)
    wherever its expected realized cost is within the budget."""
    cfg = BenchConfig(
        scenario="trec-sharp", seeds=2, horizon=1000, n_budgets=4, policies=("uniform",)
    )
    labelled, levels = _specs(cfg)
    spec = labelled[0][1]
    opt = oracle_worker(spec)
    # the registered uniform policy: every budget where its runs are feasible
    runs = sweep_worker(labelled[1][1])
    per_group = (opt["opt_reward"] - runs["avg_reward"]) / spec.n_dims
    feasible = runs["feasible"].reshape(len(levels), -1)
    for li in range(len(levels)):
        if feasible[li].any():
            assert per_group.reshape(len(levels), -1)[li][feasible[li]].mean() >= 0.05
    assert feasible[-1].all()
    cell = build_batch(spec)
    skills = cell.env.skills(0, spec.horizon)  # (T, seeds, N, K)
    k, n = cell.batch.n_experts, spec.n_dims
    uniform_reward = expected_reward(np.full(k, 1.0 / k), skills, spec.m_draws).mean(axis=0)
    checked = 0
    for li, level in enumerate(levels):
        budget = parse_budget(level)
        gaps = []
        for si in range(len(spec.seeds)):
            c = cell.instances[si].costs[:, 0]
            spend = float(np.sum(c * (1.0 - (1.0 - 1.0 / k) ** spec.m_draws)))
            if budget is None or spend <= budget:
                r = li * len(spec.seeds) + si
                gaps.append((opt["opt_reward"][r] - uniform_reward[si]) / n)
        if gaps:
            checked += 1
            assert np.mean(gaps) >= 0.05, (level, gaps)
    assert checked >= 2  # uniform is feasible at the top levels


def test_run_bench_writes_tidy_csv_sidecar_and_figure(tmp_path: Path) -> None:
    cfg = BenchConfig(
        scenario="llm-sim", seeds=2, horizon=300, n_budgets=3, policies=("random", "omd")
    )
    rows = run_bench(cfg, tmp_path, quiet=True)
    stem = tmp_path / "bench-llm-sim"
    with open(f"{stem}.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(rows) == 4 * 2 * 2
    for key in (
        "scenario",
        "budget",
        "policy",
        "seed",
        "avg_reward",
        "opt_reward",
        "regret",
        "feasible",
        "avg_usd",
        "avg_latency_s",
    ):
        assert key in table[0]
    for row in table:
        if row["feasible"] == "True":
            assert float(row["regret"]) == pytest.approx(
                float(row["opt_reward"]) - float(row["avg_reward"])
            )
        else:
            assert row["regret"] == ""
    # OPT computed one level per cell equals the oracle over all levels at once
    labelled, levels = _specs(cfg)
    whole = oracle_worker(labelled[0][1])
    got = [float(r["opt_reward"]) for r in table if r["policy"] == "random"]
    order = [
        levels.index(r["budget"]) * 2 + int(r["seed"]) for r in table if r["policy"] == "random"
    ]
    np.testing.assert_array_equal(got, whole["opt_reward"][order])
    side = json.loads(Path(f"{stem}.json").read_text())
    assert side["scenario"]["budget_unit"] == "$ per query"
    assert side["seeds"] == [0, 1] and side["budgets"][-1] == "none"
    assert "SIMULATED" in side["scenario"]["notes"]
    assert Path(f"{stem}.png").exists() and Path(f"{stem}.svg").exists()
    # same seed, same numbers: a second run reads every cell from the cache
    again = run_bench(cfg, tmp_path, quiet=True, plot=False)
    assert again == rows


def test_cli_bench_from_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    skills, costs = _write_instance(tmp_path)
    out = tmp_path / "out"
    code = main(
        [
            "bench",
            "--skills",
            str(skills),
            "--costs",
            str(costs),
            "--policies",
            "random,omd",
            "--budgets",
            "0.5,none",
            "--seeds",
            "1",
            "--horizon",
            "200",
            "--out",
            str(out),
            "--no-plot",
            "--quiet",
            "--jobs",
            "1",
        ]
    )
    assert code == 0
    with open(out / "bench-files.csv") as fh:
        table = list(csv.DictReader(fh))
    assert {r["budget"] for r in table} == {"0.5", "none"}
    assert {r["policy"] for r in table} == {"random", "omd"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["llm-sim", "--skills", "s.csv", "--costs", "c.csv"], "not both"),
        (["--skills", "s.csv"], "--costs is missing"),
        ([], "give a scenario name"),
        (["llm-sim", "--budgets", "cheap"], "budget level 'cheap'"),
        (["llm-sim", "--policies", "nope"], "unknown policy"),
    ],
)
def test_cli_bench_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *args, "--quiet", "--no-plot"]) == 2
    assert message in capsys.readouterr().err


def test_cli_bench_names_the_bad_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills, costs = _write_instance(tmp_path)
    skills.write_text("expert,a\ncheap,0.3\nmid,zero\n")
    assert main(["bench", "--skills", str(skills), "--costs", str(costs), "--quiet"]) == 2
    assert f"{skills}, line 3: a must be a number, got 'zero'" in capsys.readouterr().err


def _bench_rows() -> list[dict[str, Any]]:
    rows = []
    for budget, opt in (("0.1", 2.0), ("0.3", 2.5), ("none", 2.6)):
        for seed in (0, 1):
            for policy, reward, ok in (
                ("omd", opt - 0.2, True),
                ("greedy", opt + 0.1, False),
                ("cbwk", opt - 0.1, seed == 0),
            ):
                rows.append(
                    {
                        "scenario": "x",
                        "budget": budget,
                        "policy": policy,
                        "seed": seed,
                        "avg_reward": reward + 0.01 * seed,
                        "opt_reward": opt + 0.01 * seed,
                        "feasible": ok,
                    }
                )
    return rows


def test_plot_bench_frontier_line_and_marked_points() -> None:
    from msroute.plotting import plot_bench, policy_color

    fig = plot_bench(_bench_rows())
    left, right = fig.axes[:2]
    frontier = [ln for ln in left.get_lines() if ln.get_color() == "black"]
    assert len(frontier) == 1
    np.testing.assert_allclose(frontier[0].get_ydata(), [2.005, 2.505, 2.605])
    assert list(frontier[0].get_xdata())[:2] == [0.1, 0.3]
    points = [ln for ln in left.get_lines() if ln is not frontier[0]]
    kinds: dict[str, set[tuple[str, bool]]] = {}
    for ln in points:
        policy = next(p for p in ("omd", "greedy", "cbwk") if ln.get_color() == policy_color(p))
        kinds.setdefault(policy, set()).add((ln.get_marker(), ln.get_markerfacecolor() == "none"))
    omd_points = sorted(
        float(ln.get_ydata()[0]) for ln in points if ln.get_color() == policy_color("omd")
    )
    np.testing.assert_allclose(omd_points, [1.805, 2.305, 2.405])  # the mean over seeds
    # all runs feasible: filled; some: hollow; none: x
    assert kinds == {"omd": {("o", False)}, "cbwk": {("o", True)}, "greedy": {("x", True)}}
    assert [t.get_text() for t in left.get_xticklabels()] == ["0.1", "0.3", "none"]
    omd = [ln for ln in right.get_lines() if ln.get_color() == policy_color("omd")]
    np.testing.assert_allclose(omd[0].get_ydata(), [0.2, 0.2, 0.2])  # feasible runs only
    cbwk = [ln for ln in right.get_lines() if ln.get_color() == policy_color("cbwk")]
    np.testing.assert_allclose(cbwk[0].get_ydata(), [0.1, 0.1, 0.1])  # seed 0 only
    assert not [ln for ln in right.get_lines() if ln.get_color() == policy_color("greedy")]


def test_fig2_reward_axis_shows_the_differences_or_starts_at_zero() -> None:
    from msroute.plotting import plot_fig2

    rows = [
        {
            "env": "stochastic",
            "level": level,
            "policy": policy,
            "seed": seed,
            "avg_reward": reward + 0.001 * seed,
            "feasible": True,
        }
        for level in ("tight", "none")
        for policy, reward in (("omd", 2.95), ("random", 2.85))
        for seed in (0, 1)
    ]
    zoomed = plot_fig2(rows).axes[0].get_ylim()
    full = plot_fig2(rows, reward_axis="full").axes[0].get_ylim()
    assert full[0] == 0.0
    assert 2.5 < zoomed[0] < 2.85 and 2.95 < zoomed[1] < 3.2
    with pytest.raises(ValueError, match="reward_axis"):
        plot_fig2(rows, reward_axis="log")
