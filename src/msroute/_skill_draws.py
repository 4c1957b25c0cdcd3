"""The skill environments' Beta draws, compiled (numba): one run's rounds from its generator.

``msroute.envs`` draws chunk ``c`` of run ``r`` from a xoshiro256++ generator of its own, seeded
from the child seed of the run's seed keyed by ``c``, with the variates of
``msroute.policies._compiled.variates`` (numpy's ziggurat normals, Marsaglia and Tsang's
Gammas, ``X / (X + Y)`` for each Beta). Round after round, entry after entry: consecutive calls
draw what one call over their rounds draws, and a call's first rounds do not depend on how many
follow, so a chunk cut into segments of different means, and a shorter last chunk, are the
same stream.

Compiled for one signature when first imported (``msroute._jit.eager``), imported on the first
draw, never by ``import msroute``: a process that draws skills loads the machine code once,
before any thread or worker draws.
"""

from __future__ import annotations

import numpy as np
from numba import types

from msroute._jit import eager, read_only
from msroute._validation import FloatArray, UInt64Array
from msroute.policies._compiled.variates import beta, constants

__all__ = ["beta_rounds"]


@eager(
    types.none(
        read_only(types.float64, 2),
        read_only(types.float64, 2),
        types.uint64[::1],
        types.Array(types.float64, 3, "A"),
    )
)
def beta_rounds(a: FloatArray, b: FloatArray, state: UInt64Array, out: FloatArray) -> None:
    """``out[t, n, i] ~ Beta(a[n, i], b[n, i])`` (T, N, K), round ``t`` after round ``t - 1``,
    from the generator ``state`` (4,), advanced in place: one run's skills over rounds of the
    same means.
    """
    n_dims, n_experts = a.shape
    d_a, c_a = np.empty((n_dims, n_experts)), np.empty((n_dims, n_experts))
    d_b, c_b = np.empty((n_dims, n_experts)), np.empty((n_dims, n_experts))
    for n in range(n_dims):
        for i in range(n_experts):
            d_a[n, i], c_a[n, i] = constants(a[n, i])
            d_b[n, i], c_b[n, i] = constants(b[n, i])
    s = (state[0], state[1], state[2], state[3])
    for t in range(out.shape[0]):
        for n in range(n_dims):
            for i in range(n_experts):
                out[t, n, i], s = beta(
                    a[n, i], b[n, i], d_a[n, i], c_a[n, i], d_b[n, i], c_b[n, i], s
                )
    state[0], state[1], state[2], state[3] = s
