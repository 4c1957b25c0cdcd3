"""Refuse work that cannot fit in memory, before it starts, with a message instead of a
``MemoryError`` traceback halfway through."""

from __future__ import annotations

import os

from msroute.errors import ResourceError

__all__ = ["available_bytes", "check_memory"]


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
