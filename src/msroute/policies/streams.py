"""One random stream per run, so that a run's decisions do not depend on its batch.

docs/architecture.md, "One round": every run derives its policy stream from its own seed. A policy
batched over R runs therefore holds R generators, not one: run ``r`` makes the same decisions
whether it is run
alone, inside a sweep of 80 runs, or resumed from a cache. Drawing from R generators costs R
calls, so every variate is drawn in blocks of many rounds per run and served from a per-run
buffer (:class:`BufferedStream`): uniforms (OMD's multinomial draws, Random's shuffle, MoE's
Gumbel noise) and the normals of Thompson sampling's Gamma variates.

Beta variates (:meth:`RunStreams.beta`) are ratios of Gamma variates, drawn by Marsaglia and
Tsang's rejection method (ACM TOMS 26(3), 2000) in one compiled loop over all runs and experts
(:mod:`msroute.policies._kernels`, which reads the buffers in place): each candidate takes one
normal and one uniform; the first candidate of every variate comes from the run's buffered
streams in order, and the few rejected variates (2-5%) draw their next candidates, four at a
time, from two further per-run streams, each run consuming them in the order of its own
rejections. What a run consumes therefore depends only on its own seed and its own shape
parameters, never on the other runs of the batch. (Cheng's uniform-only methods BB and GB were
measured too: on Thompson sampling's posteriors they accept only 70-80% of their candidates,
which made them slower.)
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from msroute._seeding import SeedArg, child_seed, run_seed_sequences
from msroute._validation import FloatArray, IntArray, check_positive_int
from msroute.errors import InvalidValueError

__all__ = ["BufferedStream", "GammaShapes", "RunStreams"]

Kind = Literal["uniform", "normal"]

#: Candidates a rejected variate draws at once (all rejected: probability below 1e-5).
_RETRIES = 4


class BufferedStream:
    """One kind of variate (uniforms in ``[0, 1)`` or standard normals) for each of R runs.

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
        The child of each run's seed this stream uses (distinct keys: independent streams).
    kind : {"uniform", "normal"}
    block : int
        Buffer size per run.
    """

    #: The state to save and restore (see :mod:`msroute.policies.persist`).
    _state_attrs: ClassVar[tuple[str, ...]] = ("generators", "buffer", "pos")

    def __init__(
        self, seeds: tuple[np.random.SeedSequence, ...], key: int, kind: Kind, block: int
    ) -> None:
        self.generators: tuple[np.random.Generator, ...] = tuple(
            np.random.default_rng(child_seed(s, key)) for s in seeds
        )
        self.kind: Kind = kind
        self.block = block
        # A fixed-shape buffer (so that saved state always fits); run r has used pos[r] values.
        self.buffer: FloatArray = np.zeros((len(seeds), block))
        self.pos: IntArray = np.full(len(seeds), block, dtype=np.int64)

    def _draw(self, r: int, out: FloatArray) -> None:
        if self.kind == "uniform":
            self.generators[r].random(out=out)
        else:
            from msroute.policies._kernels import fill_normals  # numba: imported on first use

            fill_normals(self.generators[r], out)  # numpy's standard_normal, compiled

    def _refill(self, runs: IntArray) -> None:
        """Move each given run's unused values to the front of its buffer and top it up."""
        for r in runs.tolist():
            rest = self.block - int(self.pos[r])
            self.buffer[r, :rest] = self.buffer[r, self.pos[r] :]
            self._draw(r, self.buffer[r, rest:])
            self.pos[r] = 0

    def reserve(self, count: int) -> None:
        """Refill the runs with fewer than ``count`` values left (when ``count`` fits a buffer),
        so that a compiled loop can read that many from the buffer in place."""
        if count <= self.block:
            short = np.flatnonzero(self.pos + count > self.block)
            if short.size:
                self._refill(short)

    def take(self, width: int) -> FloatArray:
        """The next ``width`` values of every run, shape (R, width)."""
        return self.window(width).copy()

    def window(self, width: int) -> FloatArray:
        """As :meth:`take`, but possibly a view into the buffer: valid until the next request.

        The view spares a copy to a caller that reads the values at once (the Gamma sampler).
        """
        p = int(self.pos[0])
        if width <= self.block and bool((self.pos == p).all()):
            if p + width > self.block:
                self._refill(np.arange(self.pos.size))
                p = 0
            self.pos += width
            return self.buffer[:, p : p + width]  # refilled in place by a later request
        counts = np.full(self.pos.size, width, dtype=np.int64)
        return self.take_counts(counts).reshape(self.pos.size, width)

    def take_counts(self, counts: IntArray) -> FloatArray:
        """The next ``counts[r]`` values of each run ``r``, concatenated run after run."""
        short = np.flatnonzero(self.pos + counts > self.block)
        if short.size:
            wide = counts[short] > self.block
            self._refill(short[~wide])
            if wide.any():
                return np.concatenate([self._take_one(r, int(c)) for r, c in enumerate(counts)])
        rows = np.repeat(np.arange(self.pos.size), counts)
        starts = np.cumsum(counts) - counts
        cols = self.pos[rows] + np.arange(rows.size) - starts[rows]
        self.pos += counts
        return self.buffer[rows, cols]

    def _take_one(self, r: int, count: int) -> FloatArray:
        """Run ``r``'s next ``count`` values (after the refills of :meth:`take_counts`)."""
        p = int(self.pos[r])
        if p + count <= self.block:
            self.pos[r] = p + count
            return self.buffer[r, p : p + count].copy()
        out = np.empty(count)
        rest = self.block - p
        out[:rest] = self.buffer[r, p:]
        self._draw(r, out[rest:])
        self.pos[r] = self.block
        return out


class GammaShapes:
    """Shapes of R x W Gamma variates with their Marsaglia-Tsang constants.

    For a shape ``a >= 1``: ``d = a - 1/3`` and ``c = 1 / sqrt(9 d)``; a shape ``a < 1`` is
    drawn as ``Gamma(a + 1) U^(1/a)`` (``boost``), so its constants are those of ``a + 1``.
    The constants cost a few passes over the array; a learner whose shapes change in a few
    entries per round updates just those (:meth:`set`) instead of building them again.

    Parameters
    ----------
    shape : array_like, shape (R, W)
        Finite, positive shapes.
    """

    def __init__(self, shape: FloatArray) -> None:
        self.shape: FloatArray = np.array(shape, dtype=np.float64, order="C")
        if self.shape.ndim != 2 or not bool(np.all((self.shape > 0.0) & (self.shape < np.inf))):
            raise InvalidValueError("Gamma shapes must be a 2-d array of finite, positive numbers")
        self.boost = self.shape < 1.0
        self.any_boost = bool(self.boost.any())
        self.d: FloatArray = np.where(self.boost, self.shape + 1.0, self.shape) - 1.0 / 3.0
        self.c: FloatArray = (1.0 / 3.0) / np.sqrt(self.d)

    def set(self, flat: IntArray, values: FloatArray) -> None:
        """Set the shapes at flat indices ``flat`` to ``values`` (finite, positive)."""
        self.shape.reshape(-1)[flat] = values
        small = values < 1.0
        self.boost.reshape(-1)[flat] = small
        if small.any():
            self.any_boost = True
        elif self.any_boost:  # the last shapes below 1 may just have grown
            self.any_boost = bool(self.boost.any())
        d = np.where(small, values + 1.0, values) - 1.0 / 3.0
        self.d.reshape(-1)[flat] = d
        self.c.reshape(-1)[flat] = (1.0 / 3.0) / np.sqrt(d)


class RunStreams:
    """The random streams of R runs, each from its own seed.

    Parameters
    ----------
    seed : int, SeedSequence, sequence of those, or None
        One seed per run, or one seed standing for its R spawned children (see
        :func:`msroute._seeding.run_seed_sequences`); None draws fresh entropy.
    n_runs : int
        R.
    block : int, default 4096
        Buffer size per run of each stream (see :class:`BufferedStream`); it changes no value.

    Examples
    --------
    >>> both = RunStreams([3, 4], n_runs=2)
    >>> alone = RunStreams([4], n_runs=1)
    >>> bool(np.array_equal(both.uniform(5)[1], alone.uniform(5)[0]))
    True
    """

    #: The state to save and restore (see :mod:`msroute.policies.persist`).
    _state_attrs: ClassVar[tuple[str, ...]] = (
        "uniforms",
        "normals",
        "spare_uniforms",
        "spare_normals",
    )

    def __init__(self, seed: SeedArg, n_runs: int, block: int = 4096) -> None:
        r = check_positive_int(n_runs, "n_runs")
        block = check_positive_int(block, "block")
        seqs = run_seed_sequences(seed, r)
        # Independent children of each run's seed: the uniforms every policy draws (key 1, also
        # the Gamma sampler's first ones), the sampler's first normals (key 0) and its retries
        # (keys 2 and 3).
        self.uniforms = BufferedStream(seqs, 1, "uniform", block)
        self.normals = BufferedStream(seqs, 0, "normal", block)
        self.spare_uniforms = BufferedStream(seqs, 2, "uniform", block)
        self.spare_normals = BufferedStream(seqs, 3, "normal", block)

    @property
    def n_runs(self) -> int:
        """R."""
        return len(self.uniforms.generators)

    def uniform(self, width: int) -> FloatArray:
        """The next ``width`` uniforms in ``[0, 1)`` of every run, shape (R, width)."""
        return self.uniforms.take(width)

    def standard_gamma(self, shapes: GammaShapes) -> FloatArray:
        """One ``Gamma(shape[r, i])`` variate per entry (R, W), run ``r`` from its own streams."""
        g, log_boost = self._gamma(shapes)
        return g if log_boost is None else g * np.exp(log_boost)

    def beta(self, shapes: GammaShapes) -> FloatArray:
        """Beta variates from the shapes ``[a | b]`` (R, 2K): ``Beta(a[r, i], b[r, i])``, (R, K).

        Drawn as ``X / (X + Y)`` with ``X ~ Gamma(a)`` and ``Y ~ Gamma(b)`` (exactly Beta); with a
        shape below 1 the ratio is taken from the logarithms, so that it never is ``0 / 0``.
        """
        k = shapes.shape.shape[1] // 2
        g, log_boost = self._gamma(shapes)
        if log_boost is None:
            return np.asarray(g[:, :k] / (g[:, :k] + g[:, k:]), dtype=np.float64)
        log_g = np.log(g) + log_boost
        return np.asarray(1.0 / (1.0 + np.exp(log_g[:, k:] - log_g[:, :k])), dtype=np.float64)

    def _gamma(self, shapes: GammaShapes) -> tuple[FloatArray, FloatArray | None]:
        """Marsaglia-Tsang Gamma variates, batched: ``(G, L)`` with ``Gamma(shape) = G exp(L)``.

        A candidate ``x ~ N(0, 1)``, ``u ~ U(0, 1)``, ``v = (1 + c x)^3`` is accepted when
        ``u < 1 - 0.0331 x^4`` or ``log u < x^2 / 2 + d (1 - v + log v)`` (with ``v > 0``),
        giving ``d v``. A shape ``a < 1`` adds ``L = log(U) / a`` (None when there is none).
        """
        from msroute.policies._kernels import marsaglia_tsang  # numba: imported on first use

        n_runs, width = shapes.shape.shape
        x = self.normals.window(width)
        u = self.uniforms.window(width)
        spare_x, spare_u = self.spare_normals, self.spare_uniforms
        for spare in (spare_x, spare_u):  # room for one pass of retries in place
            spare.reserve(_RETRIES * width)
        out = np.empty((n_runs, width))
        ok = np.empty((n_runs, width), dtype=np.bool_)
        marsaglia_tsang(
            shapes.d,
            shapes.c,
            x,
            u,
            spare_x.buffer,
            spare_x.pos,
            spare_u.buffer,
            spare_u.pos,
            _RETRIES,
            out,
            ok,
        )
        # Left over by the compiled loop when a run's spare buffers ran short (rare): the same
        # passes, from where it stopped.
        pending = np.flatnonzero(~ok)  # ascending: each run's rejections in order
        d, c, flat = shapes.d.reshape(-1), shapes.c.reshape(-1), out.reshape(-1)
        while pending.size:
            n = pending.size
            counts = np.bincount(pending // width, minlength=n_runs) * _RETRIES
            xs = self.spare_normals.take_counts(counts).reshape(n, _RETRIES)
            us = self.spare_uniforms.take_counts(counts).reshape(n, _RETRIES)
            dv, hit = _candidate(d[pending, None], c[pending, None], xs, us)
            first = hit.argmax(axis=1)
            at = np.arange(n)
            done = hit[at, first]
            flat[pending[done]] = dv[at, first][done]
            pending = pending[~done]
        if not shapes.any_boost:
            return out, None
        rows, cols = np.nonzero(shapes.boost)
        u = self.spare_uniforms.take_counts(np.bincount(rows, minlength=n_runs))
        log_boost = np.zeros_like(out)
        log_boost[rows, cols] = np.log1p(-u) / shapes.shape[rows, cols]  # U = 1 - u in (0, 1]
        return out, log_boost


def _candidate(
    d: FloatArray, c: FloatArray, x: FloatArray, u: FloatArray
) -> tuple[FloatArray, np.ndarray]:
    """``(d v, accepted)`` of Marsaglia-Tsang candidates (``d``, ``c`` broadcast to ``x``).

    ``v <= 0`` needs ``x <= -1/c <= -2.44``, where the squeeze never accepts and ``log v`` is
    NaN, so such a candidate is rejected without a test of its own.
    """
    # In place where the formula allows: the same operations in the same order, fewer arrays.
    w = c * x
    w += 1.0
    v = w * w
    v *= w
    x2 = np.multiply(x, x, out=w)
    squeeze = x2 * x2
    squeeze *= 0.0331
    np.subtract(1.0, squeeze, out=squeeze)
    ok = u < squeeze
    rest = np.nonzero(~ok)
    if rest[0].size:
        dr = np.broadcast_to(d, x.shape)[rest]
        vr = v[rest]
        with np.errstate(divide="ignore", invalid="ignore"):  # log of u = 0 or of v <= 0
            ok[rest] = np.log(u[rest]) < 0.5 * x2[rest] + dr * (1.0 - vr + np.log(vr))
    v *= d
    return v, ok
