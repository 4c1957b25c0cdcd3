"""Backends of the cell runner: Ray tasks give the local numbers, bit for bit, and clean up."""

from __future__ import annotations

import os
import socket
import sys
import time
import weakref
from pathlib import Path

import pytest

from msroute.cli import main
from msroute.experiments import backends
from msroute.experiments.backends import BackendError, LocalBackend, RayBackend, make_backend
from msroute.experiments.fig2 import Fig2Config, run_fig2


def _descendants() -> set[int]:
    """Process ids below this process (from /proc: the parent of each process)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts processes through /proc")
def test_ray_backend_matches_local_resumes_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray", reason="Ray is in the test extra; install .[test]")
    cfg = Fig2Config(seeds=2, horizon=300)  # --quick's sweep, shorter: the same cells
    local = run_fig2(cfg, tmp_path / "local", jobs=1, plot=False, quiet=True)
    before = _descendants()
    out = tmp_path / "ray"
    with RayBackend(num_cpus=2) as backend:
        remote = run_fig2(cfg, out, backend=backend, plot=False, quiet=True)
        assert remote == local  # every row, every float, bit for bit
        cells = sorted((out / "cells").rglob("*.npz"))  # stored by the driver
        assert len(cells) == len(cfg.policies)  # one per policy, every environment in it
        stamps = {p: p.stat().st_mtime_ns for p in cells}
        cells[0].unlink()  # an interrupted sweep: one cell never finished
        assert run_fig2(cfg, out, backend=backend, plot=False, quiet=True) == local
        assert cells[0].exists()
        assert all(p.stat().st_mtime_ns == stamps[p] for p in cells[1:])  # not recomputed
        # A node that runs other msroute code than the driver: its cell is refused, not stored.
        with monkeypatch.context() as patch:
            patch.setattr(backends, "_build_id", lambda: "0.0.0 (code 0123456789abcdef)")
            one = Fig2Config(seeds=1, horizon=50, policies=("random",), envs=("stochastic",))
            with pytest.raises(
                BackendError, match=r"a Ray node runs msroute .* the driver 0\.0\.0"
            ):
                run_fig2(one, tmp_path / "other", backend=backend, plot=False, quiet=True)
        assert not list((tmp_path / "other").rglob("*.npz"))
    deadline = time.monotonic() + 30.0
    while _descendants() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _descendants() - before == set(), "Ray left processes running"


def test_seed_blocks_give_the_numbers_of_one_cell(tmp_path: Path) -> None:
    cfg = {"seeds": 5, "horizon": 150, "policies": ("ts", "omd", "random"), "envs": ("regime",)}
    whole = run_fig2(Fig2Config(**cfg), tmp_path / "whole", plot=False, quiet=True)
    split = run_fig2(
        Fig2Config(**cfg, seeds_per_cell=2), tmp_path / "split", plot=False, quiet=True
    )
    assert split == whole
    assert len(list((tmp_path / "split" / "cells").rglob("*.npz"))) == 3 * 3  # blocks 2, 2, 1


def test_missing_ray_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails
    with pytest.raises(BackendError, match=r"pip install 'msroute\[ray\]'"):
        RayBackend()
    code = main(["reproduce", "fig2", "--quick", "--backend", "ray", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "msroute[ray]" in err and "Traceback" not in err
    assert not (tmp_path / "cells").exists()  # nothing ran


def test_unreachable_address_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("ray", reason="Ray is in the test extra; install .[test]")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    with pytest.raises(BackendError, match=f"cannot reach a Ray cluster at {address}"):
        RayBackend(address)
    argv = ["reproduce", "fig2", "--quick", "--backend", "ray", "--address", address]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert address in capsys.readouterr().err
    with pytest.raises(ValueError, match="HOST:PORT"):
        RayBackend("nowhere")


def test_backend_names_and_options() -> None:
    assert isinstance(make_backend("local", jobs=3), LocalBackend)
    with pytest.raises(ValueError, match="--address needs --backend ray"):
        make_backend("local", address="127.0.0.1:6379")
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("dask")
    with pytest.raises(ValueError, match="jobs == 0"):
        LocalBackend(0)


class _Payload:
    """A cell result the driver can hold a weak reference to."""

    def __init__(self, i: int) -> None:
        self.i = i


def _payload_worker(i: int) -> _Payload:
    return _Payload(i)


def test_local_backend_keeps_no_finished_result() -> None:
    """Once ``done`` has taken a cell's result, the backend holds no reference to it: a sweep's
    results (per-round rewards included) must not pile up in the driver."""
    import gc

    refs: list[weakref.ref[_Payload]] = []
    alive_at_done: list[int] = []

    def done(i: int, result: _Payload) -> None:
        gc.collect()
        alive_at_done.append(sum(r() is not None for r in refs))
        refs.append(weakref.ref(result))

    LocalBackend(2).run(_payload_worker, list(range(6)), done)
    assert len(refs) == 6
    assert alive_at_done == [0] * 6  # none of the earlier results is still referenced


def _failing_or_slow_worker(i: int) -> int:
    if i == 0:
        raise RuntimeError("cell 0 failed")
    time.sleep(30)
    return i


def test_a_failed_cell_stops_the_other_workers() -> None:
    """A cell that raises ends the run at once: the worker processes still running cells are
    stopped (they were left to run to the end, and the driver waited for them at exit)."""
    before = _descendants()
    with pytest.raises(RuntimeError, match="cell 0 failed"):
        LocalBackend(2).run(_failing_or_slow_worker, list(range(4)), lambda i, r: None)
    assert _descendants() - before == set()
