"""One random stream per run, so that a run's decisions do not depend on its batch.

docs/architecture.md, "One round": every run derives its policy stream from its own seed. A policy
batched over R runs therefore holds R generators, not one: run ``r`` makes the same decisions
whether it is run alone, inside a sweep of 80 runs, or resumed from a cache. Two kinds:

* Uniforms (OMD's multinomial draws, Random's shuffle, MoE's Gumbel noise): numpy generators,
  one per run, drawn in blocks of many rounds per run and served from a per-run buffer
  (``BufferedStream``), so that R generators cost R calls only once in a few thousand
  values.
* Thompson sampling's Gamma and Beta variates: one xoshiro256++ generator per run whose state is
  a row of an (R, 4) array of 64-bit words (``RunStreams.gamma_state``), advanced in place
  by one compiled loop over all runs and experts (``msroute.policies._compiled.variates``:
  numpy's ziggurat for the normals, Marsaglia and Tsang's method for the Gammas, ACM TOMS 26(3),
  2000).
  Run ``r`` reads and advances only row ``r``, in the order of its own draws and rejections,
  so what it draws depends on its seed and its shapes alone, by construction; no buffer to
  refill, no per-run Python call, and the top M of the samples picked in the same loop
  (``RunStreams.beta_top``). Marsaglia and Tsang rather than Cheng's uniform-only methods BB
  and GB: on Thompson sampling's posteriors those accept only 70-80% of their candidates.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from msroute._seeding import SeedArg, child_seed, run_seed_sequences
from msroute._validation import FloatArray, IntArray, UInt64Array, check_positive_int
from msroute.errors import InvalidStateError, InvalidValueError

__all__ = ["BufferedStream", "GammaConstants", "RunStreams"]


class BufferedStream:
    """Uniforms in ``[0, 1)`` for each of R runs, each run from its own numpy generator.

    Each run draws from its own generator in blocks of ``block`` values and is served from its
    own buffer; a request wider than the buffer is served from what is left in it and then
    straight from the generator. Either way run ``r`` receives its generator's values in order,
    so its values depend only on its seed and on how many it has taken so far, not on the
    buffer's size, on how the requests were split, or on the other runs.

    Parameters
    ----------
    seeds : sequence of SeedSequence
        One per run.
    key : int
        The child of each run's seed this stream uses.
    block : int
        Buffer size per run.
    """

    #: The state to save and restore (see ``msroute.policies.state_walk``).
    _state_attrs: ClassVar[tuple[str, ...]] = ("generators", "buffer", "pos")

    def validate_state(self, prefix: str) -> None:
        """A loaded buffer holds uniforms in ``[0, 1)`` and each read position is inside it
        (``msroute.policies.check_state``)."""
        if self.buffer.size and not 0.0 <= self.buffer.min() <= self.buffer.max() < 1.0:
            raise InvalidStateError(
                f"state entry {prefix + 'buffer'!r} must hold uniforms in [0, 1)"
            )
        if self.pos.size and self.pos.max() > self.buffer.shape[-1]:
            raise InvalidStateError(
                f"state entry {prefix + 'pos'!r} must be in [0, {self.buffer.shape[-1]}]"
            )

    def __init__(self, seeds: tuple[np.random.SeedSequence, ...], key: int, block: int) -> None:
        self.generators: tuple[np.random.Generator, ...] = tuple(
            np.random.default_rng(child_seed(s, key)) for s in seeds
        )
        self.block = block
        # A fixed-shape buffer (so that saved state always fits); run r has used pos[r] values.
        self.buffer: FloatArray = np.zeros((len(seeds), block))
        self.pos: IntArray = np.full(len(seeds), block, dtype=np.int64)

    def _refill(self, runs: IntArray) -> None:
        """Move each given run's unused values to the front of its buffer and top it up."""
        for r in runs.tolist():
            rest = self.block - int(self.pos[r])
            self.buffer[r, :rest] = self.buffer[r, self.pos[r] :]
            self.generators[r].random(out=self.buffer[r, rest:])
            self.pos[r] = 0

    def take(self, width: int) -> FloatArray:
        """The next ``width`` values of every run, shape (R, width)."""
        p = int(self.pos[0])
        # The usual case, first: every run has taken as many and has ``width`` values left.
        if p + width > self.block or not bool((self.pos == p).all()):
            n_runs = self.pos.size
            if width > self.block:
                return np.stack([self._take_wide(r, width) for r in range(n_runs)])
            short = np.flatnonzero(self.pos + width > self.block)
            if short.size:
                self._refill(short)
            p = int(self.pos[0])
            if not bool((self.pos == p).all()):
                cols = self.pos[:, None] + np.arange(width)
                self.pos += width
                values: FloatArray = self.buffer[np.arange(n_runs)[:, None], cols]
                return values
        self.pos += width
        return self.buffer[:, p : p + width].copy()

    def _take_wide(self, r: int, count: int) -> FloatArray:
        """Run ``r``'s next ``count`` values, more than a buffer holds."""
        p = int(self.pos[r])
        out = np.empty(count)
        rest = self.block - p
        out[:rest] = self.buffer[r, p:]
        self.generators[r].random(out=out[rest:])
        self.pos[r] = self.block
        return out


class GammaConstants:
    """Marsaglia-Tsang constants of R x W Gamma shapes, kept up to date by the compiled loops.

    For a shape ``a >= 1``: ``d = a - 1/3`` and ``c = 1 / sqrt(9 d)``; a shape ``a < 1`` is
    drawn as ``Gamma(a + 1) U^(1/a)``, so its constants are those of ``a + 1``. ``seen`` holds
    the shape each entry's constants belong to (NaN: none yet); a loop that meets another
    shape there computes that entry's constants again before it draws. A learner whose shapes
    change in a few entries a round (Thompson sampling: 2 M of 2 K per run) thus pays for
    those only, without saying which changed; a restored state is one more change. Derived
    values, not state: nothing of them is saved.

    Parameters
    ----------
    n_runs, width : int
        R and W.
    """

    def __init__(self, n_runs: int, width: int) -> None:
        self.seen: FloatArray = np.full((n_runs, width), np.nan)
        self.d: FloatArray = np.empty((n_runs, width))
        self.c: FloatArray = np.empty((n_runs, width))


def _shapes(value: FloatArray, name: str) -> FloatArray:
    """``value`` as a C-ordered 2-d float array (the compiled loops check its entries)."""
    shape = np.ascontiguousarray(value, dtype=np.float64)
    if shape.ndim != 2:
        raise InvalidValueError(f"{name} must be a 2-d array, got {shape.ndim} dimension(s)")
    return shape


class RunStreams:
    """The random streams of R runs, each from its own seed.

    Parameters
    ----------
    seed : int, SeedSequence, sequence of those, or None
        One seed per run, or one seed standing for its R spawned children (see
        ``msroute._seeding.run_seed_sequences``); None draws fresh entropy.
    n_runs : int
        R.
    block : int, default 4096
        Buffer size per run of the uniforms (see ``BufferedStream``); it changes no value.

    Attributes
    ----------
    uniforms : BufferedStream
        The uniforms of every policy (key 1 of each run's seed).
    gamma_state : ndarray of uint64, shape (R, 4)
        The xoshiro256++ state of each run's Gamma sampler, seeded from key 0 of the run's seed.

    Examples
    --------
    >>> both = RunStreams([3, 4], n_runs=2)
    >>> alone = RunStreams([4], n_runs=1)
    >>> bool(np.array_equal(both.uniform(5)[1], alone.uniform(5)[0]))
    True
    """

    #: The state to save and restore (see ``msroute.policies.state_walk``).
    _state_attrs: ClassVar[tuple[str, ...]] = ("uniforms", "gamma_state")

    def validate_state(self, prefix: str) -> None:
        """A loaded xoshiro256++ state has no row of zeros, a state the generator never leaves
        (``msroute.policies.check_state``)."""
        state = self.gamma_state
        if state.size and not state.any(axis=-1).all():
            raise InvalidStateError(
                f"state entry {prefix + 'gamma_state'!r} has a row of zeros, a state "
                "xoshiro256++ never leaves"
            )

    def __init__(self, seed: SeedArg, n_runs: int, block: int = 4096) -> None:
        r = check_positive_int(n_runs, "n_runs")
        block = check_positive_int(block, "block")
        seqs = run_seed_sequences(seed, r)
        self.uniforms = BufferedStream(seqs, 1, block)
        self.gamma_state: UInt64Array = np.stack(
            [child_seed(s, 0).generate_state(4, np.uint64) for s in seqs]
        )

    @property
    def n_runs(self) -> int:
        """R."""
        return len(self.uniforms.generators)

    def uniform(self, width: int) -> FloatArray:
        """The next ``width`` uniforms in ``[0, 1)`` of every run, shape (R, width)."""
        return self.uniforms.take(width)

    def standard_gamma(self, shape: FloatArray) -> FloatArray:
        """One ``Gamma(shape[r, i])`` variate per entry (R, W), run ``r`` from its own stream."""
        from msroute.policies._compiled.variates import gamma_variates  # numba, on first use

        shape = _shapes(shape, "Gamma shapes")
        constants = GammaConstants(*shape.shape)
        out = np.empty(shape.shape)
        g = constants
        gamma_variates(shape, g.seen, g.d, g.c, self.gamma_state, out)
        return out

    def beta(
        self, a: FloatArray, b: FloatArray, constants: GammaConstants | None = None
    ) -> FloatArray:
        """``Beta(a[r, i], b[r, i])`` per entry (R, K), run ``r`` from its own stream.

        Drawn as ``X / (X + Y)`` with ``X ~ Gamma(a)`` and ``Y ~ Gamma(b)`` (exactly Beta); with a
        shape below 1 the ratio is taken from the logarithms, so that it never is ``0 / 0``.
        ``constants`` (width 2K: ``a``'s, then ``b``'s) carries the Gamma constants from call to
        call; it changes no value.
        """
        from msroute.policies._compiled.variates import beta_variates  # numba, on first use

        a, b, constants = self._beta_args(a, b, constants)
        out = np.empty(a.shape)
        g = constants
        beta_variates(a, b, g.seen, g.d, g.c, self.gamma_state, out)
        return out

    def beta_top(
        self,
        a: FloatArray,
        b: FloatArray,
        m: int,
        offset: FloatArray | None,
        constants: GammaConstants | None = None,
    ) -> IntArray:
        """The M largest of ``beta``'s samples plus ``offset`` (R, K) in each run, best
        first, ties to the lower index: ``top_m(beta(a, b) + offset, m)`` of
        ``msroute.policies.team``, drawn alike, in one compiled loop."""
        from msroute.policies._compiled.top import beta_top  # numba, on first use

        a, b, constants = self._beta_args(a, b, constants)
        extra = np.empty((a.shape[0], 0)) if offset is None else np.ascontiguousarray(offset)
        draws = np.empty((a.shape[0], m), dtype=np.int64)
        g = constants
        beta_top(a, b, g.seen, g.d, g.c, extra, self.gamma_state, draws)
        return draws

    def _beta_args(
        self, a: FloatArray, b: FloatArray, constants: GammaConstants | None
    ) -> tuple[FloatArray, FloatArray, GammaConstants]:
        a, b = _shapes(a, "Beta shapes a"), _shapes(b, "Beta shapes b")
        if a.shape != b.shape:
            raise InvalidValueError(f"Beta shapes a {a.shape} and b {b.shape} must match")
        if constants is None:
            constants = GammaConstants(a.shape[0], 2 * a.shape[1])
        return a, b, constants
