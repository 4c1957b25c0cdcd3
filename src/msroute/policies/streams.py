"""One random stream per run, so that a run's decisions do not depend on its batch.

DESIGN.md: every run derives its policy stream from its own seed. A policy batched over R runs
therefore holds R generators, not one: run ``r`` makes the same decisions whether it is run
alone, inside a sweep of 80 runs, or resumed from a cache. Drawing from R generators costs R
calls, so uniforms (what OMD's multinomial draws, Random's shuffle and MoE's Gumbel noise need)
are drawn in blocks of many rounds per run and served from a buffer; only Beta samples with
per-round parameters (Thompson sampling) call each run's generator every round.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from msroute._seeding import SeedArg, child_seed, run_seed_sequences
from msroute._validation import FloatArray, check_positive_int
from msroute.errors import InvalidValueError

__all__ = ["RunStreams"]


class RunStreams:
    """The random streams of R runs, each from its own seed.

    Parameters
    ----------
    seed : int, SeedSequence, sequence of those, or None
        One seed per run, or one seed standing for its R spawned children (see
        :func:`msroute._seeding.run_seed_sequences`); None draws fresh entropy.
    n_runs : int
        R.
    block : int, default 1024
        Size of each run's buffer of uniforms for :meth:`uniform` (at least the widest call);
        it is topped up, one call per run, when a call would run past its end.

    Examples
    --------
    >>> both = RunStreams([3, 4], n_runs=2)
    >>> alone = RunStreams([4], n_runs=1)
    >>> bool(np.array_equal(both.uniform(5)[1], alone.uniform(5)[0]))
    True
    """

    #: The state to save and restore (see :mod:`msroute.policies.persist`).
    _state_attrs: ClassVar[tuple[str, ...]] = ("generators", "_buffered", "_buffer", "_pos")

    def __init__(self, seed: SeedArg, n_runs: int, block: int = 1024) -> None:
        r = check_positive_int(n_runs, "n_runs")
        self.block = check_positive_int(block, "block")
        seqs = run_seed_sequences(seed, r)
        # Two independent streams per run: one for direct draws (Beta), one feeding the buffer
        # of uniforms, so that neither depends on when the other is drawn from.
        self.generators: tuple[np.random.Generator, ...] = tuple(
            np.random.default_rng(child_seed(s, 0)) for s in seqs
        )
        self._buffered: tuple[np.random.Generator, ...] = tuple(
            np.random.default_rng(child_seed(s, 1)) for s in seqs
        )
        # A fixed-shape buffer (so that saved state always fits); ``_pos`` uniforms are used.
        self._buffer: FloatArray = np.zeros((r, self.block))
        self._pos = self.block

    @property
    def n_runs(self) -> int:
        """R."""
        return len(self.generators)

    def uniform(self, width: int) -> FloatArray:
        """The next ``width`` uniforms in ``[0, 1)`` of every run, shape (R, width).

        Each run consumes its own stream in order, so its values depend only on its seed and
        on the widths asked so far, never on the other runs or on the buffer's size.
        """
        if width > self.block:
            raise InvalidValueError(f"width == {width} exceeds the buffer of {self.block} uniforms")
        if self._pos + width > self.block:
            fresh = np.stack([g.random(self._pos) for g in self._buffered])
            self._buffer = np.concatenate([self._buffer[:, self._pos :], fresh], axis=1)
            self._pos = 0
        out = self._buffer[:, self._pos : self._pos + width]
        self._pos += width
        return out

    def beta(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """One ``Beta(a[r, i], b[r, i])`` sample per entry (R, K), run ``r`` from its own stream.

        Drawn as ``X / (X + Y)`` with ``X ~ Gamma(a)`` and ``Y ~ Gamma(b)`` (exactly Beta), both
        in one ``standard_gamma`` call per run: the per-call cost, not the sampling, dominates
        at this size, and this halves the calls of per-run ``Generator.beta``.
        """
        k = a.shape[1]
        shapes = np.concatenate([a, b], axis=1)
        g = np.stack(
            [gen.standard_gamma(row) for gen, row in zip(self.generators, shapes, strict=True)]
        )
        return np.asarray(g[:, :k] / (g[:, :k] + g[:, k:]), dtype=np.float64)
