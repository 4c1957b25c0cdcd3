"""Figure 2: reward, feasible runs and spend against every bound, per constraint level and
policy, in each environment."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from msroute.errors import InvalidValueError
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
    ENV_ORDER,
    LEVEL_ORDER,
    POLICY_ORDER,
    env_label,
    level_label,
    ordered,
    policy_color,
    policy_label,
    policy_legend,
)

__all__ = ["REWARD_AXES", "plot_fig2"]


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
    ax.set_xticks(x, [level_label(g) for g in groups])
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)


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
    envs = ordered((k[0] for k in reward), ENV_ORDER)
    policies = ordered((k[2] for k in reward), POLICY_ORDER)

    fig = new_figure(18.0 if with_spend else 12.0, 3.3 * len(envs) + 0.7)
    grid = panels(fig, len(envs), 3 if with_spend else 2)
    for i, env in enumerate(envs):
        levels = ordered((k[1] for k in reward if k[0] == env), LEVEL_ORDER)
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
            ax.set_title(f"{env_label(env)}: spend against budget")
        _grouped_bars(left, levels, policies, reward_stats, errors=True)
        if reward_axis == "differences":
            _zoom_reward_axis(left, reward_stats)
        left.set_ylabel("time-averaged reward")
        left.set_title(f"{env_label(env)}: average reward (mean ± std over seeds)")
        _grouped_bars(right, levels, policies, feasible_pct, errors=False)
        right.set_ylim(0.0, 105.0)
        right.set_ylabel("% feasible runs")
        right.set_title(f"{env_label(env)}: feasible runs")
    policy_legend(fig, policies, "patch")
    return fig
