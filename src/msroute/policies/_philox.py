"""The first uniform of a live router's decision stream, without positioning numpy's generator.

A live router draws decision ``n``'s randomness from numpy's ``Philox`` keyed by its seed with
counter ``(0, n, 0, 0)`` and an empty buffer (``msroute.router.streams``). Its first
``Generator.random`` is then Philox-4x64-10 (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3", SC 2011; numpy's ``philox.h``) of the counter ``(1, n, 0, 0)`` (numpy increments the
counter before it fills its buffer), whose first word's top 53 bits make the double. One
decision at M = 1 needs only that uniform: computing it costs far less than setting the
generator's state. ``first_uniform`` is the computation in Python integers;
``msroute.policies._compiled.philox`` compiles the same rounds on 64-bit words. Both are tested
against numpy's generator.
"""

from __future__ import annotations

from typing import Any

__all__ = ["M0", "M1", "ROUNDS", "W0", "W1", "first_uniform"]

#: Philox-4x64's multipliers and its key schedule's Weyl increments (Random123's constants).
M0, M1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157
W0, W1 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
#: numpy's number of rounds.
ROUNDS = 10
_MASK = (1 << 64) - 1
_TO_DOUBLE = 1.0 / 9007199254740992.0  # 2^-53: numpy's next_double


def first_uniform(key: Any, n: int) -> float:
    """The first ``Generator.random`` of numpy's ``Philox(key=key)`` at counter ``(0, n, 0, 0)``
    with an empty buffer: ``key`` a sequence of two 64-bit words, ``n`` the decision."""
    k0, k1 = int(key[0]), int(key[1])
    c0, c1, c2, c3 = 1, int(n) & _MASK, 0, 0
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + W0) & _MASK, (k1 + W1) & _MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 64) ^ c1 ^ k0, p1 & _MASK, (p0 >> 64) ^ c3 ^ k1, p0 & _MASK
    return (c0 >> 11) * _TO_DOUBLE
