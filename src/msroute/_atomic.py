"""File helpers. Atomic writes: every output is written to a temporary name and renamed over
its target. And the errors a damaged archive can raise when read.

A crash or a Ctrl-C while writing therefore leaves either the old file or the complete new one,
never a truncated file under the target's name. Errors name the target, not the temporary file.
The file gets the permissions any new file of the user gets (``0o666`` less the umask), not the
``0o600`` of a temporary file, so results, figures and policy files can be shared as usual.
"""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
import tokenize
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DAMAGED_FILE_ERRORS", "atomic_path", "write_text_atomic"]

#: What reading a damaged zip of ``.npy`` arrays (a cached cell, a policy file) can raise, layer
#: by layer: the file, the zip directory and CRCs, zlib, the ``.npy`` header (parsed as a Python
#: literal), the array data, and a header asking for an absurd allocation.
DAMAGED_FILE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    ValueError,
    KeyError,
    NotImplementedError,
    OverflowError,
    MemoryError,
    SyntaxError,
    tokenize.TokenError,
    struct.error,
    zipfile.BadZipFile,
    zlib.error,
)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success it is synced and renamed over it.

    The temporary name keeps the target's suffix (writers such as ``numpy.savez`` and
    matplotlib's ``savefig`` go by it) and starts with a dot. On any exception, Ctrl-C
    included, the temporary file is removed and the target is left as it was. An ``OSError``
    raised while writing or renaming is re-raised naming ``target``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as d:
    ...     target = pathlib.Path(d) / "out.txt"
    ...     with atomic_path(target) as tmp:
    ...         _ = tmp.write_text("done")
    ...     print(target.read_text(), sorted(p.name for p in pathlib.Path(d).iterdir()))
    done ['out.txt']
    """
    path = Path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(
            prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent
        )
        try:
            os.chmod(fd if os.chmod in os.supports_fd else name, 0o666 & ~_umask())
        finally:
            os.close(fd)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    tmp = Path(name)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(target: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``target`` atomically; returns the target's path."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)


def _umask() -> int:
    """The process's umask, read without changing it where the system says (Linux's
    ``/proc/self/status``), else by setting it and setting it back."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync(path: Path) -> None:
    """Flush the file's data to disk, so the rename never exposes an empty file after a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
