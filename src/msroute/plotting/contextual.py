"""The contextual experiment's figure: reward (with the per-context OPT) and regret per policy."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from matplotlib.figure import Figure

from msroute.plotting.canvas import new_figure, panels
from msroute.plotting.rows import (
    Row,
    checked_rows,
    get_bool,
    get_float,
    get_str,
    mean_std,
)
from msroute.plotting.style import (
    POLICY_ORDER,
    ordered,
    policy_color,
    policy_label,
)

__all__ = ["plot_contextual"]


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
    policies = ordered(reward, POLICY_ORDER)
    x = np.arange(len(policies), dtype=float)
    colors = [policy_color(p) for p in policies]
    ticks = [
        f"{policy_label(p)}\n{100.0 * float(np.mean(feasible[p])):.0f}% feasible" for p in policies
    ]

    fig = new_figure(max(8.0, 3.2 * len(policies) + 1.0), 3.8)
    left, right = panels(fig, 1, 2)[0]
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
