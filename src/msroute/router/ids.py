"""The random decision ids a router mints (``Router.route(id_prefix=...)``).

A minted id is ``<prefix><32 hex digits>``: 16 bytes (128 bits) of the operating system's
randomness, as ``secrets`` draws them. Two of them are equal with a probability of about
``n**2 / 2**129`` among ``n`` ids (below ``1e-14`` at a trillion), and a client cannot name
one before it was shown, so a minted id is new by construction: the router journals it with no
lookup of the journal, where a client's id must be looked up (it may be a retry).
"""

from __future__ import annotations

import os

__all__ = ["ID_BYTES", "RandomHex"]

#: The random bytes of a minted id (two hex digits each).
ID_BYTES = 16


class RandomHex:
    """Random hex digits for decision ids: the operating system's random bytes, read
    ``_BATCH`` bytes at a time rather than in a system call per id. A batch belongs to the
    process that read it: a forked child reads its own, so that two processes never give the
    same digits. Not for several threads at once (a router serves one call at a time)."""

    _BATCH = 4096

    def __init__(self) -> None:
        self._bytes = b""
        self._at = 0
        self._pid = os.getpid()

    def __call__(self, n: int = ID_BYTES) -> str:
        """``2 n`` hex digits, from ``n`` bytes never given before (in any process)."""
        if self._at + n > len(self._bytes) or self._pid != os.getpid():
            self._bytes, self._at, self._pid = os.urandom(max(n, self._BATCH)), 0, os.getpid()
        start, self._at = self._at, self._at + n
        return self._bytes[start : self._at].hex()
