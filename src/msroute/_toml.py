"""One reader of TOML files for every configuration (experiments, routers, the service).

Errors are ``error_type`` with a message naming the file and what is wrong with it, never a
raw ``OSError``, ``UnicodeDecodeError`` or ``ValueError``: a file that cannot be read, is not
UTF-8, or is not valid TOML (the parser's message has the line; Python's limit on integer
digits is one such error). A UTF-8 byte order mark, which editors on Windows write, is read
as the text's start.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from msroute._validation import quoted

__all__ = ["read_toml"]


def read_toml(path: str | Path, error_type: type[Exception], what: str) -> dict[str, Any]:
    """The table a TOML file holds (``what`` names the file's role in the messages)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise error_type(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error_type(
            f"{path}: not a TOML text file (byte 0x{raw[exc.start]:02x} at offset {exc.start} "
            "is not UTF-8)"
        ) from exc
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))
    except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an integer too long
        raise error_type(f"{path}: not valid TOML: {quoted(str(exc), 200)}") from exc
