"""The fingerprint of the msroute code that is running, for what must not mix results of
different code: the cell cache (``msroute.experiments.cellcache``) and the Ray backend's
check of its nodes (``msroute.experiments.backends``).

The version string alone is not enough: the code between two releases (a development
checkout, an editable install) computes other numbers under the same version whenever a
policy, an environment or a random stream changes, and a cached cell of that older code
would then be reused silently. The digest covers every source file and packaged data file of
the package, so any change to them gives another digest.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

#: The files that make up the code and its data (compiled and cached files are left out).
_SUFFIXES = frozenset({".py", ".txt"})


@cache
def code_digest() -> str:
    """The digest (``tree_digest``) of the installed msroute package; computed once per
    process (a few milliseconds)."""
    return tree_digest(Path(__file__).resolve().parent)


def tree_digest(root: Path) -> str:
    """SHA-256 (its first 16 hex digits) of the source and data files below ``root``, each
    with its path relative to ``root``, in path order; caches (``__pycache__``, numba's index
    and machine code files) are left out, as they change with every run, not with the code."""
    files = sorted(
        p for p in root.rglob("*") if p.suffix in _SUFFIXES and "__pycache__" not in p.parts
    )
    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]
