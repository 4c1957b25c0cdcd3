"""Figure 1: the objective and constraint regret of OMD-Approachability against its step,
with the axes chosen for quantities that are signed (the proxy regret) or not (a distance)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from msroute.plotting.canvas import new_figure, panels
from msroute.plotting.rows import (
    Row,
    checked_rows,
    get_float,
    get_int,
    get_optional_float,
    get_str,
    mean_std,
)
from msroute.plotting.style import (
    BAND_ALPHA,
    LEVEL_COLORS,
    LEVEL_ORDER,
    level_label,
    ordered,
    policy_color,
)

__all__ = ["plot_fig1"]


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
    for level in ordered(means_at, LEVEL_ORDER):
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
    levels = ordered((lv for d in values.values() for lv in d), LEVEL_ORDER)
    has_true = any(metric == _TRUE_GID for _, metric in values)

    fig = new_figure(4.3 * len(dims) + 0.6, 6.6 + (0.2 if has_true else 0.0))
    grid = panels(fig, 2, len(dims), sharex="col")
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
        color = LEVEL_COLORS.get(level, policy_color(level))
        steps, mean, low, high = _mean_band(curves[level], nonnegative=nonnegative)
        means_at[level] = dict(zip(steps.tolist(), mean.tolist(), strict=True))
        ax.plot(
            steps,
            mean,
            color=color,
            lw=1.8,
            label=level_label(level),
            zorder=3,
            clip_on=not nonnegative,  # a curve at 0 lies on the bottom spine: draw it whole
        )
        ax.fill_between(steps, low, high, color=color, alpha=BAND_ALPHA, lw=0, zorder=2)
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
                label=f"{level_label(level)}, true regret",
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
