"""Figure 3: the rolling-average reward of each policy over the rounds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from matplotlib.figure import Figure

from msroute.plotting.canvas import new_figure, panels
from msroute.plotting.rows import (
    Row,
    checked_rows,
    get_float,
    get_str,
)
from msroute.plotting.style import (
    BAND_ALPHA,
    ENV_ORDER,
    LEVEL_ORDER,
    POLICY_ORDER,
    TOP_ZORDER,
    env_label,
    level_label,
    ordered,
    policy_color,
    policy_label,
    policy_legend,
)

__all__ = ["plot_fig3"]


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
    envs = ordered((k[0] for k in series), ENV_ORDER)
    levels = ordered((k[1] for k in series), LEVEL_ORDER)
    policies = ordered((k[2] for k in series), POLICY_ORDER)

    fig = new_figure(4.6 * len(levels) + 0.6, 3.2 * len(envs) + 0.7)
    grid = panels(fig, len(envs), len(levels), sharex=True, sharey="row")
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
                z = TOP_ZORDER if policy == "omd" else 3.0
                lw = 2.0 if policy == "omd" else 1.3
                ax.fill_between(
                    rnd, mean - std, mean + std, color=color, alpha=BAND_ALPHA, lw=0, zorder=z - 1
                )
                ax.plot(rnd, mean, color=color, lw=lw, zorder=z, label=policy_label(policy))
            ax.set_title(f"{env_label(env)}, {level_label(level).lower()}")
            ax.grid(True, alpha=0.3)
            if i == len(envs) - 1:
                ax.set_xlabel("round $t$")
            if j == 0:
                ax.set_ylabel("rolling-average reward")
    policy_legend(fig, policies, "line")
    return fig
