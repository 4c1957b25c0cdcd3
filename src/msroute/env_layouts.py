"""Environments under another run layout: runs remapped (``RunMapEnv``) or several
environments side by side in one batch (``StackedEnv``).

A sweep's cell runs every (level, seed) pair as one batch: the levels of a seed share its skill
stream (``RunMapEnv`` serves each run its seed's skills), and a cell may run the environments
of several kinds at once (``StackedEnv``), each keeping its own streams, so that a run's skills
are exactly those it has alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from msroute._memory import empty_kept
from msroute._validation import FloatArray, IntArray
from msroute.envs import ChunkCache, RegimeSwitchingEnv, StochasticEnv, check_range
from msroute.errors import InvalidValueError

__all__ = ["RunMapEnv", "StackedEnv"]


class RunMapEnv:
    """Serve runs of an environment under another run layout (``run_map[r]`` = source run).

    Levels of a sweep share their seed's skill stream: the environment is drawn once per seed
    and every (level, seed) run reads its seed's skills. This serves whole replays (the metrics,
    the oracle); the simulation itself remaps round by round (``simulate(..., run_map=)``), so
    that its chunks of skills stay at the environment's size.
    """

    def __init__(self, env: Any, run_map: IntArray) -> None:
        self.env = env
        self.run_map = np.asarray(run_map, dtype=np.int64)
        self.n_runs = int(self.run_map.size)
        self.n_dims = int(env.n_dims)
        self.n_experts = int(env.n_experts)
        self.horizon: int | None = env.horizon

    def skills(self, start: int, stop: int) -> FloatArray:
        """Skills of rounds ``[start, stop)``, shape (stop - start, R, N, K)."""
        return np.asarray(self.env.skills(start, stop)[:, self.run_map], dtype=np.float64)

    def mean_skills(self, start: int, stop: int) -> FloatArray:
        """Expected skills of rounds ``[start, stop)``, shape (stop - start, R, N, K)."""
        return np.asarray(self.env.mean_skills(start, stop)[:, self.run_map], dtype=np.float64)


class StackedEnv:
    """The runs of several environments side by side, in one batch.

    Runs ``[0, R_0)`` are the first environment's, the next ``R_1`` the second's, and so on;
    each environment keeps its own streams, so a run's skills are exactly those it has alone.
    The stacked environment keeps the chunks (``cache_chunks``, the smallest of its
    environments'): each environment draws its runs of a chunk into their slice of one array
    (``msroute.envs.StochasticEnv.fill_chunk``), and rounds within one chunk are served as a
    read-only view of it, with no copy of the batch's skills.
    """

    def __init__(self, envs: Sequence[StochasticEnv | RegimeSwitchingEnv]) -> None:
        if not envs:
            raise InvalidValueError("StackedEnv needs at least one environment")
        shapes = {(e.n_dims, e.n_experts) for e in envs}
        if len(shapes) > 1:
            raise InvalidValueError(f"stacked environments differ in (N, K): {sorted(shapes)}")
        sizes = {e.chunk_size for e in envs}
        if len(sizes) > 1:
            raise InvalidValueError(f"stacked environments differ in chunk_size: {sorted(sizes)}")
        self.envs = tuple(envs)
        self.n_runs = sum(e.n_runs for e in envs)
        self.n_dims, self.n_experts = shapes.pop()
        bounded = [e.horizon for e in envs if e.horizon is not None]
        self.horizon: int | None = min(bounded) if bounded else None
        self.chunk_size: int = sizes.pop()
        self.cache_chunks: int = min(e.cache_chunks for e in envs)
        self._offsets = np.cumsum([0, *(e.n_runs for e in envs)]).tolist()
        self._cache = ChunkCache(self.cache_chunks)

    def skills(self, start: int, stop: int) -> FloatArray:
        """Skills of rounds ``[start, stop)``, shape (stop - start, R, N, K), read-only: a view
        of the cached chunk when the rounds lie in one, else a copy of the chunks' rounds."""
        a, b = check_range(start, stop, self.horizon)
        size = self.chunk_size
        if b > a and a // size == (b - 1) // size:
            c = a // size
            return self._chunk(c)[a - c * size : b - c * size]
        out = np.empty((b - a, self.n_runs, self.n_dims, self.n_experts))
        for c in range(a // size, -(-b // size)):
            lo, hi = max(a, c * size), min(b, (c + 1) * size)
            out[lo - a : hi - a] = self._chunk(c)[lo - c * size : hi - c * size]
        out.setflags(write=False)
        return out

    def mean_skills(self, start: int, stop: int) -> FloatArray:
        """Expected skills of rounds ``[start, stop)``, shape (stop - start, R, N, K)."""
        return np.concatenate([e.mean_skills(start, stop) for e in self.envs], axis=1)

    def _length(self, c: int) -> int:
        return min(e.chunk_length(c) for e in self.envs)  # cut at the shortest horizon

    def _chunk(self, c: int) -> FloatArray:
        hit = self._cache.use(c)
        if hit is not None:
            return hit
        out = empty_kept((self._length(c), self.n_runs, self.n_dims, self.n_experts))
        for e, lo in zip(self.envs, self._offsets, strict=False):
            e.fill_chunk(c, out[:, lo : lo + e.n_runs])
        return self._cache.store(c, out)

    def draw_ahead(self, stop: int, threads: int) -> None:
        """Draw every chunk of rounds ``[0, stop)`` into the cache, each environment's runs by
        one of up to ``threads`` threads (the compiled draws release the GIL)."""
        todo = [c for c in range(-(-stop // self.chunk_size)) if c not in self._cache]
        chunks = {
            c: empty_kept((self._length(c), self.n_runs, self.n_dims, self.n_experts)) for c in todo
        }

        def draw(i: int) -> None:
            env, lo = self.envs[i], self._offsets[i]
            for c, out in chunks.items():
                env.fill_chunk(c, out[:, lo : lo + env.n_runs])

        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(self.envs)))) as pool:
            list(pool.map(draw, range(len(self.envs))))
        for c, out in chunks.items():
            self._cache.store(c, out)
