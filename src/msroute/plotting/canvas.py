"""A figure's canvas and how it is written: each figure on its own Agg canvas, saved as PNG and
SVG from one layout, in this process and thread."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from msroute._atomic import atomic_path
from msroute.errors import InvalidValueError

__all__ = ["laid_out", "new_figure", "panels", "save_figure", "save_format", "write_format"]


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (no pyplot, no screen, no global backend switch)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def panels(
    fig: Figure,
    nrows: int,
    ncols: int,
    *,
    sharex: bool | Literal["col", "row"] = False,
    sharey: bool | Literal["col", "row"] = False,
) -> list[list[Axes]]:
    """The ``nrows`` x ``ncols`` panels of ``fig``, as rows of axes."""
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
    Both are written here, one after the other: no process is forked and no thread started, so
    the call is safe in any program (a server, a notebook, a process with threads of its own).
    Each file is written atomically: an interrupted save leaves no truncated figure.
    """
    base = Path(path_without_suffix)
    if base.suffix.lower() in _WRITERS:
        raise InvalidValueError(
            f"path_without_suffix == {str(base)!r} ends in {base.suffix!r}; pass the path "
            f"without it ({str(base.with_suffix(''))!r}) and both .png and .svg are written"
        )
    png = base.with_name(base.name + ".png")
    svg = base.with_name(base.name + ".svg")
    with laid_out(fig, dpi):
        _write_png(fig, png, dpi)
        _write_svg(fig, svg, dpi)
    return png, svg


def save_format(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 150) -> Path:
    """Write ``fig`` in the one format its suffix names (``.png`` or ``.svg``): the bytes that
    ``save_figure(fig, path_without_suffix, dpi=dpi)`` writes to that file.

    Like ``save_figure``, this forks nothing and writes the file atomically
    (``msroute._atomic.atomic_path``, which also creates missing folders).

    Raises
    ------
    ValueError
        If the suffix is neither ``.png`` nor ``.svg``.
    """
    with laid_out(fig, dpi):
        return write_format(fig, path, dpi=dpi)


def write_format(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 150) -> Path:
    """``save_format`` of a figure already laid out (inside ``laid_out(fig, dpi)``): the
    same bytes, without laying it out again.

    Two processes can thus share one layout: lay the figure out, fork, and write one format
    in each (``msroute.experiments.output.publish`` with ``jobs > 1``).

    Raises
    ------
    ValueError
        If the suffix is neither ``.png`` nor ``.svg``.
    """
    target = Path(path)
    write = _WRITERS.get(target.suffix.lower())
    if write is None:
        raise InvalidValueError(
            f"path == {str(target)!r} ends in {target.suffix!r}, must end in .png or .svg"
        )
    write(fig, target, dpi)
    return target


def _write_png(fig: Figure, png: Path, dpi: int) -> None:
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")


def _write_svg(fig: Figure, svg: Path, dpi: int) -> None:
    """The SVG (``dpi`` unused: its layout is the PNG's, made by ``laid_out``)."""
    # No date, element ids from a fixed salt: the same figure, the same file.
    with matplotlib.rc_context({"svg.hashsalt": "msroute"}), atomic_path(svg) as tmp:
        fig.savefig(tmp, format="svg", metadata={"Date": None})


#: The writer of each format, by the file's suffix.
_WRITERS = {".png": _write_png, ".svg": _write_svg}


@contextmanager
def laid_out(fig: Figure, dpi: int = 150) -> Iterator[None]:
    """Lay ``fig`` out once, as drawing the PNG at ``dpi`` would, and save it without its
    layout engine inside the block: both formats then draw the same positions, and neither
    lays the figure out again (savefig's first pass costs about as much as drawing).
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
