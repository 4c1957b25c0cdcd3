"""The cell cache: each finished cell's arrays in one file, reused only when they can be trusted.

A cached cell is stamped with its specification, the msroute version and the code digest
(``msroute._build.code_digest``), and carries a manifest (dtype, shape, SHA-256) of its arrays:
a cell of other code is recomputed silently, a damaged one with a ``CacheWarning``.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from msroute import _version
from msroute._atomic import DAMAGED_FILE_ERRORS, atomic_path
from msroute._build import code_digest
from msroute.errors import CacheWarning
from msroute.experiments.cells import CellResult, CellSpec

__all__ = ["cell_path", "load_cell", "save_cell"]


def cell_path(out_dir: Path, spec: CellSpec) -> Path:
    """Where a cell's result is cached under ``out_dir``."""
    return out_dir / "cells" / spec.experiment / f"{spec.env}-{spec.policy}-{spec.key()}.npz"


def _cell_stamp(spec: CellSpec) -> dict[str, Any]:
    """What a cached cell must match to be reused: its specification, and the msroute version
    and code (``msroute._build.code_digest``) that computed it: other code may compute
    other numbers under the same version, so its cells are redone."""
    stamp: dict[str, Any] = json.loads(json.dumps(asdict(spec), default=str))
    return {"msroute": _version.__version__, "code": code_digest(), **stamp}


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _manifest(result: CellResult) -> dict[str, list[Any]]:
    """Name -> [dtype, shape, sha256 of the bytes] of every array of a result."""
    return {
        k: [np.asarray(v).dtype.str, list(np.shape(v)), _digest(np.asarray(v))]
        for k, v in sorted(result.items())
    }


class _DamagedCell(Exception):
    """A cached cell that must be recomputed (the message says why)."""


def _check_cell(header: Any, arrays: CellResult) -> None:
    """Validate a cell's arrays against the manifest stored with them.

    Keys, dtypes, shapes and a SHA-256 of each array's bytes must match what was saved, and no
    float array may hold NaN: a cell that was truncated, bit-flipped, edited or written by a
    faulty run is recomputed instead of copied into the results.
    """
    manifest = header.get("arrays") if isinstance(header, dict) else None
    if not isinstance(manifest, dict):
        raise _DamagedCell("no array manifest")
    missing = sorted(set(manifest) - set(arrays))
    extra = sorted(set(arrays) - set(manifest))
    if missing or extra:
        raise _DamagedCell(f"missing arrays {missing}" if missing else f"extra arrays {extra}")
    for name, arr in arrays.items():
        entry = manifest[name]
        if not (isinstance(entry, list) and len(entry) == 3):
            raise _DamagedCell(f"bad manifest entry for {name!r}")
        dtype, shape, digest = entry
        if arr.dtype.str != dtype or list(arr.shape) != shape:
            raise _DamagedCell(
                f"array {name!r} is {arr.dtype.str} {arr.shape}, expected {dtype} {tuple(shape)}"
            )
        if arr.dtype.kind in "fc" and np.isnan(arr).any():
            raise _DamagedCell(f"array {name!r} contains NaN")
        if _digest(arr) != digest:
            raise _DamagedCell(f"array {name!r} does not match its checksum")


_READ_ERRORS: tuple[type[BaseException], ...] = (*DAMAGED_FILE_ERRORS, _DamagedCell)


def load_cell(out_dir: Path, spec: CellSpec) -> CellResult | None:
    """A finished cell's result from the cache, or None (missing, foreign, stale or damaged).

    A cell of another specification or msroute version is silently recomputed; a damaged one
    (unreadable, arrays missing, misshapen, of the wrong dtype, NaN or not matching their
    checksum) is recomputed with one ``CacheWarning`` naming the file.
    """
    path = cell_path(out_dir, spec)
    if not path.exists():
        return None
    try:
        # Our own handle: np.load leaves the file open when the archive is damaged.
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            header = json.loads(str(data["__spec__"]))
            if not isinstance(header, dict):
                raise _DamagedCell("its header is not a JSON object")
            if header.get("stamp") != _cell_stamp(spec):
                return None
            result = {k: data[k] for k in data.files if k != "__spec__"}
        _check_cell(header, result)
    except _READ_ERRORS as exc:
        reason = str(exc) or type(exc).__name__
        warnings.warn(
            f"cached cell {path} is damaged ({reason[:120]}); recomputing it",
            CacheWarning,
            stacklevel=2,
        )
        return None
    return result


def save_cell(out_dir: Path, spec: CellSpec, result: CellResult) -> None:
    """Store a finished cell atomically (write to a temporary name, then rename), with the
    manifest ``load_cell`` validates it against."""
    header = {"stamp": _cell_stamp(spec), "arrays": _manifest(result)}
    arrays: dict[str, Any] = {"__spec__": np.array(json.dumps(header, sort_keys=True)), **result}
    with (
        atomic_path(cell_path(out_dir, spec)) as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
    ):
        # numpy.savez_compressed's archive (one .npy per array), deflated at level 1: about a
        # third of its CPU, for files 10-25% larger (the float32 rewards hardly compress).
        for key, value in arrays.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
