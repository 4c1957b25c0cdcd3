"""One zip file of a JSON manifest and ``.npy`` arrays: how msroute saves what it fitted.

A policy file (``msroute.policies.persist``) and a prompt context model
(``msroute.prompts.model``) are both such an archive: ``manifest.json`` (UTF-8 JSON, readable
with any zip tool) and one ``NAME.npy`` member per array, written by numpy's own ``.npy`` writer
with ``allow_pickle=False``. The members carry a fixed timestamp, so the same content gives the
same bytes (a SHA-256 of the file names its content). Reading never unpickles: the archive is
opened with ``numpy.load(..., allow_pickle=False)``.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from msroute._atomic import DAMAGED_FILE_ERRORS
from msroute.errors import DataFormatError

__all__ = ["MANIFEST", "read_zip", "write_zip", "zip_bytes"]

#: The manifest member of an archive.
MANIFEST = "manifest.json"
#: Arrays up to this size (bytes) are written after a cached header (``_npy_header``).
_SMALL = 1 << 16


def write_zip(out: IO[bytes], manifest: str, arrays: dict[str, np.ndarray]) -> None:
    """Write the archive of ``manifest`` (JSON text) and ``arrays`` (member ``NAME.npy`` each)."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo(MANIFEST, date_time=(1980, 1, 1, 0, 0, 0))
        zf.writestr(info, manifest, compress_type=zipfile.ZIP_DEFLATED)
        for key, arr in arrays.items():
            a = np.asarray(arr)
            with zf.open(f"{key}.npy", "w", force_zip64=True) as f:
                if a.nbytes <= _SMALL and a.flags.c_contiguous and not a.dtype.hasobject:
                    f.write(_npy_header(a.dtype, a.shape))
                    f.write(a.tobytes())
                else:  # numpy's writer: large, another memory order, or refused (objects)
                    np.lib.format.write_array(f, a, allow_pickle=False)


@functools.lru_cache(maxsize=512)
def _npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header numpy's ``write_array`` writes before a C-contiguous array's bytes
    (its magic, version and header dict, which depend only on the dtype and the shape): taken
    from numpy's own output once per dtype and shape of a small array, since building it is
    most of the cost of writing one (a policy snapshot writes dozens)."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros(shape, dtype=dtype), allow_pickle=False)
    data = buffer.getvalue()
    return data[: len(data) - int(np.prod(shape, dtype=np.int64)) * dtype.itemsize]


def zip_bytes(manifest: str, arrays: dict[str, np.ndarray]) -> bytes:
    """The archive ``write_zip`` writes, as bytes."""
    buffer = io.BytesIO()
    write_zip(buffer, manifest, arrays)
    return buffer.getvalue()


def read_zip(
    source: Path | bytes, path: str, what: str, error: type[DataFormatError]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The manifest and every array of an archive (a file or its bytes), never unpickling;
    ``error`` names ``path`` and says it is not (or no longer) an msroute ``what`` file."""

    def handle() -> IO[bytes]:
        return open(source, "rb") if isinstance(source, Path) else io.BytesIO(source)

    try:
        with handle() as fh:
            if fh.read(4) != b"PK\x03\x04":
                raise error(
                    f"{path}: not an msroute {what} file: not a zip archive (empty, truncated "
                    "or another kind of file)"
                )
        # Our own handle: np.load leaves the file open when the archive is damaged.
        with handle() as fh, np.load(fh, allow_pickle=False) as npz:
            if MANIFEST not in npz.files:
                raise error(f"{path}: not an msroute {what} file (no manifest.json; a plain .npz?)")
            manifest = json.loads(npz[MANIFEST].decode("utf-8"))
            arrays = {k: npz[k] for k in npz.files if k != MANIFEST}
    except DataFormatError:
        raise
    except DAMAGED_FILE_ERRORS as exc:
        raise error(f"{path}: unreadable {what} file (truncated or corrupt?): {exc}") from exc
    except RuntimeError as exc:  # zipfile: an entry flagged encrypted (msroute never writes one)
        raise error(f"{path}: unreadable {what} file (damaged zip flags?): {exc}") from exc
    if not isinstance(manifest, dict):
        raise error(f"{path}: manifest.json is not a JSON object")
    bad = sorted(k for k, v in arrays.items() if not isinstance(v, np.ndarray))
    if bad:
        raise error(f"{path}: members {bad} are not .npy arrays")
    return manifest, arrays
