"""One reader of TOML files for every configuration (experiments, routers, the service).

Errors are ``error_type`` with a message naming the file and what is wrong with it, never a
raw ``OSError``, ``UnicodeDecodeError`` or ``ValueError``: a file that cannot be read, is not
UTF-8, or is not valid TOML (the parser's message has the line; Python's limit on integer
digits is one such error), or nests tables and arrays more than ``MAX_DEPTH`` levels deep. A
UTF-8 byte order mark, which editors on Windows write, is read as the text's start.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from msroute._validation import quoted

__all__ = ["MAX_DEPTH", "read_toml"]

#: The deepest nesting of tables and arrays a configuration may have (the top-level table is
#: level 0; msroute's own formats need at most 4). The parser recurses once or more per level:
#: a file nested thousands deep would otherwise end in a RecursionError.
MAX_DEPTH = 32


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
    too_deep = f"{path}: tables or arrays nested more than {MAX_DEPTH} levels deep"
    try:
        data = tomllib.loads(text.removeprefix("\ufeff"))
    except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an integer too long
        raise error_type(f"{path}: not valid TOML: {quoted(str(exc), 200)}") from exc
    except RecursionError:
        raise error_type(too_deep) from None
    if _depth(data) > MAX_DEPTH:
        raise error_type(too_deep)
    return data


def _depth(data: dict[str, Any]) -> int:
    """How deep tables and arrays nest in ``data``: the top-level table is level 0, a table or
    array in one of level n is level n + 1 (a walk without recursion, which stops past
    ``MAX_DEPTH``)."""
    deepest = 0
    todo: list[tuple[dict[str, Any] | list[Any], int]] = [(data, 0)]
    while todo and deepest <= MAX_DEPTH:
        value, level = todo.pop()
        deepest = max(deepest, level)
        inner = value.values() if isinstance(value, dict) else value
        todo.extend((v, level + 1) for v in inner if isinstance(v, dict | list))
    return deepest
