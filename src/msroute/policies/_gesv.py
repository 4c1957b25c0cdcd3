"""One small linear system solved by the LAPACK routine behind numpy's ``linalg.solve``, called
directly: numpy's floats without numpy's fixed cost a call.

``numpy.linalg.solve`` hands each system to ``dgesv`` (LU with partial pivoting) of the LAPACK
its ``_umath_linalg`` extension links (OpenBLAS in numpy's wheels), on a column-major copy of
the matrix: the matrix ``a`` arrives as ``a``'s transpose in row-major order. Looking the
routine up through that extension's own library handle finds the very function numpy calls,
so the same routine on the same bytes gives the same floats, at a fraction of the wrapping's
cost (argument checks, the error state, the gufunc's set-up) for one small system.

The routine's name depends on how numpy was built: ``solver`` takes it from numpy's build
configuration (numpy's wheels: scipy-openblas) and checks the routine, once per process and
size, against ``numpy.linalg.solve`` on systems whose answers tell a misread matrix apart; with
another LAPACK, a name not found or a failed check it returns None and the caller stays with
numpy. Integers are passed as 8 bytes holding small values, which a 4-byte and an 8-byte
interface read alike. A call holds a lock (``ctypes`` releases the GIL and the buffers are
shared).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from functools import cache

import numpy as np

from msroute._validation import FloatArray

__all__ = ["solver"]

_lock = threading.Lock()


def _new_lock() -> None:
    """A forked child starts with a free lock (a parent's thread may hold it at the fork)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock)

#: ``solve(a, b, out) -> bool``: ``out`` = ``numpy.linalg.solve(a.T, b)``'s floats (for a
#: symmetric ``a``, its system), or False with ``out`` untouched where LAPACK finds the matrix
#: singular or the result is not finite (numpy then raises or gives what it gives: ask it).
Solve = Callable[[FloatArray, FloatArray, FloatArray], bool]


@cache
def _routine() -> Callable[..., None] | None:
    """numpy's ``dgesv`` (through its linalg extension's library handle), or None."""
    name = _name()
    try:
        from numpy.linalg import _umath_linalg

        fn = getattr(ctypes.CDLL(_umath_linalg.__file__), name) if name else None
    except (ImportError, OSError, AttributeError):
        return None
    if fn is not None:
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * 8
    return fn


def _name() -> str | None:
    """The name numpy's build gives ``dgesv``: numpy's wheels link scipy-openblas, whose
    symbols carry a ``scipy_`` prefix and, with 64-bit integers, a ``64_`` suffix; None for
    another LAPACK (its name for the routine numpy calls is not known here)."""
    try:
        lapack = np.show_config(mode="dicts")["Build Dependencies"]["lapack"]
    except (KeyError, TypeError, ValueError):
        return None
    if lapack.get("name") != "scipy-openblas":
        return None
    wide = "USE64BITINT" in str(lapack.get("openblas configuration", ""))
    return "scipy_dgesv_64_" if wide else "scipy_dgesv_"


class _Direct:
    """``dgesv`` on (P, P) systems through buffers of its own, whose addresses are set once
    (the arrays live as long as this object, so the addresses stay valid)."""

    def __init__(self, routine: Callable[..., None], p: int) -> None:
        self._routine = routine
        self._lu, self._rhs = np.empty((p, p)), np.empty(p)
        self._info = np.zeros(1, dtype=np.int64)
        self._ints = np.array([p, 1], dtype=np.int64)  # N (= LDA = LDB) and NRHS
        self._ipiv = np.zeros(p, dtype=np.int64)
        n, nrhs = (ctypes.c_void_p(self._ints.ctypes.data + k * 8) for k in (0, 1))
        self._args = (n, nrhs, _ptr(self._lu), n, _ptr(self._ipiv), _ptr(self._rhs), n)
        self._info_ptr = _ptr(self._info)

    def __call__(self, a: FloatArray, b: FloatArray, out: FloatArray) -> bool:
        with _lock:
            self._lu[...] = a  # read column-major: a^T, as numpy hands over a.T
            self._rhs[...] = b
            self._info[0] = 0
            self._routine(*self._args, self._info_ptr)
            if self._info[0] != 0 or not np.isfinite(self._rhs).all():
                return False
            out[...] = self._rhs
        return True


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


@cache
def solver(p: int) -> Solve | None:
    """The direct solve of (P, P) systems, or None where it is not numpy's (see the module
    docstring); checked once per process and size."""
    routine = _routine()
    if routine is None or p < 1:
        return None
    solve = _Direct(routine, p)
    return solve if _agrees(solve, p) else None


def _agrees(solve: Solve, p: int) -> bool:
    """Whether ``solve`` gives ``numpy.linalg.solve``'s floats on probes of size ``p``: random
    nonsymmetric matrices (a transposed or misread matrix answers otherwise) that need
    pivoting, and Gram matrices as the model builds them."""
    rng = np.random.default_rng(p)
    out = np.empty(p)
    for k in range(16):
        if k % 2:
            a = rng.standard_normal((p, p)) + np.diag(rng.uniform(-1.0, 1.0, p))
        else:
            feats = rng.random((4 * p, p)) < 0.4
            feats[:, 0] = True
            x = feats.astype(np.float64)
            a = np.eye(p) + x.T @ x
        b = rng.standard_normal(p)
        want = np.linalg.solve(a.T[None], b[None, :, None])[0, :, 0]
        if not (solve(a, b, out) and np.array_equal(out, want)):
            return False
    return True
