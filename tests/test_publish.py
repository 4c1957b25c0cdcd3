"""Publishing an experiment with worker processes: the driver draws and lays out the figure once,
then a forked child writes the SVG while the driver writes the PNG. Every file is written, the
same bytes as one after the other, and a failure in either process is raised, with no
sidecar."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from msroute.experiments.output import Summary, publish
from msroute.plotting import canvas, save_figure, save_format
from test_plotting import fig2_rows

pytestmark = pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="the figure's SVG child is forked"
)


def _publish(out: Path, jobs: int) -> None:
    publish(
        out,
        "fig2",
        fig2_rows(),
        config={"seeds": 3},
        seeds=[0, 1, 2],
        started=time.perf_counter(),
        summary=Summary("t", ("x",), [(1.0,)]),
        quiet=True,
        jobs=jobs,
    )


def test_publishing_in_two_processes_writes_every_file_as_one_process_does(
    tmp_path: Path,
) -> None:
    _publish(tmp_path / "one", jobs=1)
    _publish(tmp_path / "two", jobs=2)
    names = ["fig2.csv", "fig2.json", "fig2.png", "fig2.svg"]
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == names
    for name in ("fig2.csv", "fig2.png", "fig2.svg"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


@pytest.mark.parametrize("where", [".svg", ".png"])
def test_a_failed_figure_in_either_process_is_raised_and_leaves_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The SVG is the child's (its error comes back through a pipe), the PNG the driver's;
    either way the error names the file and no sidecar claims a complete set."""
    real = canvas._WRITERS[where]

    def full_disk(fig: Any, path: Path, dpi: int) -> None:
        raise OSError(28, f"cannot write {path}: No space left on device")

    monkeypatch.setitem(canvas._WRITERS, where, full_disk)  # the forked child inherits it
    with pytest.raises(OSError, match=rf"cannot write .*fig2\{where}: No space left"):
        _publish(tmp_path, jobs=2)
    other = ".png" if where == ".svg" else ".svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig2.csv", f"fig2{other}"]
    monkeypatch.setitem(canvas._WRITERS, where, real)
    _publish(tmp_path, jobs=2)  # the next run writes the whole set
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fig2.csv",
        "fig2.json",
        "fig2.png",
        "fig2.svg",
    ]


def test_save_format_writes_the_bytes_of_save_figure(tmp_path: Path) -> None:
    from msroute.plotting import plot_fig2

    png, svg = save_figure(plot_fig2(fig2_rows()), tmp_path / "both" / "fig", dpi=60)
    for path in (png, svg):
        alone = save_format(plot_fig2(fig2_rows()), tmp_path / "alone" / path.name, dpi=60)
        assert alone.read_bytes() == path.read_bytes()
    with pytest.raises(ValueError, match=r"ends in '\.pdf', must end in \.png or \.svg"):
        save_format(plot_fig2(fig2_rows()), tmp_path / "fig.pdf")


def test_a_child_error_that_does_not_pickle_or_a_child_that_dies_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SVG child's error comes back as its text when the error itself cannot be pickled,
    and a child that ends without a word (killed, or exiting) is reported by its exit code."""
    import os

    class Unpicklable(Exception):
        def __init__(self) -> None:
            super().__init__("the disk caught fire")
            self.hook = lambda: None  # a lambda does not pickle

    def fire(fig: Any, path: Path, dpi: int) -> None:
        raise Unpicklable

    def dies(fig: Any, path: Path, dpi: int) -> None:
        os._exit(3)

    monkeypatch.setitem(canvas._WRITERS, ".svg", fire)
    with pytest.raises(RuntimeError, match=r"writing .*fig2\.svg failed: .*the disk caught fire"):
        _publish(tmp_path / "fire", jobs=2)
    monkeypatch.setitem(canvas._WRITERS, ".svg", dies)
    with pytest.raises(RuntimeError, match=r"fig2\.svg ended with exit code 3"):
        _publish(tmp_path / "dies", jobs=2)
    assert not (tmp_path / "dies" / "fig2.json").exists()
