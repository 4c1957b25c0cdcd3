"""Compiled loops of the per-run random streams (numba): numpy's numbers, faster.

Thompson sampling draws 2 R K Gamma variates a round (8,000 at R = 80, K = 50). In numpy each
costs a normal from its run's generator (numpy's ziggurat, about 10 ns a value through
``Generator.standard_normal``) and a dozen passes over the candidates, and the few rejected
ones a dozen more small calls. Compiled, the same normals cost half as much and the candidates,
their retries included, one pass.

The loops make numpy's floating-point operations in numpy's order (numba contracts no
``a * b + c`` into a fused multiply-add unless asked), so a variate's value is numpy's bit for
bit. One operation can differ: the logarithms of the acceptance test of the candidates the
squeeze rejects come from the C library, numpy's from its own vector code, and the two can
differ in the last bit (as numpy's own do between CPUs). A decision changes only if the two
sides of the test lie within that bit of each other, which has a probability of about 1e-16 per
test; ``tests/test_streams.py`` compares the loops with numpy and ``tests/test_fingerprint.py``
a whole sweep.

Imported on first use: importing numba and loading the machine code take about a second per
process. The code is cached next to this file, or in the user's cache directory when that is
read-only, and compiled in memory (a few seconds) when neither can be written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import numba
import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray

__all__ = ["fill_normals", "marsaglia_tsang"]

F = TypeVar("F", bound=Callable[..., object])


def _compiled(fn: F) -> F:
    """``fn`` compiled to machine code, cached on disk where a cache directory is writable."""
    try:
        return cast(F, numba.njit(cache=True, nogil=True)(fn))
    except RuntimeError:  # numba found no writable cache location: compile in each process
        return cast(F, numba.njit(nogil=True)(fn))


@_compiled
def fill_normals(generator: np.random.Generator, out: FloatArray) -> None:
    """Fill ``out`` (1-d) with ``generator``'s next standard normals, as numpy's
    ``standard_normal(out=out)`` does: the same values, and the generator left in the same state
    (numba's ``standard_normal`` is numpy's ziggurat on the same bit generator)."""
    for i in range(out.size):
        out[i] = generator.standard_normal()


@_compiled
def _candidate(d: float, c: float, x: float, u: float) -> tuple[float, bool]:
    """One Marsaglia-Tsang candidate: ``(d v, accepted)``, the operations of
    :func:`msroute.policies.streams._candidate` in its order."""
    w = c * x
    w += 1.0
    v = w * w * w
    x2 = x * x
    if u < 1.0 - x2 * x2 * 0.0331:
        return v * d, True
    # v <= 0: log v is NaN and the test fails, as in numpy. log u = -inf passes.
    return v * d, bool(np.log(u) < 0.5 * x2 + d * (1.0 - v + np.log(v)))


@_compiled
def marsaglia_tsang(
    d: FloatArray,
    c: FloatArray,
    x: FloatArray,
    u: FloatArray,
    spare_x: FloatArray,
    spare_x_pos: IntArray,
    spare_u: FloatArray,
    spare_u_pos: IntArray,
    retries: int,
    out: FloatArray,
    ok: BoolArray,
) -> None:
    """Gamma variates of R x W shapes (constants ``d``, ``c``), run by run, in ``out``.

    Variate ``(r, j)`` tries the candidate of ``x[r, j]``, ``u[r, j]`` first. Then, in passes,
    each variate of run ``r`` still rejected takes the next ``retries`` values of the run's
    spare normals and uniforms (rows ``r`` of ``spare_x``, ``spare_u`` from positions
    ``spare_x_pos[r]``, ``spare_u_pos[r]``, which advance) in the order of its index, and keeps
    its first accepted candidate: the order of :meth:`msroute.policies.streams.RunStreams._gamma`.
    A run stops before a pass its spare rows cannot serve whole; its variates left ``ok ==
    False`` continue there, from the next pass.
    """
    n_runs, width = d.shape
    block = spare_x.shape[1]
    pending = np.empty(width, dtype=np.int64)
    for r in range(n_runs):
        for j in range(width):  # the squeeze alone first: a loop without branches (SIMD)
            xj = x[r, j]
            w = c[r, j] * xj
            w += 1.0
            x2 = xj * xj
            ok[r, j] = u[r, j] < 1.0 - x2 * x2 * 0.0331
            out[r, j] = w * w * w * d[r, j]
        n = 0
        for j in range(width):
            if not ok[r, j]:
                out[r, j], ok[r, j] = _candidate(d[r, j], c[r, j], x[r, j], u[r, j])
                if not ok[r, j]:
                    pending[n] = j
                    n += 1
        while n > 0 and max(spare_x_pos[r], spare_u_pos[r]) + n * retries <= block:
            kept = 0
            for i in range(n):
                j = pending[i]
                px, pu = spare_x_pos[r], spare_u_pos[r]
                for t in range(retries):
                    dv, hit = _candidate(d[r, j], c[r, j], spare_x[r, px + t], spare_u[r, pu + t])
                    if hit:
                        out[r, j], ok[r, j] = dv, True
                        break
                spare_x_pos[r] = px + retries
                spare_u_pos[r] = pu + retries
                if not ok[r, j]:
                    pending[kept] = j
                    kept += 1
            n = kept
