"""Writing experiment results: tidy CSV tables, JSON sidecars, progress bars, summary tables."""

from __future__ import annotations

import csv
import json
import multiprocessing
import platform
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msroute import _version
from msroute._atomic import atomic_path, write_text_atomic
from msroute._spreadsheet import text_cell

__all__ = [
    "Progress",
    "Summary",
    "peak_memory_mb",
    "print_table",
    "publish",
    "write_csv",
    "write_sidecar",
]


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write tidy rows (all with the same keys) as CSV; floats keep full precision, and text
    that begins like a spreadsheet formula (a model named ``=HYPERLINK(...)``) is written with
    a leading ``'`` (``msroute._spreadsheet``)."""
    fields = list(rows[0]) if rows else []
    with atomic_path(path) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writerow({f: text_cell(f) for f in fields})  # the header
        for row in rows:
            writer.writerow({k: _plain(v) for k, v in row.items()})
    return path


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return text_cell(value)
    return value


def write_sidecar(
    path: Path,
    *,
    experiment: str,
    config: Any,
    seeds: Sequence[int],
    wall_time: float,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """The JSON record of a result: parameters, seeds, package version, timings."""
    record = {
        "experiment": experiment,
        "msroute_version": _version.__version__,
        "parameters": asdict(config)
        if is_dataclass(config) and not isinstance(config, type)
        else dict(config),
        "seeds": list(seeds),
        "wall_time_seconds": round(wall_time, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "peak_memory_mb": peak_memory_mb(),
    }
    if extra:
        record.update(extra)
    return write_text_atomic(path, json.dumps(record, indent=2, default=_json_default) + "\n")


def peak_memory_mb() -> dict[str, float]:
    """Peak resident memory so far, in MB: of this process ("driver") and of the largest of
    its finished worker processes ("worker"), as the operating system counts them (0 where it
    does not say)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return {"driver": 0.0, "worker": 0.0}
    scale = 1024.0 if platform.system() != "Darwin" else 1.0  # ru_maxrss: KiB, bytes on macOS
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"driver": round(own * scale / 2**20, 1), "worker": round(kids * scale / 2**20, 1)}


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple | set):
        return list(value)
    return str(value)


class Progress:
    """A rich progress bar over cells (quiet when ``enabled`` is False, e.g. in tests)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None

    @contextmanager
    def track(self, description: str, total: int) -> Iterator[Progress]:
        """Show a bar for ``total`` cells while the block runs."""
        if not self.enabled:
            yield self
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as RichProgress

        with RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
            transient=False,
        ) as progress:
            self._progress = progress
            self._task = progress.add_task(description, total=total, last="")
            yield self
        self._progress = None

    def advance(self, label: str) -> None:
        """One more cell done."""
        if self._progress is not None:
            self._progress.update(self._task, advance=1, last=label)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a summary table with rich.

    Written to a file or a pipe (no terminal), the table takes the width it needs: rich's
    default of 80 columns there would cut values to ``0.0002…``, and a log must keep them
    whole. A terminal narrower than the table still gets rich's fitting."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right" if col not in ("env", "level", "policy") else "left")
    for row in rows:
        table.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row])
    console = Console()
    if not console.is_terminal:
        wide = console.options.update(max_width=1 << 16)
        needed = Measurement.get(console, wide, table).maximum
        console = Console(width=max(console.width, needed))
    console.print(table)


@dataclass
class Summary:
    """The table an experiment prints at the end (and stores in its JSON sidecar)."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def preload_plotting() -> None:
    """Import the plotting module (and matplotlib) that ``publish`` draws with, ahead of
    it: about 0.6 s that a sweep's driver can spend on a core its workers no longer use
    (``run_cells(..., when_free=preload_plotting)``) rather than after the last cell."""
    import msroute.plotting  # noqa: F401


def _save_figure(
    base: Path, figure: str, rows: Sequence[Mapping[str, Any]], options: dict[str, Any], jobs: int
) -> None:
    """Draw ``msroute.plotting.FIGURES[figure]`` of ``rows`` and write ``base.png`` and
    ``base.svg``: when ``jobs > 1`` and worker processes are forked (as the sweep's,
    ``LocalBackend.forks``), the figure is drawn and laid out once here, then a forked child
    writes the SVG while this process writes the PNG (the same bytes as both written here;
    the child inherits the laid-out figure, so neither draws it again); else both here
    (``msroute.plotting.save_figure``)."""
    from msroute.experiments.backends import LocalBackend
    from msroute.plotting import FIGURES, canvas

    fig = FIGURES[figure](rows, **options)
    if not LocalBackend(jobs).forks(2):
        canvas.save_figure(fig, base)
        return
    png, svg = (base.with_name(base.name + suffix) for suffix in (".png", ".svg"))
    with canvas.laid_out(fig):
        context = multiprocessing.get_context("fork")
        reader, writer = context.Pipe(duplex=False)
        child = context.Process(target=_write_in_child, args=(fig, svg, writer), daemon=True)
        child.start()  # forked: the figure is the child's copy, not pickled
        writer.close()
        try:
            canvas.write_format(fig, png)
        finally:
            error = _received(reader)
            child.join()
            reader.close()
    if error is not None:
        raise error  # the child's error, with its message
    if child.exitcode != 0:
        raise RuntimeError(f"the process writing {svg} ended with exit code {child.exitcode}")


def _received(reader: Any) -> BaseException | None:
    """The error the child sent through the pipe ``reader``, or None once it closed its end
    without one (it waits for either)."""
    try:
        error: BaseException = reader.recv()
    except EOFError:
        return None
    return error


def _write_in_child(fig: Any, path: Path, writer: Any) -> None:
    """Write ``fig`` (laid out) in the format of ``path``'s suffix, in a forked child; send
    back its error, if any, through ``writer`` (a pipe's end)."""
    from msroute.plotting import canvas

    try:
        canvas.write_format(fig, path)
    except BaseException as exc:  # every error is the parent's to raise
        try:
            writer.send(exc)
        except Exception:  # an error that does not pickle: its text
            writer.send(RuntimeError(f"writing {path} failed: {exc!r}"))
    finally:
        writer.close()


def publish(
    out: Path,
    name: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    config: Any,
    seeds: Sequence[int],
    started: float,
    summary: Summary,
    extra: Mapping[str, Any] | None = None,
    plot: bool = True,
    quiet: bool = False,
    figure: str | None = None,
    plot_options: Mapping[str, Any] | None = None,
    jobs: int = 1,
) -> None:
    """Write an experiment's outputs: ``name.csv`` (the tidy rows), ``name.png``/``.svg`` (drawn
    by ``msroute.plotting.FIGURES[figure or name]`` with ``plot_options``), then ``name.json``
    (parameters, seeds, version, wall time since ``started``, the summary), and print the
    summary table. With ``jobs > 1`` where the sweep forks its workers, a forked child
    writes the SVG while this process writes the PNG, both from one drawing and layout (the
    same bytes as both written here); its error is raised here.

    The sidecar marks a complete set: an earlier run's sidecar and figures are removed first
    and the sidecar is written last, so an interrupted publish never leaves one run's record
    beside another run's figures (nor ``plot=False`` an older run's figures)."""
    for suffix in (".json", ".png", ".svg"):
        (out / f"{name}{suffix}").unlink(missing_ok=True)
    write_csv(out / f"{name}.csv", rows)
    wall_time = time.perf_counter() - started  # the run's, the figure's drawing not included
    if plot:
        _save_figure(out / name, figure or name, rows, dict(plot_options or {}), jobs)
    record = {"summary": [dict(zip(summary.columns, r, strict=True)) for r in summary.rows]}
    write_sidecar(
        out / f"{name}.json",
        experiment=name,
        config=config,
        seeds=seeds,
        wall_time=wall_time,
        extra={**record, **(extra or {})},
    )
    if not quiet:
        print_table(summary.title, summary.columns, summary.rows)
