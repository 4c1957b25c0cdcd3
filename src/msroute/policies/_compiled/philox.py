"""``msroute.policies._philox.first_uniform`` on 64-bit words, compiled (numba): the same
rounds, each 64 x 64-bit product split into 32-bit halves for its high word."""

from __future__ import annotations

import numpy as np

from msroute._jit import inline
from msroute.policies._philox import M0, M1, ROUNDS, W0, W1

__all__ = ["first_uniform"]

_LOW = np.uint64(0xFFFFFFFF)
_HALF = np.uint64(32)
_SHIFT = np.uint64(11)
_TO_DOUBLE = 1.0 / 9007199254740992.0
_M0, _M1, _W0, _W1 = np.uint64(M0), np.uint64(M1), np.uint64(W0), np.uint64(W1)


@inline
def _mulhi(a: np.uint64, b: np.uint64) -> np.uint64:
    """The high 64 bits of the 128-bit product ``a b``."""
    a_lo, a_hi = a & _LOW, a >> _HALF
    b_lo, b_hi = b & _LOW, b >> _HALF
    lo_lo, lo_hi, hi_lo = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo
    mid = (lo_lo >> _HALF) + (lo_hi & _LOW) + (hi_lo & _LOW)
    return a_hi * b_hi + (lo_hi >> _HALF) + (hi_lo >> _HALF) + (mid >> _HALF)


@inline
def first_uniform(key: np.ndarray, n: int) -> float:
    """``msroute.policies._philox.first_uniform`` of ``key`` (2,) uint64 and decision ``n``."""
    k0, k1 = key[0], key[1]
    c0, c1, c2, c3 = np.uint64(1), np.uint64(n), np.uint64(0), np.uint64(0)
    for r in range(ROUNDS):
        if r:
            k0, k1 = k0 + _W0, k1 + _W1
        h0, h1 = _mulhi(_M0, c0), _mulhi(_M1, c2)
        c0, c1, c2, c3 = h1 ^ c1 ^ k0, _M1 * c2, h0 ^ c3 ^ k1, _M0 * c0
    return float(c0 >> _SHIFT) * _TO_DOUBLE
