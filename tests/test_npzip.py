"""An archive's bytes are numpy's: ``msroute._npzip.write_zip`` writes small arrays after a
cached ``.npy`` header, and must give what numpy's own writer gives."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from msroute._npzip import MANIFEST, read_zip, zip_bytes
from msroute.errors import DataFormatError


def _reference(manifest: str, arrays: dict[str, np.ndarray]) -> bytes:
    """The archive with every member written by ``np.lib.format.write_array``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo(MANIFEST, date_time=(1980, 1, 1, 0, 0, 0))
        zf.writestr(info, manifest, compress_type=zipfile.ZIP_DEFLATED)
        for key, arr in arrays.items():
            with zf.open(f"{key}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)
    return buffer.getvalue()


def _arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    big = rng.random(20_000)  # over the cached size: numpy's writer
    return {
        "f8": rng.random((3, 4)),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 3)),
        "i8": rng.integers(-5, 5, (2, 3, 4)),
        "u8": rng.integers(0, 2**63, 4, dtype=np.uint64),
        "bool": rng.random((5, 2)) < 0.5,
        "f4": rng.random(7).astype(np.float32),
        "big_endian": rng.random(3).astype(">f8"),
        "text": np.array(["a", "bcd"]),
        "fortran": np.asfortranarray(rng.random((3, 5))),
        "strided": rng.random((6, 6))[::2, 1::2],
        "big": big,
        "big_2d": big.reshape(100, 200),
    }


def test_the_archive_is_numpys_bytes() -> None:
    rng = np.random.default_rng(3)
    for _ in range(3):  # the second and third time from the cached headers
        arrays = _arrays(rng)
        assert zip_bytes('{"a": 1}', arrays) == _reference('{"a": 1}', arrays)
    manifest, back = read_zip(zip_bytes("{}", arrays), "x", "test", DataFormatError)
    assert manifest == {}
    for key, value in arrays.items():
        assert back[key].dtype == value.dtype and np.array_equal(back[key], value), key


def test_object_arrays_are_still_refused() -> None:
    with pytest.raises(ValueError):
        zip_bytes("{}", {"objects": np.array([{"a": 1}], dtype=object)})
