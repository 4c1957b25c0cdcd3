"""Skill environments: where the per-round skill matrices ``V^(t)`` come from (Section 6.1).

Every environment serves R independent runs at once and satisfies ``SkillEnv``:
``skills(start, stop)`` returns the skills of rounds ``[start, stop)`` of every run, shape
``(stop - start, R, N, K)``.

* ``StochasticEnv``: ``V[n, i] ~ Beta(kappa m, kappa (1 - m))`` independently each round,
  with ``m = V_base[n, i]`` (the paper's stochastic environment, ``kappa = 20``).
* ``RegimeSwitchingEnv``: the horizon is cut into ``n_blocks`` blocks; in every block (the
  first included) a fresh uniformly random ``fraction`` of the experts has its mean multiplied
  by ``shrink`` on all dimensions, with Beta noise around the block's means (the paper's
  regime-switching environment: 10 blocks, 10% of the experts, factor 0.2).
* ``SequenceEnv``: a given ``(T, N, K)`` or ``(T, R, N, K)`` sequence (adversarial or
  recorded skills).

In both Beta environments the mean is clipped to ``[1e-3, 1 - 1e-3]`` (after the regime factor)
so that both Beta parameters stay positive; ``mean_skills`` returns those clipped means,
the exact expectation of ``skills``.

Reproducible streams
--------------------
An environment is a fixed stream: the same seed gives the same skills, so every policy of a
seed faces the same skills (common random numbers) and metrics can replay any range.
The rounds are cut into chunks of ``chunk_size`` (1,000) rounds; chunk ``c`` of run ``r`` is
drawn in one compiled call from its own generator, seeded from the child seed keyed by the
run's seed and ``c``, and the most recently used chunks are cached. Hence

* ``skills(start, stop)`` gives the same values whatever the call pattern (one call for the
  whole horizon, one call per round, out of order);
* run ``r`` depends only on its own seed ``s_r``: the same as a single-run environment built
  with ``seed=s_r``, whichever runs it is batched with (serial, parallel and resumed sweeps
  agree). ``seed`` may be a sequence with one seed per run; a single seed ``s`` with
  ``n_runs == 1`` is the run's seed itself, and with ``n_runs = R > 1`` stands for the R
  children ``s.spawn(R)`` would give (``s`` itself is not modified).

The stream of a run depends on its seed and ``chunk_size`` only, not on ``kappa`` or the means:
a ``RegimeSwitchingEnv`` with ``shrink=1`` draws exactly the skills of the
``StochasticEnv`` with the same seed.

The generator is xoshiro256++ with Marsaglia and Tsang's Gamma variates, ``X / (X + Y)`` for each
Beta (``msroute._skill_draws``), round after round, entry after
entry: a compiled loop rather than numpy's ``Generator.beta``, because the skills are most of a
sweep's random draws and the loop costs less per entry.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from msroute._memory import empty_kept
from msroute._seeding import (
    SeedArg,
    _is_seed_sequence_arg,
    child_seed,
    run_seed_sequences,
)
from msroute._validation import FloatArray, IntArray, as_float_array, as_real, check_positive_int
from msroute.errors import InvalidValueError

__all__ = [
    "MEAN_CLIP",
    "ChunkCache",
    "RegimeSwitchingEnv",
    "SeedArg",
    "SequenceEnv",
    "SkillEnv",
    "StochasticEnv",
    "run_seed_sequences",
]

#: The Beta mean is clipped to ``[MEAN_CLIP, 1 - MEAN_CLIP]`` (docs/architecture.md).
MEAN_CLIP = 1e-3

#: Spawn-key domains that keep the environment's streams apart from anything else derived from
#: the same run seed (arbitrary constants: "msck" for skill chunks, "msrg" for regime draws).
_CHUNK_DOMAIN = 0x6D73636B
_REGIME_DOMAIN = 0x6D737267


@runtime_checkable
class SkillEnv(Protocol):
    """What the simulator and the metrics need of a skill environment.

    Attributes
    ----------
    n_runs : int
        R, the number of independent runs served at once.
    n_dims : int
        N, the number of skill dimensions.
    n_experts : int
        K, the number of experts.
    horizon : int or None
        Rounds available; None for an unbounded stationary stream.
    """

    n_runs: int
    n_dims: int
    n_experts: int
    horizon: int | None

    def skills(self, start: int, stop: int) -> FloatArray:
        """Skills of rounds ``[start, stop)`` for all runs, shape (stop - start, R, N, K).

        The same rounds give the same values whatever the call pattern.
        """
        ...

    def mean_skills(self, start: int, stop: int) -> FloatArray:
        """Expected skills of rounds ``[start, stop)``, shape (stop - start, R, N, K)."""
        ...


def _resolve_runs(*candidates: tuple[str, int | None]) -> int:
    """The number of runs implied by the arguments that fix it; they must agree."""
    given = [(name, value) for name, value in candidates if value is not None]
    if not given:
        return 1
    first_name, first = given[0]
    for name, value in given[1:]:
        if value != first:
            raise InvalidValueError(f"{first_name} gives {first} runs but {name} gives {value}")
    return first


def check_range(start: int, stop: int, horizon: int | None) -> tuple[int, int]:
    a = check_positive_int(start, "start", minimum=0)
    b = check_positive_int(stop, "stop", minimum=0)
    if b < a:
        raise InvalidValueError(f"stop == {b} is before start == {a}")
    if horizon is not None and b > horizon:
        raise InvalidValueError(f"stop == {b} is past the horizon ({horizon} rounds)")
    return a, b


def _check_fraction(value: float, name: str, *, low_open: bool) -> float:
    v = as_real(value, name)
    ok = (0.0 < v <= 1.0) if low_open else (0.0 <= v <= 1.0)
    if not ok:
        span = "(0, 1]" if low_open else "[0, 1]"
        raise InvalidValueError(f"{name} == {value}, must be in {span}")
    return v


# ---------------------------------------------------------------------------- Beta envs
class ChunkCache(OrderedDict[int, FloatArray]):
    """The most recently used chunks of skills (index -> rounds, read-only), at most ``size``:
    the least recently used one goes first. Shared by the Beta environments and a batch that
    stacks them (``msroute.env_layouts.StackedEnv``)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def use(self, c: int) -> FloatArray | None:
        """Chunk ``c`` if it is kept (it becomes the most recently used), else None."""
        hit = self.get(c)
        if hit is not None:
            self.move_to_end(c)
        return hit

    def store(self, c: int, chunk: FloatArray) -> FloatArray:
        """Keep ``chunk`` as chunk ``c``, read-only, and return it."""
        chunk.setflags(write=False)
        self[c] = chunk
        while len(self) > self.size:
            self.popitem(last=False)
        return chunk


class _BetaEnv:
    """Chunked, cached Beta noise around per-round means; subclasses define the means."""

    def __init__(
        self,
        skills_base: ArrayLike,
        kappa: float,
        *,
        seed: SeedArg,
        n_runs: int | None,
        chunk_size: int,
        cache_chunks: int,
        n_threads: int,
        horizon: int | None,
    ) -> None:
        base = as_float_array(skills_base, "skills_base", ndim_min=2, ndim_max=3)
        if min(base.shape) < 1:
            raise InvalidValueError(f"skills_base must have non-empty axes, got shape {base.shape}")
        outside = np.argwhere((base < 0) | (base > 1))
        if outside.size:
            idx = tuple(int(i) for i in outside[0])
            raise InvalidValueError(
                f"skills_base[{', '.join(map(str, idx))}] == {base[idx]}, must be in [0, 1] "
                "(a Beta mean)"
            )
        kappa_f = as_real(kappa, "kappa")
        if not np.isfinite(kappa_f) or kappa_f <= 0:
            raise InvalidValueError(f"kappa == {kappa}, must be a finite number > 0")
        r = _resolve_runs(
            ("skills_base", base.shape[0] if base.ndim == 3 else None),
            ("seed", len(seed) if _is_seed_sequence_arg(seed) else None),
            ("n_runs", None if n_runs is None else check_positive_int(n_runs, "n_runs")),
        )
        self.n_runs: int = r
        self.n_dims: int = int(base.shape[-2])
        self.n_experts: int = int(base.shape[-1])
        self.horizon: int | None = horizon
        self.kappa: float = kappa_f
        self.chunk_size: int = check_positive_int(chunk_size, "chunk_size")
        self.cache_chunks: int = check_positive_int(cache_chunks, "cache_chunks")
        self.n_threads: int = check_positive_int(n_threads, "n_threads")
        self.run_seeds: tuple[np.random.SeedSequence, ...] = run_seed_sequences(seed, r)
        full = np.broadcast_to(base, (r, self.n_dims, self.n_experts)).copy()
        full.setflags(write=False)
        self.skills_base: FloatArray = full
        self._cache = ChunkCache(self.cache_chunks)

    # -- the means ---------------------------------------------------------------------
    def _means(self, start: int, stop: int) -> FloatArray:
        """Clipped means of rounds [start, stop), shape (stop - start, R, N, K); no checks."""
        raise NotImplementedError

    def _segments(self, start: int, stop: int) -> list[tuple[int, int, FloatArray]]:
        """Rounds [start, stop) cut into runs of constant means: (lo, hi, means (R, N, K))."""
        raise NotImplementedError

    def mean_skills(self, start: int, stop: int) -> FloatArray:
        """Expected skills (the clipped Beta means) of rounds ``[start, stop)``.

        Returns
        -------
        ndarray, shape (stop - start, R, N, K)
        """
        a, b = check_range(start, stop, self.horizon)
        return np.array(self._means(a, b), dtype=np.float64)

    # -- the draws ---------------------------------------------------------------------
    def skills(self, start: int, stop: int, *, out: FloatArray | None = None) -> FloatArray:
        """Skills of rounds ``[start, stop)`` for all runs (Section 6.1's ``V^(t)``).

        Parameters
        ----------
        start, stop : int
            ``0 <= start <= stop`` (``<= horizon`` when there is one).
        out : ndarray, shape (stop - start, R, N, K), optional
            Where to write them (e.g. a slice of a larger batch's array), instead of a new
            array.

        Returns
        -------
        ndarray, shape (stop - start, R, N, K)
            A fresh array (or ``out``); the same rounds always give the same values.
        """
        a, b = check_range(start, stop, self.horizon)
        size = self.chunk_size
        shape = (b - a, self.n_runs, self.n_dims, self.n_experts)
        if out is None:
            out = np.empty(shape)
        elif out.shape != shape:
            raise InvalidValueError(f"out has shape {out.shape}, expected {shape}")
        for c in range(a // size, -(-b // size)):
            lo, hi = max(a, c * size), min(b, (c + 1) * size)
            out[lo - a : hi - a] = self._chunk(c)[lo - c * size : hi - c * size]
        return out

    def _chunk(self, c: int) -> FloatArray:
        """Rounds ``[c * chunk_size, (c + 1) * chunk_size)`` (cut at the horizon), cached."""
        hit = self._cache.use(c)
        if hit is not None:
            return hit
        out = empty_kept((self.chunk_length(c), self.n_runs, self.n_dims, self.n_experts))
        self.fill_chunk(c, out)
        return self._cache.store(c, out)

    def chunk_length(self, c: int) -> int:
        """Rounds in chunk ``c``: ``chunk_size``, or fewer for the last chunk of a horizon."""
        start = c * self.chunk_size
        stop = start + self.chunk_size
        return stop - start if self.horizon is None else max(0, min(stop, self.horizon) - start)

    def fill_chunk(self, c: int, out: FloatArray) -> None:
        """Write the first ``len(out)`` rounds of chunk ``c`` into ``out`` (rounds, R, N, K),
        without caching them: for a batch that keeps its runs' chunks side by side in one
        array (``msroute.env_layouts.StackedEnv``). A cached chunk is copied."""
        n, k = self.n_dims, self.n_experts
        length = out.shape[0]
        if out.shape[1:] != (self.n_runs, n, k) or not 0 < length <= self.chunk_length(c):
            raise InvalidValueError(
                f"out has shape {out.shape}; chunk {c} holds {self.chunk_length(c)} rounds of "
                f"(R, N, K) = {(self.n_runs, n, k)}"
            )
        hit = self._cache.get(c)
        if hit is not None:
            out[...] = hit[:length]
            return
        start = c * self.chunk_size
        segments = [
            (lo - start, hi - start, self.kappa * m, self.kappa * (1.0 - m))
            for lo, hi, m in self._segments(start, start + length)
        ]

        from msroute._skill_draws import beta_rounds  # numba, on first use

        def draw(r: int) -> None:
            # One generator per (run, chunk): run r never depends on the other runs. The rounds
            # are drawn one after another, so consecutive calls over the segments give the same
            # values as one call with per-round parameters, and a shorter (last) chunk is a
            # prefix of the full one.
            seed = child_seed(self.run_seeds[r], _CHUNK_DOMAIN, c)
            state = np.asarray(seed.generate_state(4, np.uint64), dtype=np.uint64)
            for lo, hi, a, b in segments:
                beta_rounds(a[r], b[r], state, out[lo:hi, r])

        threads = min(self.n_threads, self.n_runs)
        if threads > 1:  # the compiled loop releases the GIL; runs write disjoint slices
            with ThreadPoolExecutor(max_workers=threads) as pool:
                list(pool.map(draw, range(self.n_runs)))
        else:
            for r in range(self.n_runs):
                draw(r)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_runs={self.n_runs}, n_dims={self.n_dims}, "
            f"n_experts={self.n_experts}, kappa={self.kappa}, horizon={self.horizon})"
        )


class StochasticEnv(_BetaEnv):
    """Stationary Beta noise around the base skills (Section 6.1's stochastic environment).

    Each round, independently, ``V[n, i] ~ Beta(kappa m, kappa (1 - m))`` with
    ``m = clip(V_base[n, i], 1e-3, 1 - 1e-3)``: mean ``m`` and variance
    ``m (1 - m) / (kappa + 1)``.

    Parameters
    ----------
    skills_base : array_like, shape (N, K) or (R, N, K)
        ``V_base``, entries in [0, 1]: shared by all runs, or one per run.
    kappa : float, default 20
        Concentration of the Beta noise (the paper's value).
    seed : int, SeedSequence, sequence of those, or None
        See ``run_seed_sequences``.
    n_runs : int, optional
        R; by default taken from ``skills_base`` or ``seed``, else 1.
    chunk_size : int, default 1000
        Rounds drawn per call, each chunk from its own generator; part of the stream's
        definition (the same seed with another chunk size gives other skills).
    cache_chunks : int, default 2
        How many recently used chunks are kept.
    n_threads : int, default 1
        Threads drawing the runs of a chunk in parallel (the compiled draws release the GIL).
        The values do not depend on it; leave it at 1 inside a process-parallel sweep.

    Attributes
    ----------
    n_runs, n_dims, n_experts : int
    horizon : None
        The stream is unbounded.
    skills_base : ndarray, shape (R, N, K)
    run_seeds : tuple of SeedSequence
        The seed of each run.

    Examples
    --------
    >>> env = StochasticEnv([[0.9, 0.2], [0.5, 0.5]], seed=[3, 4])
    >>> env.skills(0, 10).shape
    (10, 2, 2, 2)
    >>> bool(np.array_equal(env.skills(5, 6), env.skills(0, 10)[5:6]))
    True
    >>> single = StochasticEnv([[0.9, 0.2], [0.5, 0.5]], seed=4)
    >>> bool(np.array_equal(single.skills(0, 10)[:, 0], env.skills(0, 10)[:, 1]))
    True
    """

    def __init__(
        self,
        skills_base: ArrayLike,
        kappa: float = 20.0,
        *,
        seed: SeedArg = None,
        n_runs: int | None = None,
        chunk_size: int = 1000,
        cache_chunks: int = 2,
        n_threads: int = 1,
    ) -> None:
        super().__init__(
            skills_base,
            kappa,
            seed=seed,
            n_runs=n_runs,
            chunk_size=chunk_size,
            cache_chunks=cache_chunks,
            n_threads=n_threads,
            horizon=None,
        )
        clipped = np.clip(self.skills_base, MEAN_CLIP, 1.0 - MEAN_CLIP)
        clipped.setflags(write=False)
        self._mean: FloatArray = clipped

    def _means(self, start: int, stop: int) -> FloatArray:
        return np.broadcast_to(self._mean, (stop - start, *self._mean.shape))

    def _segments(self, start: int, stop: int) -> list[tuple[int, int, FloatArray]]:
        return [(start, stop, self._mean)]


class RegimeSwitchingEnv(_BetaEnv):
    """Beta noise around means that drop for a random set of experts in each block.

    Section 6.1's regime-switching environment. The ``horizon`` T is cut into ``n_blocks``
    blocks of ``T // n_blocks`` rounds, the last block also taking the remainder
    ``T mod n_blocks``. In every block, the first included, a fresh uniformly random set of
    ``max(1, round(fraction * K))`` experts (half rounded up), drawn independently per run and
    per block, has its mean multiplied by ``shrink`` on all dimensions; then
    ``V[n, i] ~ Beta(kappa m, kappa (1 - m))`` with ``m`` the block's mean clipped to
    ``[1e-3, 1 - 1e-3]``.

    Parameters
    ----------
    skills_base : array_like, shape (N, K) or (R, N, K)
        ``V_base``, entries in [0, 1]: shared by all runs, or one per run.
    n_blocks : int, default 10
        Number of blocks, ``1 <= n_blocks <= horizon``.
    fraction : float, default 0.1
        Share of the experts shrunk in each block, in (0, 1].
    shrink : float, default 0.2
        Factor on the shrunk experts' means, in [0, 1].
    kappa : float, default 20
    horizon : int
        T, the number of rounds (keyword, required).
    seed, n_runs, chunk_size, cache_chunks, n_threads
        As in ``StochasticEnv``. The shrunk sets come from their own stream of each
        run's seed, apart from the Beta draws.

    Attributes
    ----------
    block_bounds : ndarray of int, shape (n_blocks + 1,)
        Block b covers rounds ``[block_bounds[b], block_bounds[b + 1])``.
    shrunk : ndarray of bool, shape (R, n_blocks, K)
        ``shrunk[r, b, i]``: expert i is shrunk in block b of run r.
    n_shrunk : int
        Experts shrunk per block.

    Examples
    --------
    >>> env = RegimeSwitchingEnv(np.full((2, 20), 0.5), horizon=25, seed=0)
    >>> env.block_bounds.tolist()
    [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 25]
    >>> env.shrunk.shape, env.n_shrunk, env.shrunk.sum(axis=2).tolist()
    ((1, 10, 20), 2, [[2, 2, 2, 2, 2, 2, 2, 2, 2, 2]])
    >>> means = env.mean_skills(0, 2)[0, 0]
    >>> sorted(set(means.ravel().tolist()))
    [0.1, 0.5]
    """

    def __init__(
        self,
        skills_base: ArrayLike,
        n_blocks: int = 10,
        fraction: float = 0.1,
        shrink: float = 0.2,
        kappa: float = 20.0,
        *,
        horizon: int,
        seed: SeedArg = None,
        n_runs: int | None = None,
        chunk_size: int = 1000,
        cache_chunks: int = 2,
        n_threads: int = 1,
    ) -> None:
        t = check_positive_int(horizon, "horizon")
        blocks = check_positive_int(n_blocks, "n_blocks")
        if blocks > t:
            raise InvalidValueError(f"n_blocks == {blocks}, must be <= horizon == {t}")
        frac = _check_fraction(fraction, "fraction", low_open=True)
        self.shrink: float = _check_fraction(shrink, "shrink", low_open=False)
        super().__init__(
            skills_base,
            kappa,
            seed=seed,
            n_runs=n_runs,
            chunk_size=chunk_size,
            cache_chunks=cache_chunks,
            n_threads=n_threads,
            horizon=t,
        )
        self.n_blocks: int = blocks
        self.fraction: float = frac
        k = self.n_experts
        self.n_shrunk: int = min(k, max(1, int(np.floor(frac * k + 0.5))))
        length = t // blocks
        bounds = np.arange(blocks + 1, dtype=np.int64) * length
        bounds[-1] = t
        bounds.setflags(write=False)
        self.block_bounds: IntArray = bounds
        self._block_length = length
        shrunk = np.zeros((self.n_runs, blocks, k), dtype=bool)
        for r, seed_r in enumerate(self.run_seeds):
            rng = np.random.Generator(np.random.PCG64(child_seed(seed_r, _REGIME_DOMAIN)))
            # A uniformly random n_shrunk-subset per block: the first entries of a random order.
            chosen = np.argsort(rng.random((blocks, k)), axis=1)[:, : self.n_shrunk]
            np.put_along_axis(shrunk[r], chosen, True, axis=1)
        shrunk.setflags(write=False)
        self.shrunk: np.ndarray[tuple[int, int, int], np.dtype[np.bool_]] = shrunk
        factor = np.where(shrunk, self.shrink, 1.0)  # (R, n_blocks, K)
        block_means = np.clip(
            factor[:, :, None, :] * self.skills_base[:, None, :, :], MEAN_CLIP, 1.0 - MEAN_CLIP
        )  # (R, n_blocks, N, K)
        self._block_means: FloatArray = np.ascontiguousarray(block_means.transpose(1, 0, 2, 3))

    def block_of(self, rounds: ArrayLike) -> IntArray:
        """Block index of each round (rounds past the horizon count in the last block)."""
        t = np.asarray(rounds, dtype=np.int64)
        return np.minimum(t // self._block_length, self.n_blocks - 1)

    def shrunk_mask(self, block: int) -> np.ndarray[tuple[int, int], np.dtype[np.bool_]]:
        """Which experts are shrunk in ``block``, shape (R, K)."""
        b = check_positive_int(block, "block", minimum=0)
        if b >= self.n_blocks:
            raise InvalidValueError(f"block == {b}, must be < n_blocks == {self.n_blocks}")
        return self.shrunk[:, b, :]

    def _means(self, start: int, stop: int) -> FloatArray:
        return self._block_means[self.block_of(np.arange(start, stop))]

    def _segments(self, start: int, stop: int) -> list[tuple[int, int, FloatArray]]:
        first, last = (int(b) for b in self.block_of([start, stop - 1]))
        cuts = [start, *(int(x) for x in self.block_bounds[first + 1 : last + 1]), stop]
        return [
            (lo, hi, self._block_means[first + j])
            for j, (lo, hi) in enumerate(itertools.pairwise(cuts))
        ]


# ---------------------------------------------------------------------------- sequences
class SequenceEnv:
    """A given sequence of skill matrices (adversarial, or recorded data).

    Parameters
    ----------
    skills : array_like, shape (T, N, K) or (T, R, N, K)
        The skills of every round: shared by all runs, or one sequence per run. Entries must
        be finite and >= 0 (the sum-max reward assumes it); they may exceed 1.
    n_runs : int, optional
        R; with a (T, N, K) sequence, every run sees it. Defaults to 1, or to the R of a 4-d
        sequence.

    Attributes
    ----------
    n_runs, n_dims, n_experts : int
    horizon : int
        T.

    Examples
    --------
    >>> env = SequenceEnv(np.eye(2)[None].repeat(3, axis=0), n_runs=4)
    >>> env.horizon, env.skills(1, 3).shape
    (3, (2, 4, 2, 2))
    """

    def __init__(self, skills: ArrayLike, *, n_runs: int | None = None) -> None:
        seq = as_float_array(skills, "skills", ndim_min=3, ndim_max=4)
        if min(seq.shape) < 1:
            raise InvalidValueError(f"skills must have non-empty axes, got shape {seq.shape}")
        negative = np.argwhere(seq < 0)
        if negative.size:
            idx = tuple(int(i) for i in negative[0])
            raise InvalidValueError(
                f"skills[{', '.join(map(str, idx))}] == {seq[idx]}, must be >= 0 (the sum-max "
                "reward assumes non-negative skills)"
            )
        r = _resolve_runs(
            ("skills", seq.shape[1] if seq.ndim == 4 else None),
            ("n_runs", None if n_runs is None else check_positive_int(n_runs, "n_runs")),
        )
        if seq.ndim == 3:
            seq = np.broadcast_to(seq[:, None], (seq.shape[0], r, *seq.shape[1:]))
        else:
            seq = seq.copy()
        seq.setflags(write=False)
        self._seq: FloatArray = seq
        self.n_runs: int = r
        self.n_dims: int = int(seq.shape[2])
        self.n_experts: int = int(seq.shape[3])
        self.horizon: int | None = int(seq.shape[0])

    def skills(self, start: int, stop: int) -> FloatArray:
        """Skills of rounds ``[start, stop)``, shape (stop - start, R, N, K) (a fresh array)."""
        a, b = check_range(start, stop, self.horizon)
        return np.array(self._seq[a:b], dtype=np.float64)

    def mean_skills(self, start: int, stop: int) -> FloatArray:
        """The skills themselves: a given sequence is its own expectation."""
        return self.skills(start, stop)

    def __repr__(self) -> str:
        return (
            f"SequenceEnv(n_runs={self.n_runs}, n_dims={self.n_dims}, "
            f"n_experts={self.n_experts}, horizon={self.horizon})"
        )
