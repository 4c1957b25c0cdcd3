"""The reward-spend frontier of routing on recorded outcomes (``msroute bench llmrouter``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from msroute.plotting.style import policy_color, policy_label

__all__ = ["plot_frontier"]


def _num(row: Mapping[str, Any], key: str) -> float:
    value = row[key]
    return float("nan") if value in ("", None) else float(value)


def _flag(row: Mapping[str, Any], key: str) -> bool:
    value = row[key]
    return value if isinstance(value, bool) else str(value).lower() == "true"


def plot_frontier(rows: Iterable[Mapping[str, Any]], cost: str = "usd") -> Figure:
    """Reward against spend per query, one panel per team size M.

    Parameters
    ----------
    rows : iterable of mapping
        One row per (``m_draws``, ``budget``, ``policy``, ``seed``) with ``avg_reward``,
        ``avg_<cost>``, ``feasible``, ``opt_reward`` (OPT^ctx), ``opt_flat_reward`` (OPT) and
        ``best_single`` (``msroute.experiments.outcomes.run_outcome_bench``).
    cost : str, default "usd"
        The budgeted cost (the x axis).

    Returns
    -------
    Figure
        Against the budget: OPT^ctx (black), OPT (grey, dashed) and the best single model the
        budget affords (brown steps). Each policy at each budget is a point at its mean spend
        and mean reward over the seeds, joined across budgets: filled when every run met the
        budget, hollow when some did not.
    """
    data = list(rows)
    spend_key = f"avg_{cost}"
    teams = sorted({int(_num(r, "m_draws")) for r in data})
    fig = Figure(figsize=(6.0 * len(teams), 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(teams), squeeze=False)[0]
    policies = list(dict.fromkeys(str(r["policy"]) for r in data))
    for ax, m in zip(axes, teams, strict=True):
        sel = [r for r in data if int(_num(r, "m_draws")) == m]
        budgets = sorted({float(r["budget"]) for r in sel})
        ref: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
        pts: dict[str, dict[float, list[tuple[float, float, bool]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for r in sel:
            b = float(r["budget"])
            for key in ("opt_reward", "opt_flat_reward", "best_single"):
                ref[key][b].append(_num(r, key))
            pts[str(r["policy"])][b].append(
                (_num(r, spend_key), _num(r, "avg_reward"), _flag(r, "feasible"))
            )
        for key, style in (
            ("opt_reward", {"color": "black", "lw": 2.0}),
            ("opt_flat_reward", {"color": "0.5", "lw": 1.5, "ls": "--"}),
            ("best_single", {"color": "saddlebrown", "lw": 1.5, "drawstyle": "steps-post"}),
        ):
            ax.plot(budgets, [float(np.nanmean(ref[key][b])) for b in budgets], **style)
        for policy in policies:
            color = policy_color(policy)
            xs, ys, fills = [], [], []
            for b in budgets:
                runs = pts[policy].get(b)
                if not runs:
                    continue
                xs.append(float(np.mean([p[0] for p in runs])))
                ys.append(float(np.mean([p[1] for p in runs])))
                fills.append(all(p[2] for p in runs))
            ax.plot(xs, ys, color=color, lw=1.0, alpha=0.7)
            for x, y, ok in zip(xs, ys, fills, strict=True):
                ax.plot(
                    [x],
                    [y],
                    marker="o",
                    ls="",
                    color=color,
                    markersize=7,
                    markerfacecolor=color if ok else "none",
                    zorder=5 if policy == "omd" else 3,
                )
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        ax.set_xlabel(f"{cost} per query (budget, or the policy's mean spend)")
        ax.set_ylabel("accuracy (mean reward per query)")
        ax.set_title(f"team of M = {m}")
    handles = [
        Line2D([], [], color="black", lw=2.0, label="OPT^ctx (per task)"),
        Line2D([], [], color="0.5", lw=1.5, ls="--", label="OPT (one routing)"),
        Line2D([], [], color="saddlebrown", lw=1.5, label="best single model"),
    ]
    handles += [
        Line2D([], [], color=policy_color(p), marker="o", label=policy_label(p)) for p in policies
    ]
    handles.append(
        Line2D(
            [],
            [],
            color="0.3",
            marker="o",
            ls="",
            markerfacecolor="none",
            label="hollow: over budget in some run",
        )
    )
    fig.legend(handles=handles, loc="outside right center", fontsize=8)
    return fig
