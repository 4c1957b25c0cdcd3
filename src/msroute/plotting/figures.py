"""The figure of each experiment of ``msroute reproduce`` and ``msroute bench``, by name."""

from __future__ import annotations

from collections.abc import Callable

from matplotlib.figure import Figure

from msroute.plotting.bench import plot_bench
from msroute.plotting.contextual import plot_contextual
from msroute.plotting.fig1 import plot_fig1
from msroute.plotting.fig2 import plot_fig2
from msroute.plotting.fig3 import plot_fig3
from msroute.plotting.frontier import plot_frontier

__all__ = ["FIGURES"]

#: The figure of each experiment, by experiment name.
FIGURES: dict[str, Callable[..., Figure]] = {
    "fig1": plot_fig1,
    "fig2": plot_fig2,
    "fig3": plot_fig3,
    "contextual": plot_contextual,
    "bench": plot_bench,
    "frontier": plot_frontier,
}
