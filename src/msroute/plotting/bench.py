"""``msroute bench``'s figure: reward against budget, with the certified OPT frontier."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from msroute.plotting.canvas import new_figure, panels
from msroute.plotting.rows import (
    Row,
    checked_rows,
    get_bool,
    get_float,
    get_str,
)
from msroute.plotting.style import (
    POLICY_ORDER,
    TOP_ZORDER,
    ordered,
    policy_color,
    policy_handles,
)

__all__ = ["plot_bench"]


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
    policies = ordered((get_str(r, "policy") for r in data), POLICY_ORDER)
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

    fig = new_figure(12.0, 4.4)
    left, right = panels(fig, 1, 2)[0]
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
                zorder=TOP_ZORDER if policy == "omd" else 3,
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
    handles += policy_handles(policies, "line")
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=math.ceil(len(handles) / 2),
        frameon=False,
    )  # two rows: ten entries in one row are wider than the two panels
    return fig
