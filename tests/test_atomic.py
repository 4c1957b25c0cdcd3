"""Every output file is written to a temporary name and renamed: an interrupted write leaves
the previous file (or none), never a truncated one, and no temporary file behind; an error
names the target, not the temporary file."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from msroute import Constraints, Problem, make_policy
from msroute._atomic import atomic_path, write_text_atomic
from msroute.experiments.output import write_csv, write_sidecar

PROBLEM = Problem([[1.0], [0.0], [0.5]], 2, Constraints(upper=[1.0]))


def _figure():  # type: ignore[no-untyped-def]
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig


def _save_figure(target: Path) -> None:
    from msroute.plotting import save_figure

    save_figure(_figure(), target.with_suffix(""))


WRITERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "csv": ("out.csv", lambda p: write_csv(p, [{"a": 1.0, "b": "x"}])),
    "json": (
        "out.json",
        lambda p: write_sidecar(p, experiment="e", config={}, seeds=[0], wall_time=0.0),
    ),
    "png+svg": ("fig.png", _save_figure),
    "policy": ("router.npz", lambda p: make_policy("omd", PROBLEM, horizon=10, seed=0).save(p)),
}


@pytest.mark.parametrize("kind", list(WRITERS))
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, write = WRITERS[kind]
    target = tmp_path / name
    write(target)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert target.name in before

    real_replace = os.replace

    def interrupted(src: str, dst: str) -> None:  # Ctrl-C after the data, before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write(target)
    monkeypatch.setattr(os, "replace", real_replace)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after == before  # old files intact, no temporary left


def test_a_failed_write_names_the_target(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    target = blocked / "out.csv"  # its parent is a file: cannot be created
    with pytest.raises(OSError, match=f"cannot write {target}"):
        write_csv(target, [{"a": 1}])
    with pytest.raises(OSError, match=f"cannot write {target}"), atomic_path(target) as tmp:
        tmp.write_text("x")


def test_an_error_while_writing_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "x.npz"
    with pytest.raises(ZeroDivisionError), atomic_path(target) as tmp:
        np.savez(tmp, a=np.zeros(3))
        _ = 1 / 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_outputs_get_the_users_umask_not_0600(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        text = write_text_atomic(tmp_path / "a.txt", "x")
        write_csv(tmp_path / "b.csv", [{"a": 1}])
        with atomic_path(tmp_path / "c.npz") as tmp:
            np.savez(tmp, a=np.zeros(3))
    finally:
        os.umask(old)
    for path in (text, tmp_path / "b.csv", tmp_path / "c.npz"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def test_a_publish_leaves_one_runs_set_or_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sidecar is written last and an earlier run's record and figures go first: an
    interrupted publish leaves no record beside another run's figures, and a run without a
    figure leaves no older figure."""
    import time

    from msroute import plotting
    from msroute.experiments.output import Summary, publish

    def run(rows: list[dict[str, float]], **kwargs: object) -> None:
        publish(
            tmp_path,
            "exp",
            rows,
            config={"h": rows[0]["x"]},
            seeds=[0],
            started=time.perf_counter(),
            summary=Summary("t", ("x",), [(rows[0]["x"],)]),
            quiet=True,
            **kwargs,  # type: ignore[arg-type]
        )

    for suffix in (".png", ".svg"):  # figures of an earlier run
        (tmp_path / f"exp{suffix}").write_text("old")
    run([{"x": 1.0}], plot=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.csv", "exp.json"]

    def interrupted(rows: object, **_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setitem(plotting.FIGURES, "exp", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run([{"x": 2.0}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.csv"]  # no record of either run
