"""Figures of the experiments, drawn from tidy result rows.

Each ``plot_*`` function takes the rows of one experiment's CSV file (a sequence of mappings, as
``csv.DictReader`` yields them, so values may be strings; native ``int``/``float``/``bool``
values work too) and returns a ``matplotlib.figure.Figure``; ``save_figure`` writes it
as ``.png`` and ``.svg`` (``save_format``: one of the two).

* ``plot_fig1`` -- Figure 1: objective regret $R_1(n)$ and constraint regret
  $R_2(n)$ of OMD-Approachability against its step, per constraint level.
* ``plot_fig2`` -- Figure 2: time-averaged reward and share of feasible runs per policy and
  constraint level, in each environment.
* ``plot_fig3`` -- Figure 3: rolling-average reward per policy over the rounds.
* ``plot_contextual`` -- the contextual experiment: reward (with the per-context OPT) and
  regret per policy.
* ``plot_bench`` -- ``msroute bench``: reward against budget, the OPT frontier as a line and
  every run as a point (infeasible runs marked).

* ``plot_frontier`` -- ``msroute bench llmrouter``: reward against spend per query.

Figures are built without ``matplotlib.pyplot``: each one gets its own Agg canvas, so no
screen is needed and no global backend is switched. This module is not imported by
``import msroute``; matplotlib is loaded only when it is.

One module per concept: ``style`` (the policies' labels and colors, the levels' and
environments' names and order), ``canvas`` (a figure's canvas, and ``save_figure``), one module
per figure, and ``figures`` (the figure of each experiment, by name).
"""

from __future__ import annotations

from msroute.plotting.bench import plot_bench
from msroute.plotting.canvas import save_figure, save_format
from msroute.plotting.contextual import plot_contextual
from msroute.plotting.fig1 import plot_fig1
from msroute.plotting.fig2 import plot_fig2
from msroute.plotting.fig3 import plot_fig3
from msroute.plotting.figures import FIGURES
from msroute.plotting.frontier import plot_frontier
from msroute.plotting.style import LEVEL_ORDER, policy_color, policy_label

__all__ = [
    "FIGURES",
    "LEVEL_ORDER",
    "plot_bench",
    "plot_contextual",
    "plot_fig1",
    "plot_fig2",
    "plot_fig3",
    "plot_frontier",
    "policy_color",
    "policy_label",
    "save_figure",
    "save_format",
]
