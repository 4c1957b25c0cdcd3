"""The figures of the experiments (see ``msroute.plotting``, which exports the public names),
with the policies' colors and labels (read from the policy classes) and the order of levels and
environments."""

from __future__ import annotations

import math
import multiprocessing
import os
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import matplotlib
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from msroute._atomic import atomic_path
from msroute.errors import InvalidValueError
from msroute.plotting.rows import (
    Row,
    checked_rows,
    get_bool,
    get_float,
    get_int,
    get_optional_float,
    get_str,
    mean_std,
)
from msroute.policies.base import BasePolicy
from msroute.policies.registry import POLICIES, get_policy_class

#: Display order of the constraint levels (unknown levels follow, sorted by name).
LEVEL_ORDER: tuple[str, ...] = ("tight", "medium", "loose", "none")
_ENV_ORDER: tuple[str, ...] = ("stochastic", "regime")
_POLICY_ORDER: tuple[str, ...] = (
    "omd",
    "omd-contextual",
    "ts-bwk",
    "cbwk",
    "moe",
    "ts",
    "cucb",
    "greedy",
    "random",
    "uniform",
)

#: Colors of policies that are not registered (or have none), chosen by a stable hash.
_EXTRA_COLORS: tuple[str, ...] = ("#bcbd22", "#393b79", "#637939", "#843c39", "#7b4173")
_LEVEL_LABELS = {"tight": "Tight", "medium": "Medium", "loose": "Loose", "none": "Unconstrained"}
_LEVEL_COLORS = {"tight": "#d62728", "medium": "#ff7f0e", "loose": "#2ca02c", "none": "#7f7f7f"}
_ENV_LABELS = {"stochastic": "Stochastic", "regime": "Regime-switching"}

_TOP_ZORDER = 10.0  # OMD-Approachability is drawn above every other line
_BAND_ALPHA = 0.15


# --------------------------------------------------------------------------------------------
# Names, colors, order
# --------------------------------------------------------------------------------------------


def _policy_class(name: str) -> type[BasePolicy] | None:
    """The registered class of ``name``, or None (e.g. a sweep label such as ``cbwk[round]``)."""
    return get_policy_class(name) if name.lower() in POLICIES else None


def policy_color(name: str) -> str:
    """The color of a policy in every figure.

    Parameters
    ----------
    name : str
        Registered policy name, e.g. ``"omd"``.

    Returns
    -------
    str
        A hex color: the class's ``color`` for a registered policy (``"omd"`` is blue); any
        other name, or a class without one, gets a color from a spare palette chosen by a
        stable hash of the name.

    Examples
    --------
    >>> policy_color("omd")
    '#1f77b4'
    """
    cls = _policy_class(name)
    if cls is not None and cls.color is not None:
        return cls.color
    return _EXTRA_COLORS[zlib.crc32(name.encode()) % len(_EXTRA_COLORS)]


def policy_label(name: str) -> str:
    """The readable name of a policy: its class's ``label``, or the name itself.

    Examples
    --------
    >>> policy_label("ts-bwk")
    'TS-BwK'
    """
    cls = _policy_class(name)
    return cls.label if cls is not None and cls.label else name


def _ordered(names: Iterable[str], order: Sequence[str]) -> list[str]:
    """Distinct ``names``, the known ones in ``order``, the others after them sorted."""
    present = set(names)
    known = [n for n in order if n in present]
    return known + sorted(present.difference(order))


def _level_label(level: str) -> str:
    return _LEVEL_LABELS.get(level, level)


def _env_label(env: str) -> str:
    return _ENV_LABELS.get(env, env)


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def _new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (no pyplot, no screen, no global backend switch)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _grid(
    fig: Figure,
    nrows: int,
    ncols: int,
    *,
    sharex: bool | Literal["col", "row"] = False,
    sharey: bool | Literal["col", "row"] = False,
) -> list[list[Axes]]:
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey)
    return [[axes[i, j] for j in range(ncols)] for i in range(nrows)]


def save_figure(
    fig: Figure, path_without_suffix: str | os.PathLike[str], *, dpi: int = 150
) -> tuple[Path, Path]:
    """Write ``fig`` as ``<path>.png`` and ``<path>.svg``, creating missing folders.

    Parameters
    ----------
    fig : Figure
        The figure to save.
    path_without_suffix : str or path-like
        Target path without extension; ``"out/fig1"`` writes ``out/fig1.png`` and
        ``out/fig1.svg``.
    dpi : int, default 150
        Resolution of the PNG.

    Returns
    -------
    tuple of Path
        The PNG and SVG paths.

    Raises
    ------
    ValueError
        If the path already ends in ``.png`` or ``.svg``.

    Notes
    -----
    The SVG carries no date and fixed element ids, so the same figure gives the same file.
    The figure is laid out once, at the PNG's ``dpi``, and both formats draw those positions.
    Where multiprocessing forks its processes (Linux up to Python 3.13), a copy of this process
    writes the SVG while this one writes the PNG: the formats are drawn on two cores, the same
    files as one after the other. When the copy fails, the SVG is written again here, so that
    the error is raised with its cause.
    """
    base = Path(path_without_suffix)
    if base.suffix.lower() in (".png", ".svg"):
        raise InvalidValueError(
            f"path_without_suffix == {str(base)!r} ends in {base.suffix!r}; pass the path "
            f"without it ({str(base.with_suffix(''))!r}) and both .png and .svg are written"
        )
    base.parent.mkdir(parents=True, exist_ok=True)
    png = base.with_name(base.name + ".png")
    svg = base.with_name(base.name + ".svg")
    with _laid_out(fig, dpi):
        child = _forked(lambda: _write_svg(fig, svg))
        try:
            with atomic_path(png) as tmp:  # a Ctrl-C mid-write leaves no truncated figure
                fig.savefig(tmp, dpi=dpi, format="png")
        finally:
            written = child is not None and os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
        if not written:
            _write_svg(fig, svg)
    return png, svg


@contextmanager
def _laid_out(fig: Figure, dpi: int) -> Iterator[None]:
    """Lay ``fig`` out once, as drawing the PNG at ``dpi`` would, and save it without its
    layout engine inside the block: both formats then draw the same positions, and neither
    lays the figure out again (savefig's first pass, about half the cost of a figure).
    The engine is given back afterwards, so the figure can be resized and saved again."""
    engine = fig.get_layout_engine()
    if engine is None:
        yield
        return
    screen = fig.get_dpi()
    fig.set_dpi(dpi)
    try:
        engine.execute(fig)
    finally:
        fig.set_dpi(screen)
    with matplotlib.rc_context(
        {"figure.autolayout": False, "figure.constrained_layout.use": False}
    ):
        fig.set_layout_engine(None)  # None, whatever the rcParams' default layout
    try:
        yield
    finally:
        fig.set_layout_engine(engine)


def _write_svg(fig: Figure, svg: Path) -> None:
    """Write the SVG: no date, element ids from a fixed salt (the same figure, the same file)."""
    with matplotlib.rc_context({"svg.hashsalt": "msroute"}), atomic_path(svg) as tmp:
        fig.savefig(tmp, format="svg", metadata={"Date": None})


def _forked(write: Callable[[], None]) -> int | None:
    """Run ``write`` in a forked copy of this process and return its pid; None where processes
    are not forked here (the caller then writes it itself): only where multiprocessing starts
    its processes by forking, the platform's default or the one this program chose (Linux up
    to Python 3.13; not macOS, where forking a process that may have loaded system frameworks
    is unsafe). The copy exits with 0 when ``write`` returned, 1 on any exception, without
    running this process's exit handlers."""
    method = multiprocessing.get_start_method(allow_none=True)
    if (method or multiprocessing.get_all_start_methods()[0]) != "fork":
        return None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        code = 1
        try:
            write()
            code = 0
        finally:
            os._exit(code)
    return pid


def _policy_handles(policies: Sequence[str], kind: str) -> list[Line2D]:
    """Legend entries for ``policies`` (``kind`` is ``"line"`` or ``"patch"``)."""
    handles = []
    for p in policies:
        if kind == "line":
            handles.append(Line2D([], [], color=policy_color(p), lw=2, label=policy_label(p)))
        else:
            handles.append(
                Line2D(
                    [],
                    [],
                    color=policy_color(p),
                    marker="s",
                    ls="",
                    markersize=9,
                    label=policy_label(p),
                )
            )
    return handles


def _policy_legend(fig: Figure, policies: Sequence[str], kind: Literal["line", "patch"]) -> None:
    """One legend of the policies under the whole figure."""
    fig.legend(
        handles=_policy_handles(policies, kind),
        loc="outside lower center",
        ncols=min(len(policies), 9),
        frameon=False,
    )


def _symlog_threshold(means: np.ndarray) -> float:
    """Linear range of a symlog axis of a signed quantity (see the Notes of ``plot_fig1``)."""
    finite = np.abs(means[np.isfinite(means)])
    peak = float(finite.max()) if finite.size else 0.0
    if not peak > 0:
        return 1.0
    threshold = 10.0 ** (math.floor(math.log10(peak)) - 3)
    negative = means[np.isfinite(means) & (means < 0)]
    if negative.size:
        threshold = max(threshold, 10.0 ** math.ceil(math.log10(float(-negative.min()))))
    return float(threshold)


_NONNEGATIVE_DECADES = 4  # most decades a nonnegative symlog axis shows below its peak's decade


def _nonnegative_threshold(means: np.ndarray) -> float:
    """Linear range of a symlog axis of a quantity that cannot be negative (see ``plot_fig1``).

    The decade of the smallest positive mean, but at most ``_NONNEGATIVE_DECADES`` decades
    below the decade of the largest one.
    """
    finite = means[np.isfinite(means)]
    positive = finite[finite > 0]
    if not positive.size:
        return 1.0
    low = math.floor(math.log10(float(positive.min())))
    peak = math.floor(math.log10(float(positive.max())))
    return float(10.0 ** max(low, peak - _NONNEGATIVE_DECADES))


def _reference_constant(means_at: Mapping[str, Mapping[int, float]]) -> float | None:
    """The ``c`` of the ``c / sqrt(n)`` line of ``plot_fig1`` (see its Notes)."""
    for level in _ordered(means_at, LEVEL_ORDER):
        positive = sorted(s for s, m in means_at[level].items() if s > 0 and m > 0)
        if positive:
            pivot = positive[len(positive) // 2]
            return means_at[level][pivot] * math.sqrt(pivot)
    return None


_PROXY_LEGEND = "solid: paper's proxy $R_1$ with $q_T$"
_TRUE_LINESTYLE = (0, (4.0, 1.6))  # dashes of the true-regret curves
_TRUE_LEGEND = "dashed: true regret $R_1$ vs OPT"
_TRUE_GID = "r1_true"


def plot_fig1(
    rows: Iterable[Row], *, r1_key: str = "r1", true_key: str | None = "r1_true"
) -> Figure:
    """Figure 1: objective and constraint regret of OMD-Approachability against its step.

    Parameters
    ----------
    rows : iterable of mapping
        One row per (``n_dims``, ``level``, ``seed``, ``step``) with the keys ``n_dims``,
        ``level``, ``seed``, ``step``, ``r1`` and ``r2`` (objective regret $R_1(n)$ and
        constraint regret $R_2(n)$ of Section 6.1 at batch endpoint ``step``), and
        optionally ``r1_true`` (the true objective regret against the certified optimum OPT
        of eq. (3)).
    r1_key : str, default "r1"
        Column plotted as $R_1$, e.g. ``"r1_mc"`` for the Monte Carlo estimate.
    true_key : str or None, default "r1_true"
        Column of the true objective regret, drawn dashed next to $R_1$. Rows that lack
        it, or hold a blank or NaN value there, add nothing to the dashed curves; ``None`` (or
        ``true_key == r1_key``) draws none.

    Returns
    -------
    Figure
        Two rows of panels (top $R_1(n)$, bottom $R_2(n)$) and one column per
        number of skill groups ``N`` (titled ``"N = 3"``, ...). Each constraint level is one
        curve: the mean over seeds with a band of ± one sample standard deviation. With the
        true regret, each level has a second curve in the top row: its mean, dashed, in the
        same color, without a band; a second legend above the panels tells the solid proxy
        from the dashed true regret.

    Notes
    -----
    Bands. $R_2$ is a distance and never negative, so its band is clipped at 0; the
    bands of $R_1$ are not (the proxy can dip below 0).

    Axes. The step axis is logarithmic. The value axis of a panel is

    * logarithmic when every band edge (and every dashed mean) is positive;
    * for $R_1$, ``symlog`` otherwise: logarithmic beyond a linear range
      $\\pm\\tau$, where $\\tau$ is three decades below the decade of the
      panel's largest mean magnitude, raised to the decade above the most negative mean if
      any, so that noise around 0 is drawn on a linear scale and not blown up by the log.
      The axis goes down no further than 1.2 times $-\\tau$ or the most negative
      mean, whichever is lower: a band reaching further is cut at the bottom of the panel;
    * for $R_2$, ``symlog`` otherwise (it is exactly 0 once feasible), with
      $\\tau$ the decade of the smallest positive mean or reference-line value (but at
      most four decades below the decade of the largest mean) and the axis starting at 0;
    * linear when every mean is 0 (e.g. $R_2$ of a configuration that is never
      violated).

    Reference line. The black dashed line is $c/\\sqrt{n}$ with $c$ fitted per
    panel so that it passes through the tight curve's mean (of ``r1_key`` in the top row) at
    its median step, the median taken over the steps where that mean is positive (all steps
    while it is; $R_2$ drops to 0 once feasible). Without a tight curve, or if it is
    never positive, the first level (in the order tight, medium, loose, none) with a positive
    mean is used; a panel with no positive mean has no reference line. On a ``symlog`` axis
    the line stops where it enters the linear range (where it would no longer be straight).
    Each panel prints its $c$.
    """
    data = checked_rows(rows, ("n_dims", "level", "step", r1_key, "r2"), "plot_fig1")
    # values[(n_dims, metric)][level][step] -> per-seed values
    values: dict[tuple[int, str], dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    draw_true = true_key is not None and true_key != r1_key
    for row in data:
        n_dims, level, step = get_int(row, "n_dims"), get_str(row, "level"), get_int(row, "step")
        values[(n_dims, "r1")][level][step].append(get_float(row, r1_key))
        values[(n_dims, "r2")][level][step].append(get_float(row, "r2"))
        if draw_true and true_key is not None:
            true_r1 = get_optional_float(row, true_key)
            if true_r1 is not None:
                values[(n_dims, _TRUE_GID)][level][step].append(true_r1)
    dims = sorted({n for n, metric in values if metric == "r1"})
    levels = _ordered((lv for d in values.values() for lv in d), LEVEL_ORDER)
    has_true = any(metric == _TRUE_GID for _, metric in values)

    fig = _new_figure(4.3 * len(dims) + 0.6, 6.6 + (0.2 if has_true else 0.0))
    grid = _grid(fig, 2, len(dims), sharex="col")
    metrics = (("r1", "objective regret $R_1(n)$"), ("r2", "constraint regret $R_2(n)$"))
    for col, n_dims in enumerate(dims):
        for row_i, (metric, ylabel) in enumerate(metrics):
            ax = grid[row_i][col]
            true_curves = values.get((n_dims, _TRUE_GID)) if metric == "r1" else None
            _regret_panel(
                ax,
                values[(n_dims, metric)],
                levels,
                true_curves=true_curves,
                nonnegative=metric == "r2",
            )
            if row_i == 0:
                ax.set_title(f"N = {n_dims}")
            else:
                ax.set_xlabel("OMD step $n$")
            if col == 0:
                ax.set_ylabel(ylabel)
    legend: dict[str, Artist] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if handle.get_gid() != _TRUE_GID:
                legend.setdefault(label, handle)
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="outside lower center",
        ncols=len(legend),
        frameon=False,
    )
    if has_true:  # the key to the line styles of the top row, above it
        fig.legend(
            [
                Line2D([], [], color="0.3", lw=1.8),
                Line2D([], [], color="0.3", lw=1.8, ls=_TRUE_LINESTYLE),
            ],
            [_PROXY_LEGEND, _TRUE_LEGEND],
            loc="outside upper center",
            ncols=2,
            frameon=False,
        )
    return fig


def _mean_band(
    per_step: Mapping[int, Sequence[float]], *, nonnegative: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps, mean and band edges (mean ± std, clipped at 0 if ``nonnegative``) of a curve."""
    steps = np.array(sorted(per_step))
    stats = np.array([mean_std(per_step[s]) for s in steps])
    mean, std = stats[:, 0], stats[:, 1]
    low, high = mean - std, mean + std
    if nonnegative:
        low = np.maximum(low, 0.0)
    return steps, mean, low, high


def _regret_panel(
    ax: Axes,
    curves: Mapping[str, Mapping[int, Sequence[float]]],
    levels: Sequence[str],
    *,
    true_curves: Mapping[str, Mapping[int, Sequence[float]]] | None = None,
    nonnegative: bool = False,
) -> None:
    """One panel of ``plot_fig1``: a mean ± std curve per level and the reference line.

    ``true_curves`` adds a dashed curve per level; ``nonnegative`` clips the bands at 0 and
    starts the value axis at 0.
    """
    means: list[np.ndarray] = []
    edges: list[np.ndarray] = []
    means_at: dict[str, dict[int, float]] = {}
    for level in levels:
        if level not in curves:
            continue
        color = _LEVEL_COLORS.get(level, policy_color(level))
        steps, mean, low, high = _mean_band(curves[level], nonnegative=nonnegative)
        means_at[level] = dict(zip(steps.tolist(), mean.tolist(), strict=True))
        ax.plot(
            steps,
            mean,
            color=color,
            lw=1.8,
            label=_level_label(level),
            zorder=3,
            clip_on=not nonnegative,  # a curve at 0 lies on the bottom spine: draw it whole
        )
        ax.fill_between(steps, low, high, color=color, alpha=_BAND_ALPHA, lw=0, zorder=2)
        means.append(mean)
        edges.extend([low, high])
        if true_curves is not None and level in true_curves:
            steps, mean, _, _ = _mean_band(true_curves[level], nonnegative=nonnegative)
            ax.plot(
                steps,
                mean,
                color=color,
                lw=1.8,
                ls=_TRUE_LINESTYLE,
                label=f"{_level_label(level)}, true regret",
                gid=_TRUE_GID,
                zorder=3,
            )
            means.append(mean)
            edges.append(mean)
    c = _reference_constant(means_at)
    ref_x = np.array(sorted({s for m in means_at.values() for s in m if s > 0}), dtype=float)
    ref_y = c / np.sqrt(ref_x) if c is not None else np.empty(0)
    ax.set_xscale("log")
    ax.grid(True, which="major", alpha=0.3)
    all_means = np.concatenate(means)
    finite_means = all_means[np.isfinite(all_means)]
    band = np.concatenate(edges)
    band = band[np.isfinite(band)]
    log = band.size > 0 and bool(np.all(band > 0))
    signed_symlog = False
    if log:
        ax.set_yscale("log")
    elif np.any(finite_means != 0):
        if nonnegative:
            threshold = _nonnegative_threshold(np.concatenate([finite_means, ref_y]))
        else:
            threshold = _symlog_threshold(finite_means)
            signed_symlog = True
        ax.set_yscale("symlog", linthresh=threshold)
        keep = ref_y >= threshold  # the reference line only where the axis is logarithmic
        ref_x, ref_y = ref_x[keep], ref_y[keep]
    if c is not None:
        ax.plot(
            ref_x,
            ref_y,
            ls="--",
            color="black",
            lw=1.2,
            zorder=4,
            label=r"$c/\sqrt{n}$",
            gid="reference",
        )
        ax.text(
            0.98, 0.96, f"c = {c:.3g}", transform=ax.transAxes, ha="right", va="top", fontsize=8
        )
    if log:
        return
    if nonnegative:
        ax.set_ylim(bottom=0.0)
        return
    if signed_symlog:  # the negative side shows the linear range, not decades of noise
        lowest = 1.2 * min(-threshold, float(finite_means.min()))
        bottom, top = ax.get_ylim()
        ax.set_ylim(max(bottom, lowest), top)
    ax.axhline(0.0, color="0.6", lw=0.8, zorder=1)


def _grouped_bars(
    ax: Axes,
    groups: Sequence[str],
    policies: Sequence[str],
    stats: Mapping[tuple[str, str], tuple[float, float]],
    *,
    errors: bool,
) -> None:
    """Bars of ``stats[(group, policy)] = (height, err)``; missing pairs are left empty (NaN)."""
    x = np.arange(len(groups), dtype=float)
    width = 0.8 / max(len(policies), 1)
    for j, policy in enumerate(policies):
        heights = [stats.get((g, policy), (math.nan, math.nan))[0] for g in groups]
        errs = [stats.get((g, policy), (math.nan, math.nan))[1] for g in groups]
        ax.bar(
            x - 0.4 + width * (j + 0.5),
            heights,
            width,
            yerr=errs if errors else None,
            color=policy_color(policy),
            edgecolor="black" if policy == "omd" else "none",
            linewidth=0.8,
            error_kw={"elinewidth": 0.8, "capsize": 1.5, "ecolor": "0.25"},
            label=policy_label(policy),
            gid=policy,
        )
    ax.set_xticks(x, [_level_label(g) for g in groups])
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)


#: Reward axes of Figure 2: "differences" zooms on the bars' range, "full" starts at 0.
REWARD_AXES: tuple[str, ...] = ("differences", "full")


def _zoom_reward_axis(ax: Axes, stats: Mapping[tuple[str, str], tuple[float, float]]) -> None:
    """Limit a bar panel's axis to the range of the means ± std (plus a margin), so that the
    differences between policies are visible; the axis is marked as not starting at 0."""
    lows = [m - s for m, s in stats.values() if math.isfinite(m)]
    highs = [m + s for m, s in stats.values() if math.isfinite(m)]
    if not lows:
        return
    lo, hi = min(lows), max(highs)
    pad = max(0.15 * (hi - lo), 1e-3 * max(abs(hi), 1.0))
    ax.set_ylim(lo - pad, hi + pad)
    ax.text(
        0.0,
        1.0,
        "axis does not start at 0",
        transform=ax.transAxes,
        fontsize=7,
        ha="left",
        va="bottom",
        color="0.4",
    )


def plot_fig2(rows: Iterable[Row], *, reward_axis: str = "differences") -> Figure:
    """Figure 2: time-averaged reward and share of feasible runs, per level and policy.

    Parameters
    ----------
    rows : iterable of mapping
        One row per (``env``, ``level``, ``policy``, ``seed``) with the keys ``env``,
        ``level``, ``policy``, ``seed``, ``avg_reward`` (time-averaged realized reward of the
        run) and ``feasible`` (whether the run ends inside the constraint box; ``True``/
        ``False``, ``1``/``0`` or their string forms).
    reward_axis : {"differences", "full"}, default "differences"
        "differences" limits the reward axis to the range of the bars (mean ± std), so that
        policies that earn nearly the same can be told apart; "full" starts it at 0 as the
        paper's figure does.

    Returns
    -------
    Figure
        One row of panels per environment (stochastic, then regime-switching). Left: grouped
        bars, one group per constraint level and one bar per policy, of the mean ``avg_reward``
        over seeds with ± one sample standard deviation as error bars. Right: percentage of
        seeds whose run is feasible. When the rows also carry ``avg_workload`` and
        ``budget_bound``, a third panel shows the spend against the budget: the mean over
        seeds of ``avg_workload / budget_bound`` in percent, with the budget at 100% (levels
        without a budget are left empty). One legend for the whole figure;
        OMD-Approachability's bars are outlined.
    """
    if reward_axis not in REWARD_AXES:
        raise InvalidValueError(
            f"reward_axis == {reward_axis!r}, must be one of {', '.join(REWARD_AXES)}"
        )
    data = checked_rows(rows, ("env", "level", "policy", "avg_reward", "feasible"), "plot_fig2")
    reward: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    feasible: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    spend: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    with_spend = all(
        row.get("avg_workload") not in (None, "") and row.get("budget_bound") not in (None, "")
        for row in data
    )
    for row in data:
        key = (get_str(row, "env"), get_str(row, "level"), get_str(row, "policy"))
        reward[key].append(get_float(row, "avg_reward"))
        feasible[key].append(get_bool(row, "feasible"))
        if with_spend:
            budget = get_float(row, "budget_bound")
            if math.isfinite(budget) and budget > 0:
                spend[key].append(100.0 * get_float(row, "avg_workload") / budget)
    envs = _ordered((k[0] for k in reward), _ENV_ORDER)
    policies = _ordered((k[2] for k in reward), _POLICY_ORDER)

    fig = _new_figure(18.0 if with_spend else 12.0, 3.3 * len(envs) + 0.7)
    grid = _grid(fig, len(envs), 3 if with_spend else 2)
    for i, env in enumerate(envs):
        levels = _ordered((k[1] for k in reward if k[0] == env), LEVEL_ORDER)
        reward_stats = {(k[1], k[2]): mean_std(v) for k, v in reward.items() if k[0] == env}
        feasible_pct = {
            (k[1], k[2]): (100.0 * float(np.mean(v)), 0.0)
            for k, v in feasible.items()
            if k[0] == env
        }
        left, right = grid[i][:2]
        if with_spend:
            ax = grid[i][2]
            used = {(k[1], k[2]): mean_std(v) for k, v in spend.items() if k[0] == env and v}
            _grouped_bars(ax, levels, policies, used, errors=True)
            ax.axhline(100.0, color="0.2", linestyle="--", linewidth=1.0, gid="budget")
            ax.set_ylabel("workload, % of the budget")
            ax.set_title(f"{_env_label(env)}: spend against budget")
        _grouped_bars(left, levels, policies, reward_stats, errors=True)
        if reward_axis == "differences":
            _zoom_reward_axis(left, reward_stats)
        left.set_ylabel("time-averaged reward")
        left.set_title(f"{_env_label(env)}: average reward (mean ± std over seeds)")
        _grouped_bars(right, levels, policies, feasible_pct, errors=False)
        right.set_ylim(0.0, 105.0)
        right.set_ylabel("% feasible runs")
        right.set_title(f"{_env_label(env)}: feasible runs")
    _policy_legend(fig, policies, "patch")
    return fig


def plot_fig3(rows: Iterable[Row]) -> Figure:
    """Figure 3: rolling-average reward per policy over the rounds.

    Parameters
    ----------
    rows : iterable of mapping
        One row per (``env``, ``level``, ``policy``, ``round``) with the keys ``env``,
        ``level``, ``policy``, ``round``, ``mean`` and ``std``: the rolling-average reward
        at that round, already averaged over seeds, and its standard deviation over seeds.

    Returns
    -------
    Figure
        One row per environment and one column per constraint level present (e.g. tight and
        loose), sharing the value axis within a row. Each policy is a line with a light
        ± ``std`` band; OMD-Approachability is drawn on top. One legend for the whole figure.
    """
    data = checked_rows(rows, ("env", "level", "policy", "round", "mean", "std"), "plot_fig3")
    series: dict[tuple[str, str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for row in data:
        key = (get_str(row, "env"), get_str(row, "level"), get_str(row, "policy"))
        series[key].append((get_float(row, "round"), get_float(row, "mean"), get_float(row, "std")))
    envs = _ordered((k[0] for k in series), _ENV_ORDER)
    levels = _ordered((k[1] for k in series), LEVEL_ORDER)
    policies = _ordered((k[2] for k in series), _POLICY_ORDER)

    fig = _new_figure(4.6 * len(levels) + 0.6, 3.2 * len(envs) + 0.7)
    grid = _grid(fig, len(envs), len(levels), sharex=True, sharey="row")
    for i, env in enumerate(envs):
        for j, level in enumerate(levels):
            ax = grid[i][j]
            for policy in policies:
                points = series.get((env, level, policy))
                if not points:
                    continue
                arr = np.array(sorted(points))
                rnd, mean, std = arr[:, 0], arr[:, 1], arr[:, 2]
                color = policy_color(policy)
                z = _TOP_ZORDER if policy == "omd" else 3.0
                lw = 2.0 if policy == "omd" else 1.3
                ax.fill_between(
                    rnd, mean - std, mean + std, color=color, alpha=_BAND_ALPHA, lw=0, zorder=z - 1
                )
                ax.plot(rnd, mean, color=color, lw=lw, zorder=z, label=policy_label(policy))
            ax.set_title(f"{_env_label(env)}, {_level_label(level).lower()}")
            ax.grid(True, alpha=0.3)
            if i == len(envs) - 1:
                ax.set_xlabel("round $t$")
            if j == 0:
                ax.set_ylabel("rolling-average reward")
    _policy_legend(fig, policies, "line")
    return fig


def plot_contextual(rows: Iterable[Row]) -> Figure:
    """The contextual experiment: average reward and regret against the per-context OPT.

    Parameters
    ----------
    rows : iterable of mapping
        One row per (``policy``, ``seed``) with the keys ``policy``, ``seed``, ``avg_reward``,
        ``feasible`` and ``regret`` (regret against the best fixed feasible routing policy of
        each context), and optionally ``opt`` (that benchmark's average reward).

    Returns
    -------
    Figure
        Two panels. Left: mean ± sample standard deviation of ``avg_reward`` per policy, with
        the share of feasible seeds under each policy's name and, when rows carry ``opt``, the
        mean OPT over seeds (each seed counted once) as a dashed horizontal line. Right: mean
        ± standard deviation of ``regret`` per policy.
    """
    data = checked_rows(
        rows, ("policy", "seed", "avg_reward", "feasible", "regret"), "plot_contextual"
    )
    reward: dict[str, list[float]] = defaultdict(list)
    regret: dict[str, list[float]] = defaultdict(list)
    feasible: dict[str, list[bool]] = defaultdict(list)
    opt_by_seed: dict[str, float] = {}
    for row in data:
        policy = get_str(row, "policy")
        reward[policy].append(get_float(row, "avg_reward"))
        regret[policy].append(get_float(row, "regret"))
        feasible[policy].append(get_bool(row, "feasible"))
        if "opt" in row and str(row["opt"]).strip() != "":
            opt_by_seed.setdefault(get_str(row, "seed"), get_float(row, "opt"))
    policies = _ordered(reward, _POLICY_ORDER)
    x = np.arange(len(policies), dtype=float)
    colors = [policy_color(p) for p in policies]
    ticks = [
        f"{policy_label(p)}\n{100.0 * float(np.mean(feasible[p])):.0f}% feasible" for p in policies
    ]

    fig = _new_figure(max(8.0, 3.2 * len(policies) + 1.0), 3.8)
    left, right = _grid(fig, 1, 2)[0]
    for ax, values, ylabel in (
        (left, reward, "time-averaged reward"),
        (right, regret, "regret vs per-context OPT"),
    ):
        stats = [mean_std(values[p]) for p in policies]
        ax.bar(
            x,
            [s[0] for s in stats],
            0.6,
            yerr=[s[1] for s in stats],
            color=colors,
            edgecolor=["black" if p == "omd" else "none" for p in policies],
            error_kw={"elinewidth": 0.8, "capsize": 3, "ecolor": "0.25"},
        )
        ax.set_xticks(x, ticks)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    if opt_by_seed:
        opt = float(np.mean(list(opt_by_seed.values())))
        left.axhline(opt, ls="--", color="black", lw=1.2, zorder=5, gid="opt")
        left.text(
            0.99,
            opt,
            f"OPT (mean over seeds) = {opt:.3g}",
            transform=left.get_yaxis_transform(),
            ha="right",
            va="bottom",
            fontsize=8,
        )
        bottom, top = left.get_ylim()
        left.set_ylim(bottom, max(top, opt + 0.08 * (opt - bottom)))
    left.set_title("Average reward (mean ± std over seeds)")
    right.set_title("Regret (mean ± std over seeds)")
    return fig


def _budget_positions(budgets: Sequence[str]) -> tuple[dict[str, float], bool]:
    """x position of each budget level ("none" right of the largest) and whether the axis is
    logarithmic (all numeric levels > 0)."""
    numeric = sorted(float(b) for b in budgets if b != "none")
    log = bool(numeric) and numeric[0] > 0
    pos = {b: float(b) for b in budgets if b != "none"}
    if "none" in budgets:
        if not numeric:
            pos["none"] = 1.0
        elif log:
            pos["none"] = numeric[-1] * 2.0
        else:
            pos["none"] = numeric[-1] + max((numeric[-1] - numeric[0]) / 4.0, 1.0)
    return pos, log


def plot_bench(rows: Iterable[Row]) -> Figure:
    """``msroute bench``: reward against budget, with the certified OPT frontier.

    Parameters
    ----------
    rows : iterable of mapping
        One row per (``budget``, ``policy``, ``seed``) with the keys ``scenario``, ``budget``
        (a number or ``"none"``), ``policy``, ``seed``, ``avg_reward``, ``opt_reward`` and
        ``feasible``.

    Returns
    -------
    Figure
        Left: OPT (the mean over seeds of the best fixed feasible policy of eq. (3)) as a line
        against the budget, and each policy as a point at its mean time-averaged reward over
        the seeds: filled when every run met the budget, hollow when some did not, an ``x``
        when none did; policies are offset a little along the budget axis. Right: the mean
        regret to the frontier (OPT - reward) of the feasible runs per policy and budget.
        ``"none"`` (unconstrained) is drawn right of the largest budget.
    """
    data = checked_rows(
        rows,
        ("scenario", "budget", "policy", "seed", "avg_reward", "opt_reward", "feasible"),
        "plot_bench",
    )
    budgets = list(dict.fromkeys(get_str(r, "budget") for r in data))
    pos, log = _budget_positions(budgets)
    order = sorted(budgets, key=lambda b: pos[b])
    policies = _ordered((get_str(r, "policy") for r in data), _POLICY_ORDER)
    opt: dict[str, dict[str, float]] = defaultdict(dict)
    reward: dict[tuple[str, str], list[float]] = defaultdict(list)
    feasible: dict[tuple[str, str], list[bool]] = defaultdict(list)
    regret: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in data:
        b, policy = get_str(r, "budget"), get_str(r, "policy")
        opt[b][get_str(r, "seed")] = get_float(r, "opt_reward")
        reward[(b, policy)].append(get_float(r, "avg_reward"))
        feasible[(b, policy)].append(get_bool(r, "feasible"))
        if get_bool(r, "feasible"):
            regret[(b, policy)].append(get_float(r, "opt_reward") - get_float(r, "avg_reward"))

    fig = _new_figure(12.0, 4.4)
    left, right = _grid(fig, 1, 2)[0]
    xs = [pos[b] for b in order]
    left.plot(xs, [float(np.mean(list(opt[b].values()))) for b in order], color="black", lw=2)
    spread = 0.25 if log else 0.02 * (max(xs) - min(xs) if len(xs) > 1 else 1.0)
    for j, policy in enumerate(policies):
        offset = (j - (len(policies) - 1) / 2) / max(len(policies), 1) * spread
        color = policy_color(policy)
        for b in order:
            if not reward[(b, policy)]:
                continue
            share = float(np.mean(feasible[(b, policy)]))
            left.plot(
                [pos[b] * (1.0 + offset) if log else pos[b] + offset],
                [float(np.mean(reward[(b, policy)]))],
                marker="x" if share == 0.0 else "o",
                ls="",
                markersize=6,
                color=color,
                markerfacecolor=color if share == 1.0 else "none",
                zorder=_TOP_ZORDER if policy == "omd" else 3,
            )
        pts = [(pos[b], float(np.mean(regret[(b, policy)]))) for b in order if regret[(b, policy)]]
        if pts:
            right.plot(*zip(*pts, strict=True), marker="o", color=color, lw=1.2)
    for ax in (left, right):
        if log:
            ax.set_xscale("log")
        ax.set_xticks(xs, [("none" if b == "none" else f"{float(b):.3g}") for b in order])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("budget")
    left.set_ylabel("time-averaged reward (mean over seeds)")
    left.set_title(f"{get_str(data[0], 'scenario')}: line OPT; ● all runs feasible, ○ some, x none")
    right.axhline(0.0, color="0.6", lw=0.8)
    right.set_ylabel("OPT - reward (feasible runs)")
    right.set_title("regret to the frontier (mean over feasible runs)")
    handles = [Line2D([], [], color="black", lw=2, label="OPT (eq. (3))")]
    handles += _policy_handles(policies, "line")
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=math.ceil(len(handles) / 2),
        frameon=False,
    )  # two rows: ten entries in one row are wider than the two panels
    return fig


#: The figure of each experiment of ``msroute reproduce``, by experiment name.
FIGURES: dict[str, Callable[..., Figure]] = {
    "fig1": plot_fig1,
    "fig2": plot_fig2,
    "fig3": plot_fig3,
    "contextual": plot_contextual,
    "bench": plot_bench,
}
