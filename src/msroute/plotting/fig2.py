"""Figure 2: reward, feasible runs and spend against every bound, per constraint level and
policy, in each environment."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

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
    stats: Mapping[tuple[str, str], tuple[float, float, float]],
    *,
    errors: bool,
) -> None:
    """Bars of ``stats[(group, policy)] = (height, low, high)``, whiskers from ``low`` to
    ``high`` when ``errors``; missing pairs are left empty (NaN)."""
    x = np.arange(len(groups), dtype=float)
    width = 0.8 / max(len(policies), 1)
    for j, policy in enumerate(policies):
        cells = [stats.get((g, policy), (math.nan, math.nan, math.nan)) for g in groups]
        heights = [c[0] for c in cells]
        spread = [[c[0] - c[1] for c in cells], [c[2] - c[0] for c in cells]]
        ax.bar(
            x - 0.4 + width * (j + 0.5),
            heights,
            width,
            yerr=spread if errors else None,
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


def _mean_band(values: Sequence[float]) -> tuple[float, float, float]:
    """The mean and the mean ± one sample standard deviation."""
    mean, std = mean_std(values)
    return mean, mean - std, mean + std


def _median_range(values: Sequence[float]) -> tuple[float, float, float]:
    """The median, the lowest and the highest value: a spread that stays inside the values'
    range (a spend is never below 0, as mean - std of a skewed spend can be)."""
    arr = np.asarray(values, dtype=float)
    return float(np.median(arr)), float(arr.min()), float(arr.max())


class _Spend(NamedTuple):
    """A bounded cost drawn in Figure 2: its per-run time average and its bound (row keys)."""

    value: str
    bound: str
    what: str
    bound_name: str


#: The bounded costs of Figure 2's rows (Table 1: the workload budget and the cap on flagged
#: experts), each drawn in its own panel when the rows carry it.
_SPENDS: tuple[_Spend, ...] = (
    _Spend("avg_workload", "budget_bound", "workload", "budget"),
    _Spend("avg_experts", "expert_cap", "flagged experts", "cap"),
)


#: Reward axes of Figure 2: "differences" zooms on the bars' range, "full" starts at 0.
REWARD_AXES: tuple[str, ...] = ("differences", "full")


def _zoom_reward_axis(
    ax: Axes, stats: Mapping[tuple[str, str], tuple[float, float, float]]
) -> None:
    """Limit a bar panel's axis to the range of the means ± std (plus a margin), so that the
    differences between policies are visible; the axis is marked as not starting at 0."""
    lows = [low for m, low, _ in stats.values() if math.isfinite(m)]
    highs = [high for m, _, high in stats.values() if math.isfinite(m)]
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
    """Figure 2: time-averaged reward, share of feasible runs and spend against every bound,
    per level and policy.

    Parameters
    ----------
    rows : iterable of mapping
        One row per (``env``, ``level``, ``policy``, ``seed``) with the keys ``env``,
        ``level``, ``policy``, ``seed``, ``avg_reward`` (time-averaged realized reward of the
        run) and ``feasible`` (whether the run ends inside the constraint box; ``True``/
        ``False``, ``1``/``0`` or their string forms); optionally the bounded costs
        ``avg_workload`` with ``budget_bound`` and ``avg_experts`` with ``expert_cap`` (the
        run's time-averaged cost and its bound, ``inf`` where the level has none).
    reward_axis : {"differences", "full"}, default "differences"
        "differences" limits the reward axis to the range of the bars (mean ± std), so that
        policies that earn nearly the same can be told apart; "full" starts it at 0 as the
        paper's figure does.

    Returns
    -------
    Figure
        One row of panels per environment (stochastic, then regime-switching). First: grouped
        bars, one group per constraint level and one bar per policy, of the mean ``avg_reward``
        over seeds with ± one sample standard deviation as error bars. Second: percentage of
        seeds whose run is feasible. Then one panel per bounded cost the rows carry (the
        workload against the budget, the flagged experts against the cap): each run's time
        average in percent of its bound, the bar at the median over seeds and the whisker from
        the lowest to the highest seed, with the bound at 100%; a whisker above the line is a
        run that breaks that bound. Levels without the bound are left out. One legend for
        the whole figure; OMD-Approachability's bars are outlined.

    Notes
    -----
    Every bounded cost gets a panel because any of them can be the one that binds: on the
    paper's instances Thompson sampling stays well within the workload budget at the tight and
    medium levels and is infeasible there by the cap on flagged experts alone.
    """
    if reward_axis not in REWARD_AXES:
        raise InvalidValueError(
            f"reward_axis == {reward_axis!r}, must be one of {', '.join(REWARD_AXES)}"
        )
    data = checked_rows(rows, ("env", "level", "policy", "avg_reward", "feasible"), "plot_fig2")
    reward: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    feasible: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    spends = [
        spend
        for spend in _SPENDS
        if all(row.get(spend.value) not in (None, "") for row in data)
        and all(row.get(spend.bound) not in (None, "") for row in data)
    ]
    spent: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for row in data:
        key = (get_str(row, "env"), get_str(row, "level"), get_str(row, "policy"))
        reward[key].append(get_float(row, "avg_reward"))
        feasible[key].append(get_bool(row, "feasible"))
        for spend in spends:
            bound = get_float(row, spend.bound)
            if math.isfinite(bound) and bound > 0:
                spent[(*key, spend.value)].append(100.0 * get_float(row, spend.value) / bound)
    envs = ordered((k[0] for k in reward), ENV_ORDER)
    policies = ordered((k[2] for k in reward), POLICY_ORDER)

    n_panels = 2 + len(spends)
    fig = new_figure(6.0 * n_panels, 3.3 * len(envs) + 0.7)
    grid = panels(fig, len(envs), n_panels)
    for i, env in enumerate(envs):
        levels = ordered((k[1] for k in reward if k[0] == env), LEVEL_ORDER)
        reward_stats = {(k[1], k[2]): _mean_band(v) for k, v in reward.items() if k[0] == env}
        feasible_pct = {
            (k[1], k[2]): (100.0 * float(np.mean(v)),) * 3
            for k, v in feasible.items()
            if k[0] == env
        }
        left, right = grid[i][:2]
        for ax, spend in zip(grid[i][2:], spends, strict=True):
            used = {
                (k[1], k[2]): _median_range(v)
                for k, v in spent.items()
                if k[0] == env and k[3] == spend.value and v
            }
            bounded = [level for level in levels if any(k[0] == level for k in used)]
            _grouped_bars(ax, bounded, policies, used, errors=True)
            ax.axhline(100.0, color="0.2", linestyle="--", linewidth=1.0, gid=spend.bound)
            ax.set_ylim(bottom=0.0)
            ax.set_ylabel(
                f"{spend.what}, % of the {spend.bound_name}\n(median; lowest to highest seed)"
            )
            ax.set_title(f"{env_label(env)}: {spend.what} against {spend.bound_name}")
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
