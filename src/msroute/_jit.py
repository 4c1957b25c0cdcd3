"""How msroute compiles its loops with numba, and the one step several of them share.

The compiled loops (``msroute.policies._compiled``, ``msroute._outcome``) are imported on
first use, never by ``import msroute``: importing numba and loading the machine code are a
cost that only the processes that run the loops should pay. The code is cached next to its
module, or in the user's cache directory when that is read-only, and compiled in memory when
neither can be written.

numba's cache checks only the source file of the function it compiled: a loop that inlines a
step from another module keeps its cached machine code when only that other module changes.
Delete the ``__pycache__`` folders' ``*.nbi``/``*.nbc`` files after editing such a step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import numba
from numba.core import types

from msroute._validation import IntArray

__all__ = ["compiled", "eager", "inline", "read_only", "repeated"]

F = TypeVar("F", bound=Callable[..., object])


def compiled(fn: F) -> F:
    """``fn`` compiled to machine code, cached on disk where a cache directory is writable."""
    try:
        return cast(F, numba.njit(cache=True, nogil=True)(fn))
    except RuntimeError:  # numba found no writable cache location: compile in each process
        return cast(F, numba.njit(nogil=True)(fn))


def eager(signature: object) -> Callable[[F], F]:
    """Compiled for one signature when first imported, cached on disk where a cache directory
    is writable (one machine code, loaded before any worker is forked)."""

    def wrap(fn: F) -> F:
        try:
            return cast(F, numba.njit(signature, cache=True, nogil=True)(fn))
        except RuntimeError:  # numba found no writable cache location: compile in each process
            return cast(F, numba.njit(signature, nogil=True)(fn))

    return wrap


def read_only(dtype: types.Type, ndim: int) -> types.Type:
    """A read-only C-contiguous array type for ``eager``; writable arrays convert to it, so
    that arrays of either kind share one machine code."""
    return types.Array(dtype, ndim, "C", readonly=True)


def inline(fn: F) -> F:
    """``fn`` compiled into its callers (the small steps of the loops)."""
    return cast(F, numba.njit(inline="always")(fn))


@inline
def repeated(routed: IntArray, r: int, j: int) -> bool:
    """Whether ``routed[r, j]`` already appears in ``routed[r, :j]``: the loops that credit each
    distinct routed expert once skip it."""
    i = 0
    while i < j and routed[r, i] != routed[r, j]:
        i += 1
    return i < j
