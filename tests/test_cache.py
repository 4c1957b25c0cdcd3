"""The results cache: every cached cell is validated, and a damaged one is recomputed with one
warning line, never a crash or a NaN copied into the results."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import msroute
from msroute._build import tree_digest
from msroute.cli import main
from msroute.errors import CacheWarning
from msroute.experiments import cellcache
from msroute.experiments import fig2 as fig2_module
from msroute.experiments.cellcache import cell_path, load_cell, save_cell
from msroute.experiments.cells import CellSpec
from msroute.experiments.fig2 import Fig2Config, run_fig2

SPEC = CellSpec(
    experiment="t", env="stochastic", policy="random", levels=("none",), seeds=(0,), horizon=5
)
RESULT = {
    "avg_reward": np.array([1.5, 2.0]),
    "bounds": np.array([[np.inf, 2.0], [3.0, np.inf]]),
    "feasible": np.array([True, False]),
    "rewards": np.arange(6, dtype=np.float32).reshape(3, 2),
}


def _rewrite(path: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> None:
    """Rewrite a cell with its header kept and its arrays edited (a plausible-looking cell)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    edit(arrays)
    np.savez_compressed(path, **arrays)


def _flip_compressed_byte(path: Path) -> None:
    """Flip one byte inside the compressed data of the first array after the header."""
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename != "__spec__.npy")
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw[start + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


DAMAGES: dict[str, Callable[[Path], None]] = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:200]),
    "empty": lambda p: p.write_bytes(b""),
    "compressed byte flipped": _flip_compressed_byte,
    "array missing": lambda p: _rewrite(p, lambda a: a.pop("avg_reward")),
    "array added": lambda p: _rewrite(p, lambda a: a.update(extra=np.zeros(2))),
    "wrong shape": lambda p: _rewrite(p, lambda a: a.update(avg_reward=np.zeros(3))),
    "wrong dtype": lambda p: _rewrite(p, lambda a: a.update(feasible=np.ones(2))),
    "NaN value": lambda p: _rewrite(p, lambda a: a.update(avg_reward=np.array([np.nan, 2.0]))),
    "value changed": lambda p: _rewrite(p, lambda a: a.update(avg_reward=np.array([1.5, 2.5]))),
    "header not JSON": lambda p: _rewrite(p, lambda a: a.update(__spec__=np.array("{oops"))),
}


def test_a_saved_cell_loads_back_exactly(tmp_path: Path) -> None:
    save_cell(tmp_path, SPEC, RESULT)
    loaded = load_cell(tmp_path, SPEC)
    assert loaded is not None and loaded.keys() == RESULT.keys()
    for k, v in RESULT.items():
        assert loaded[k].dtype == v.dtype
        np.testing.assert_array_equal(loaded[k], v)
    # Written atomically: no temporary file is left next to it.
    assert [p.name for p in cell_path(tmp_path, SPEC).parent.iterdir()] == [
        cell_path(tmp_path, SPEC).name
    ]


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_cell_is_rejected_with_one_warning(tmp_path: Path, damage: str) -> None:
    save_cell(tmp_path, SPEC, RESULT)
    path = cell_path(tmp_path, SPEC)
    DAMAGES[damage](path)
    with pytest.warns(CacheWarning, match="damaged.*recomputing") as record:
        assert load_cell(tmp_path, SPEC) is None
    assert len(record) == 1
    assert str(path) in str(record[0].message)


def test_a_stale_or_foreign_cell_is_recomputed_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_cell(tmp_path, SPEC, RESULT)
    path = cell_path(tmp_path, SPEC)
    monkeypatch.setattr(msroute._version, "__version__", "0.0.0-other")
    assert load_cell(tmp_path, SPEC) is None  # no warning: pytest turns one into an error
    monkeypatch.undo()
    assert load_cell(tmp_path, SPEC) is not None
    # The same version, other code (a development checkout that changed a stream): stale too.
    monkeypatch.setattr(cellcache, "code_digest", lambda: "0123456789abcdef")
    assert load_cell(tmp_path, SPEC) is None
    # A cell in the format of an older msroute (a bare stamp, no manifest) is stale, not damaged.
    monkeypatch.undo()
    old = json.dumps({"msroute": msroute.__version__, "experiment": "t"})
    np.savez_compressed(path, __spec__=np.array(old), **RESULT)
    assert load_cell(tmp_path, SPEC) is None


@pytest.mark.filterwarnings("default::msroute.errors.CacheWarning")
@pytest.mark.parametrize("damage", ["compressed byte flipped", "NaN value", "wrong shape"])
def test_reproduce_recomputes_a_damaged_cell_with_one_warning_line(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["reproduce", "fig2", "--quick", "--horizon", "60", "--out", str(tmp_path)]
    argv += ["--quiet", "--no-plot", "--config", str(tmp_path / "c.toml")]
    (tmp_path / "c.toml").write_text(
        '[fig2]\npolicies = ["random"]\nenvs = ["stochastic"]\nlevels = ["tight"]\n'
    )
    assert main(argv) == 0
    first = (tmp_path / "fig2.csv").read_text()
    (cell,) = (tmp_path / "cells").rglob("*.npz")
    if damage == "compressed byte flipped":
        _flip_compressed_byte(cell)
    elif damage == "NaN value":
        _rewrite(cell, lambda a: a.update(avg_reward=np.full_like(a["avg_reward"], np.nan)))
    else:
        _rewrite(cell, lambda a: a.update(avg_reward=a["avg_reward"][:1]))
    capsys.readouterr()
    for _ in range(2):  # the recomputed cell replaces the damaged one: warned once, not forever
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("msroute: warning: cached cell "), err
    assert (tmp_path / "fig2.csv").read_text() == first


def test_a_damaged_cell_is_recomputed_in_a_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = Fig2Config(
        policies=("random",), envs=("stochastic",), levels=("none",), seeds=2, horizon=50
    )
    first = run_fig2(cfg, tmp_path, plot=False, quiet=True)
    (cell,) = (tmp_path / "cells").rglob("*.npz")
    _flip_compressed_byte(cell)
    calls: list[str] = []
    real = fig2_module.sweep_worker

    def counting(spec: CellSpec) -> dict[str, np.ndarray]:
        calls.append(spec.policy)
        return real(spec)

    monkeypatch.setattr(fig2_module, "sweep_worker", counting)
    with pytest.warns(CacheWarning):
        assert run_fig2(cfg, tmp_path, plot=False, quiet=True) == first
    assert calls == ["random"]


def test_the_code_digest_follows_the_code_and_data_not_the_caches(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "data").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "data" / "crowd.txt").write_text("1 2 3\n")
    first = tree_digest(package)
    assert len(first) == 16 and int(first, 16) >= 0 and tree_digest(package) == first
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"compiled")
    (package / "__pycache__" / "k.py").write_text("a cache, whatever its suffix")
    (package / "kernels.nbi").write_bytes(b"numba's index")
    assert tree_digest(package) == first
    (package / "a.py").write_text("x = 2\n")
    assert tree_digest(package) != first
    (package / "a.py").write_text("x = 1\n")
    (package / "data" / "crowd.txt").write_text("1 2 4\n")
    assert tree_digest(package) != first
    (package / "data" / "crowd.txt").write_text("1 2 3\n")
    (package / "data" / "crowd.txt").rename(package / "data" / "moved.txt")
    assert tree_digest(package) != first  # the paths count, not only the bytes
