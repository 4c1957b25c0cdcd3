"""Reading the result rows of an experiment (a CSV file's, or native values) for the figures.

Rows are mappings, as ``csv.DictReader`` yields them, so values may be strings; native
``int``/``float``/``bool`` values work too. Every reader names the key and the value it
rejects (``DataFormatError``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from msroute.errors import DataFormatError, InvalidTypeError, InvalidValueError

__all__ = [
    "Row",
    "checked_rows",
    "get_bool",
    "get_float",
    "get_int",
    "get_optional_float",
    "get_str",
    "mean_std",
]

Row = Mapping[str, object]


def checked_rows(rows: Iterable[Row], required: Sequence[str], what: str) -> list[Row]:
    """Materialize ``rows`` and check that each has the ``required`` keys."""
    out = list(rows)
    if not out:
        raise InvalidValueError(f"{what}: rows is empty; pass the result rows of the experiment")
    for i, row in enumerate(out):
        if not isinstance(row, Mapping):
            raise InvalidTypeError(f"{what}: row {i} is a {type(row).__name__}, expected a mapping")
        missing = [k for k in required if k not in row]
        if missing:
            raise DataFormatError(
                f"{what}: row {i} lacks the key(s) {missing}; expected {list(required)}, "
                f"got {sorted(row)}"
            )
    return out


def get_float(row: Row, key: str) -> float:
    value = row[key]
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise DataFormatError(f"{key} == {value!r} is not a number") from None
    if isinstance(value, int | float | np.number):
        return float(value)
    raise InvalidTypeError(f"{key} == {value!r} has type {type(value).__name__}, expected a number")


def get_int(row: Row, key: str) -> int:
    value = get_float(row, key)
    if not value.is_integer():
        raise DataFormatError(f"{key} == {row[key]!r} is not an integer")
    return int(value)


_TRUE = frozenset({"true", "t", "yes", "y", "1", "1.0"})
_FALSE = frozenset({"false", "f", "no", "n", "0", "0.0"})


def get_bool(row: Row, key: str) -> bool:
    value = row[key]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    elif isinstance(value, int | float | np.number) and float(value) in (0.0, 1.0):
        return bool(value)
    raise DataFormatError(f"{key} == {value!r} is not a boolean (use True/False or 1/0)")


def get_str(row: Row, key: str) -> str:
    return str(row[key]).strip()


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``; 0 for a single value)."""
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return float(arr.mean()), std


def get_optional_float(row: Row, key: str) -> float | None:
    """``row[key]`` as a float, or ``None`` when the key is missing, blank or NaN."""
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number = get_float(row, key)
    return None if math.isnan(number) else number
