"""Figures from tidy result rows (native values and the all-string rows of csv.DictReader)."""

from __future__ import annotations

import csv
import io
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D

from msroute.errors import DataFormatError
from msroute.plotting import (
    plot_contextual,
    plot_fig1,
    plot_fig2,
    plot_fig3,
    policy_color,
    save_figure,
)

Rows = list[dict[str, Any]]


def as_csv(rows: Rows) -> list[dict[str, str]]:
    """The rows as they come back from a CSV file: every value a string."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    buf.seek(0)
    return list(csv.DictReader(buf))


def check_saved(fig: Figure, tmp_path: Path, name: str) -> None:
    png, svg = save_figure(fig, tmp_path / "out" / name, dpi=60)
    assert png == tmp_path / "out" / f"{name}.png"
    assert svg == tmp_path / "out" / f"{name}.svg"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in svg.read_bytes()[:2000]


def xy(line: Line2D) -> tuple[np.ndarray, np.ndarray]:
    """The data of a line as float arrays."""
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


# ----------------------------------------------------------------------------------------------
# Synthetic results
# ----------------------------------------------------------------------------------------------

STEPS = [10, 20, 50, 100, 200, 500, 1000]


def fig1_rows(negative: bool = False) -> Rows:
    rng = np.random.default_rng(1)
    rows = []
    for n_dims in (3, 5):
        for scale, level in ((3.0, "tight"), (1.5, "medium"), (0.8, "loose")):
            for seed in range(3):
                for step in STEPS:
                    r1 = scale / np.sqrt(step) * (1.0 + 0.2 * rng.random())
                    if negative and step == STEPS[-1]:
                        r1 = -0.01
                    r2 = 0.3 / np.sqrt(step) if level == "tight" and step <= 100 else 0.0
                    rows.append(
                        {
                            "n_dims": n_dims,
                            "level": level,
                            "seed": seed,
                            "step": step,
                            "r1": r1,
                            "r2": r2,
                        }
                    )
    return rows


POLICIES = ["random", "omd", "cbwk", "ts-bwk"]  # deliberately not in display order


def fig2_rows() -> Rows:
    rng = np.random.default_rng(2)
    rows = []
    for env in ("regime", "stochastic"):
        for level in ("loose", "tight", "medium", "none"):
            for policy in POLICIES:
                for seed in range(4):
                    rows.append(
                        {
                            "env": env,
                            "level": level,
                            "policy": policy,
                            "seed": seed,
                            "avg_reward": 2.0 + rng.random(),
                            "feasible": bool(rng.random() < 0.6),
                        }
                    )
    return rows


def fig3_rows() -> Rows:
    rows = []
    for env in ("stochastic", "regime"):
        for level in ("tight", "loose"):
            for k, policy in enumerate(["ts", "omd", "cbwk"]):
                for rnd in range(500, 3001, 250):
                    rows.append(
                        {
                            "env": env,
                            "level": level,
                            "policy": policy,
                            "round": rnd,
                            "mean": 2.5 + 0.1 * k - 1.0 / rnd,
                            "std": 0.05,
                        }
                    )
    return rows


def contextual_rows() -> Rows:
    rng = np.random.default_rng(3)
    rows = []
    for policy in ("omd-contextual", "omd", "ts-bwk"):
        for seed in range(4):
            rows.append(
                {
                    "policy": policy,
                    "seed": seed,
                    "avg_reward": 2.5 + 0.3 * rng.random(),
                    "feasible": int(rng.random() < 0.7),
                    "regret": 0.2 * rng.random(),
                    "opt": 2.9 + 0.01 * seed,
                }
            )
    return rows


# ----------------------------------------------------------------------------------------------
# Helpers to read figures back
# ----------------------------------------------------------------------------------------------


def bar_heights(ax: Axes) -> dict[str, list[float]]:
    """Heights of each bar series of a grouped-bar panel, keyed by the series label."""
    out = {}
    for container in ax.containers:
        if isinstance(container, BarContainer):
            out[str(container.get_label())] = [p.get_height() for p in container.patches]
    return out


def labelled_lines(ax: Axes) -> dict[str, Line2D]:
    return {str(line.get_label()): line for line in ax.get_lines()}


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------


def test_import_msroute_does_not_load_matplotlib() -> None:
    code = "import sys, msroute; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize("csv_form", [False, True], ids=["native", "csv"])
def test_fig1_layout_curves_and_reference(tmp_path: Path, csv_form: bool) -> None:
    rows = fig1_rows()
    fig = plot_fig1(as_csv(rows) if csv_form else rows)
    assert len(fig.axes) == 4  # 2 metrics x 2 values of N
    top = [ax for ax in fig.axes if ax.get_title()]
    assert sorted(ax.get_title() for ax in top) == ["N = 3", "N = 5"]
    ax = next(ax for ax in top if ax.get_title() == "N = 5")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"  # R1 all positive here

    # The tight curve is the mean over seeds at each step.
    tight = [r for r in rows if r["n_dims"] == 5 and r["level"] == "tight"]
    expected = [np.mean([r["r1"] for r in tight if r["step"] == s]) for s in STEPS]
    lines = labelled_lines(ax)
    assert set(lines) >= {"Tight", "Medium", "Loose"}
    np.testing.assert_allclose(xy(lines["Tight"])[0], STEPS)
    np.testing.assert_allclose(xy(lines["Tight"])[1], expected)

    # The c/sqrt(n) reference passes through the tight mean at the median step.
    ref = next(line for line in ax.get_lines() if line.get_gid() == "reference")
    assert ref.get_linestyle() == "--"
    x = np.asarray(ref.get_xdata(), dtype=float)
    y = np.asarray(ref.get_ydata(), dtype=float)
    median_step = STEPS[len(STEPS) // 2]
    np.testing.assert_allclose(y[x == median_step], expected[len(STEPS) // 2])
    np.testing.assert_allclose(y * np.sqrt(x), y[0] * np.sqrt(x[0]))
    if not csv_form:
        check_saved(fig, tmp_path, "fig1")


def test_fig1_reference_skips_the_zero_tail_and_zeros_use_symlog() -> None:
    fig = plot_fig1(fig1_rows())
    r2_axes = [ax for ax in fig.axes if not ax.get_title()]
    for ax in r2_axes:
        # R2 is exactly 0 for medium/loose and for tight after step 100: no log axis.
        assert ax.get_yscale() == "symlog"
        ref = next(line for line in ax.get_lines() if line.get_gid() == "reference")
        positive = [s for s in STEPS if s <= 100]
        pivot = positive[len(positive) // 2]
        x = np.asarray(ref.get_xdata(), dtype=float)
        np.testing.assert_allclose(np.asarray(ref.get_ydata())[x == pivot], 0.3 / np.sqrt(pivot))


def test_fig1_negative_r1_uses_symlog_and_r1_key() -> None:
    rows = fig1_rows(negative=True)
    fig = plot_fig1(rows)
    assert all(ax.get_yscale() == "symlog" for ax in fig.axes)
    for row in rows:
        row["r1_mc"] = 2.0
    fig = plot_fig1(rows, r1_key="r1_mc")
    line = labelled_lines(fig.axes[0])["Tight"]
    np.testing.assert_allclose(xy(line)[1], 2.0)


def test_fig1_all_zero_panel_is_linear_without_reference() -> None:
    rows = [{**r, "r2": 0.0} for r in fig1_rows()]
    fig = plot_fig1(rows)
    for ax in fig.axes:
        has_reference = any(line.get_gid() == "reference" for line in ax.get_lines())
        if ax.get_title():  # R1: positive, log-log with the reference line
            assert ax.get_yscale() == "log" and has_reference
        else:  # R2: identically 0
            assert ax.get_yscale() == "linear" and not has_reference
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["Tight", "Medium", "Loose", r"$c/\sqrt{n}$"]


def band_edges(ax: Axes) -> np.ndarray:
    """The y values of every std band (filled polygon) of a panel."""
    return np.concatenate(
        [path.vertices[:, 1] for coll in ax.collections for path in coll.get_paths()]
    )


def r1_curves(ax: Axes) -> list[Line2D]:
    """The R1 (or R2) curves of a panel: every line but the reference and the zero line."""
    return [
        line
        for line in ax.get_lines()
        if line.get_gid() != "reference" and line.get_label()[0] != "_"
    ]


def test_fig1_r2_band_is_clipped_at_zero_and_axis_starts_at_zero() -> None:
    # One seed in three violates: the std exceeds the mean, so mean - std < 0 unclipped.
    rows = [{**r, "r2": r["r2"] if r["seed"] == 0 else 0.0} for r in fig1_rows()]
    fig = plot_fig1(rows)
    r2_axes = [ax for ax in fig.axes if not ax.get_title()]
    assert len(r2_axes) == 2
    for ax in r2_axes:
        edges = band_edges(ax)
        assert edges.min() == 0.0  # clipped exactly at 0, never below
        assert ax.get_yscale() == "symlog"
        assert ax.get_ylim()[0] == 0.0
        low, high = ax.get_ylim()
        assert not [t for t in ax.get_yticks() if low <= t <= high and t < 0]
        # linthresh: the decade of the smallest positive mean or reference value, the lower.
        tight = np.asarray(labelled_lines(ax)["Tight"].get_ydata(), dtype=float)
        ref = next(line for line in ax.get_lines() if line.get_gid() == "reference")
        smallest = min(tight[tight > 0].min(), np.min(np.asarray(ref.get_ydata(), dtype=float)))
        linthresh = ax.yaxis.get_transform().linthresh
        assert linthresh == pytest.approx(10.0 ** np.floor(np.log10(smallest)))
        assert np.all(np.asarray(ref.get_ydata(), dtype=float) >= linthresh)
    # The R1 bands are not clipped: a proxy R1 may be negative.
    rows = fig1_rows(negative=True)
    for r in rows:
        if r["step"] == STEPS[-1]:
            r["r1"] = -0.02 + 1.0 * (r["seed"] - 1)  # mean -0.02, std 1
    ax = plot_fig1(rows).axes[0]
    assert band_edges(ax).min() == pytest.approx(-1.02)
    # ... but the axis shows only the linear range below 0 (tau = 0.1 here), not decades.
    assert ax.get_yscale() == "symlog"
    assert ax.yaxis.get_transform().linthresh == pytest.approx(0.1)
    assert ax.get_ylim()[0] == pytest.approx(-0.12)


def with_true_regret(rows: Rows) -> Rows:
    return [{**r, "r1_true": 1.5 * abs(r["r1"]) + 0.001 * r["seed"]} for r in rows]


@pytest.mark.parametrize("csv_form", [False, True], ids=["native", "csv"])
def test_fig1_true_regret_is_a_dashed_curve_per_level(csv_form: bool) -> None:
    rows = with_true_regret(fig1_rows())
    fig = plot_fig1(as_csv(rows) if csv_form else rows)
    top = [ax for ax in fig.axes if ax.get_title()]
    bottom = [ax for ax in fig.axes if not ax.get_title()]
    for ax in top:
        curves = r1_curves(ax)
        assert len(curves) == 6  # twice the 3 levels
        dashed = [line for line in curves if line.get_gid() == "r1_true"]
        solid = [line for line in curves if line.get_gid() != "r1_true"]
        assert len(dashed) == len(solid) == 3
        assert all(line.get_linestyle() == "-" for line in solid)
        assert all(line.get_linestyle() == "--" for line in dashed)
        assert [line.get_color() for line in dashed] == [line.get_color() for line in solid]
        assert len(ax.collections) == 3  # bands for the proxy only
    for ax in bottom:  # R2 has no true counterpart
        assert len(r1_curves(ax)) == 3
    # The dashed curve is the mean of r1_true over seeds.
    ax = next(ax for ax in top if ax.get_title() == "N = 5")
    line = next(line for line in r1_curves(ax) if line.get_label() == "Tight, true regret")
    tight = [r for r in rows if r["n_dims"] == 5 and r["level"] == "tight"]
    expected = [np.mean([r["r1_true"] for r in tight if r["step"] == s]) for s in STEPS]
    np.testing.assert_allclose(xy(line)[1], expected)
    # The reference line is still fitted to the proxy (solid) tight curve.
    ref = next(line for line in ax.get_lines() if line.get_gid() == "reference")
    solid = labelled_lines(ax)["Tight"]
    mid = STEPS[len(STEPS) // 2]
    np.testing.assert_allclose(xy(ref)[1][xy(ref)[0] == mid], xy(solid)[1][xy(solid)[0] == mid])
    # Legends: the levels below (no entry per dashed curve), the line-style key above.
    assert len(fig.legends) == 2
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["Tight", "Medium", "Loose", r"$c/\sqrt{n}$"]
    key = [t.get_text() for t in fig.legends[1].get_texts()]
    assert len(key) == 2 and key[0].startswith("solid: paper's proxy") and "$q_T$" in key[0]
    assert key[1].startswith("dashed: true regret") and "OPT" in key[1]


@pytest.mark.parametrize(
    "variant", ["no-column", "blank", "disabled", "same-key"], ids=lambda v: str(v)
)
def test_fig1_without_true_regret_is_as_before(variant: str) -> None:
    rows: Any = fig1_rows()
    kwargs: dict[str, Any] = {}
    if variant == "blank":
        rows = as_csv([{**r, "r1_true": ""} for r in rows])
    elif variant == "disabled":
        rows, kwargs = with_true_regret(rows), {"true_key": None}
    elif variant == "same-key":
        rows, kwargs = with_true_regret(rows), {"r1_key": "r1_true", "true_key": "r1_true"}
    fig = plot_fig1(rows, **kwargs)
    assert len(fig.legends) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["Tight", "Medium", "Loose", r"$c/\sqrt{n}$"]
    for ax in fig.axes:
        curves = r1_curves(ax)
        assert [line.get_label() for line in curves] == ["Tight", "Medium", "Loose"]
        assert all(line.get_linestyle() == "-" and line.get_gid() is None for line in curves)
        ref = next(line for line in ax.get_lines() if line.get_gid() == "reference")
        assert ref.get_linestyle() == "--"


@pytest.mark.parametrize("csv_form", [False, True], ids=["native", "csv"])
def test_fig2_bars_are_the_means_and_feasible_shares(tmp_path: Path, csv_form: bool) -> None:
    rows = fig2_rows()
    fig = plot_fig2(as_csv(rows) if csv_form else rows)
    assert len(fig.axes) == 4  # 2 envs x (reward, feasible)
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    # Rows: stochastic first, then regime; columns: reward, feasibility.
    assert fig.axes[0].get_title().startswith("Stochastic")
    assert fig.axes[2].get_title().startswith("Regime-switching")
    levels = ["tight", "medium", "loose", "none"]
    labels = {"omd": "OMD-Approachability", "random": "Random", "cbwk": "CBwK", "ts-bwk": "TS-BwK"}
    for i, env in enumerate(("stochastic", "regime")):
        reward_ax, feasible_ax = fig.axes[2 * i], fig.axes[2 * i + 1]
        assert [t.get_text() for t in reward_ax.get_xticklabels()] == [
            "Tight",
            "Medium",
            "Loose",
            "Unconstrained",
        ]
        heights = bar_heights(reward_ax)
        shares = bar_heights(feasible_ax)
        assert next(iter(heights)) == "OMD-Approachability"
        for policy, label in labels.items():
            cells = [
                [r for r in rows if (r["env"], r["level"], r["policy"]) == (env, lv, policy)]
                for lv in levels
            ]
            np.testing.assert_allclose(
                heights[label], [np.mean([r["avg_reward"] for r in c]) for c in cells]
            )
            np.testing.assert_allclose(
                shares[label], [100.0 * np.mean([r["feasible"] for r in c]) for c in cells]
            )
        omd_bars = next(
            c
            for c in reward_ax.containers
            if isinstance(c, BarContainer) and c.get_label() == labels["omd"]
        )
        assert omd_bars.patches[0].get_facecolor()[:3] == pytest.approx((0.122, 0.467, 0.706), 1e-2)
    if not csv_form:
        check_saved(fig, tmp_path, "fig2")


def test_fig2_missing_cell_is_an_empty_bar() -> None:
    rows = [r for r in fig2_rows() if not (r["policy"] == "cbwk" and r["level"] == "none")]
    heights = bar_heights(plot_fig2(rows).axes[0])
    assert np.isnan(heights["CBwK"][3]) and np.isfinite(heights["CBwK"][:3]).all()


@pytest.mark.parametrize("csv_form", [False, True], ids=["native", "csv"])
def test_fig3_lines_per_policy_omd_blue_on_top(tmp_path: Path, csv_form: bool) -> None:
    rows = fig3_rows()
    fig = plot_fig3(as_csv(rows) if csv_form else rows)
    assert len(fig.axes) == 4  # 2 envs x {tight, loose}
    assert [ax.get_title() for ax in fig.axes] == [
        "Stochastic, tight",
        "Stochastic, loose",
        "Regime-switching, tight",
        "Regime-switching, loose",
    ]
    for ax in fig.axes:
        lines = labelled_lines(ax)
        assert set(lines) == {"OMD-Approachability", "TS", "CBwK"}
        omd = lines["OMD-Approachability"]
        assert omd.get_color() == policy_color("omd") == "#1f77b4"
        assert all(
            omd.get_zorder() > other.get_zorder() for other in ax.get_lines() if other is not omd
        )
        assert len(ax.collections) == 3  # one std band per policy
    ts = labelled_lines(fig.axes[0])["TS"]
    np.testing.assert_allclose(np.asarray(ts.get_xdata()), np.arange(500, 3001, 250))
    if not csv_form:
        check_saved(fig, tmp_path, "fig3")


@pytest.mark.parametrize("csv_form", [False, True], ids=["native", "csv"])
def test_contextual_bars_and_opt_line(tmp_path: Path, csv_form: bool) -> None:
    rows = contextual_rows()
    fig = plot_contextual(as_csv(rows) if csv_form else rows)
    assert len(fig.axes) == 2
    reward_ax, regret_ax = fig.axes
    order = ["omd", "omd-contextual", "ts-bwk"]
    for ax, key in ((reward_ax, "avg_reward"), (regret_ax, "regret")):
        (heights,) = bar_heights(ax).values()
        expected = [np.mean([r[key] for r in rows if r["policy"] == p]) for p in order]
        np.testing.assert_allclose(heights, expected)
    ticks = [t.get_text() for t in reward_ax.get_xticklabels()]
    assert ticks[0].startswith("OMD-Approachability") and ticks[1].startswith("Contextual OMD")
    feasible = 100 * np.mean([r["feasible"] for r in rows if r["policy"] == "ts-bwk"])
    assert ticks[2].endswith(f"{feasible:.0f}% feasible")
    opt = next(line for line in reward_ax.get_lines() if line.get_gid() == "opt")
    np.testing.assert_allclose(np.asarray(opt.get_ydata()), 2.9 + 0.01 * 1.5)
    if not csv_form:
        check_saved(fig, tmp_path, "contextual")


def test_contextual_without_opt_has_no_line() -> None:
    rows = [{k: v for k, v in r.items() if k != "opt"} for r in contextual_rows()]
    fig = plot_contextual(rows)
    assert not [line for line in fig.axes[0].get_lines() if line.get_gid() == "opt"]


def test_save_figure_rejects_suffix_and_is_reproducible(tmp_path: Path) -> None:
    fig = plot_contextual(contextual_rows())
    with pytest.raises(ValueError, match=r"without it .*'.*fig'"):
        save_figure(fig, tmp_path / "fig.png")
    engine = fig.get_layout_engine()
    png1, svg1 = save_figure(fig, tmp_path / "a" / "fig")
    assert fig.get_layout_engine() is engine  # laid out once for both formats, then given back
    png2, svg2 = save_figure(fig, tmp_path / "b" / "fig")
    assert svg1.read_bytes() == svg2.read_bytes()
    assert png1.read_bytes() == png2.read_bytes()


def test_both_formats_are_drawn_from_one_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The constrained layout runs once for the PNG and the SVG together (savefig would run it
    again for each format), and the figure keeps its layout engine afterwards."""
    fig = plot_fig2(fig2_rows())
    engine = fig.get_layout_engine()
    assert isinstance(engine, ConstrainedLayoutEngine)
    runs: list[float] = []
    real = ConstrainedLayoutEngine.execute

    def counted(self: ConstrainedLayoutEngine, figure: Any) -> Any:
        runs.append(figure.get_dpi())
        return real(self, figure)

    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", counted)
    save_figure(fig, tmp_path / "fig", dpi=120)
    assert runs == [120]
    assert fig.get_layout_engine() is engine


def test_save_figure_forks_nothing_and_starts_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both formats are written in the calling thread (safe in a server or a program with
    threads of its own), and the PNG is the bytes savefig writes for the figure alone."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("save_figure must not fork a process or start a thread")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fork", refuse)
        patch.setattr(threading.Thread, "start", refuse)
        patch.setattr(multiprocessing.Process, "start", refuse)
        png, svg = save_figure(plot_fig2(fig2_rows()), tmp_path / "saved" / "fig", dpi=60)
    direct = tmp_path / "direct.png"
    plot_fig2(fig2_rows()).savefig(direct, dpi=60, format="png")
    assert png.read_bytes() == direct.read_bytes()
    assert b"<svg" in svg.read_bytes()[:2000]


@pytest.mark.parametrize(
    ("plot", "rows", "error", "match"),
    [
        (plot_fig1, [], ValueError, "rows is empty"),
        (plot_fig1, [{"n_dims": 3, "level": "tight", "step": 1, "r1": 0.1}], DataFormatError, "r2"),
        (
            plot_fig2,
            [{"env": "e", "level": "tight", "policy": "omd", "avg_reward": 1, "feasible": "maybe"}],
            DataFormatError,
            "feasible == 'maybe'",
        ),
        (
            plot_fig3,
            [{"env": "e", "level": "l", "policy": "p", "round": "x", "mean": 1, "std": 0}],
            DataFormatError,
            "round == 'x' is not a number",
        ),
        (plot_contextual, [["omd", 1]], TypeError, "row 0 is a list"),
    ],
)
def test_invalid_rows(plot: Any, rows: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        plot(rows)


def test_policy_colors_are_fixed_and_stable() -> None:
    assert policy_color("omd") == "#1f77b4"
    assert len({policy_color(p) for p in ("omd", "random", "greedy", "cucb", "cbwk")}) == 5
    assert policy_color("my-policy") == policy_color("my-policy")


def test_fig2_draws_every_bounded_cost_as_median_and_range() -> None:
    """One spend panel per bounded cost (the workload budget and the cap on flagged experts):
    the median run in percent of its bound, whiskers from the lowest to the highest run (never
    below 0), the bound at 100%; a level without the bound is left out."""
    rng = np.random.default_rng(5)
    rows = [
        {
            **r,
            "avg_workload": float(rng.uniform(0.0, 1.2) ** 4),  # skewed: mean - std < 0
            "budget_bound": float("inf") if r["level"] == "none" else 1.0 + r["seed"],
            "avg_experts": float(rng.uniform(0.5, 3.0)),
            "expert_cap": float("inf") if r["level"] == "none" else 2.0,
        }
        for r in fig2_rows()
    ]
    fig = plot_fig2(as_csv(rows))
    assert len(fig.axes) == 8  # 2 envs x (reward, feasible, workload, flagged experts)
    for ax, value, bound, title in (
        (fig.axes[2], "avg_workload", "budget_bound", "Stochastic: workload against budget"),
        (fig.axes[3], "avg_experts", "expert_cap", "Stochastic: flagged experts against cap"),
    ):
        assert ax.get_title() == title
        assert any(line.get_gid() == bound for line in ax.get_lines())
        assert ax.get_ylim()[0] == 0.0
        cell = [
            100 * r[value] / r[bound]
            for r in rows
            if (r["env"], r["level"], r["policy"]) == ("stochastic", "tight", "omd")
        ]
        heights = bar_heights(ax)
        np.testing.assert_allclose(heights["OMD-Approachability"][0], np.median(cell))
        assert len(heights["OMD-Approachability"]) == 3  # no bound when unconstrained
        assert [t.get_text() for t in ax.get_xticklabels()] == ["Tight", "Medium", "Loose"]
        whiskers = [
            np.asarray(seg, dtype=float).reshape(-1, 2)[:, 1]
            for collection in ax.collections
            for seg in getattr(collection, "get_segments", lambda: [])()
        ]
        lows = [float(seg.min()) for seg in whiskers if seg.size and np.all(np.isfinite(seg))]
        assert lows and min(lows) >= 0.0
        assert any(np.isclose(low, min(cell)) for low in lows)


def test_fig2_without_spend_columns_has_two_panels_per_env() -> None:
    assert len(plot_fig2(fig2_rows()).axes) == 4
