"""Refuse work that cannot fit in memory, before it starts, with a message instead of a
``MemoryError`` traceback halfway through; and large arrays that are written once and then
kept (a sweep's skills) on ordinary pages."""

from __future__ import annotations

import math
import mmap
import os

import numpy as np

from msroute._validation import FloatArray
from msroute.errors import ResourceError

__all__ = ["available_bytes", "check_memory", "empty_kept"]


def available_bytes() -> int | None:
    """Memory the process may still use: ``MemAvailable`` of ``/proc/meminfo`` where there is
    one, else the physical memory; None if neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def check_memory(needed: float, what: str, hint: str) -> None:
    """Raise ``ResourceError`` if ``needed`` bytes exceed the available memory.

    Parameters
    ----------
    needed : float
        Estimated bytes (a float: estimates of absurd sizes must not overflow).
    what : str
        What needs them, e.g. "simulate: T = 10^9 rounds x 80 runs".
    hint : str
        What to change, e.g. "lower --horizon or --seeds".
    """
    avail = available_bytes()
    if avail is not None and needed > avail:
        raise ResourceError(
            f"{what} needs about {_size(needed)} of memory, but {_size(avail)} is available; {hint}"
        )


def empty_kept(shape: tuple[int, ...]) -> FloatArray:
    """An uninitialized float64 array of ``shape`` on ordinary (4 KiB) pages, for large arrays
    that are written once and then kept (the chunks of skills a sweep draws before it forks
    its workers).

    numpy asks the kernel for transparent huge pages for every array of 4 MiB or more; where
    the kernel compacts memory to find them when they are first written (``defrag`` set to
    ``madvise``, as on many virtual machines), writing a few hundred MB of fresh huge pages
    costs several times the CPU of ordinary pages. An anonymous mapping advised
    ``MADV_NOHUGEPAGE`` (where the platform has it) keeps them ordinary. The values are the
    array's to write, as with ``numpy.empty``; the mapping lives as long as the array.
    """
    size = math.prod(shape) * 8
    if size == 0:
        return np.empty(shape)
    pages = mmap.mmap(-1, size)
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advice is not None:
        pages.madvise(advice)
    return np.frombuffer(pages, dtype=np.float64).reshape(shape)
