"""Shared machinery of the paper's experiments (Section 6): constraint levels, seeds,
instances, environments, and the cached, resumable, optionally parallel cell runner.

Seeds (docs/architecture.md, "One round"): every seed ``s`` of a sweep derives three independent
streams from ``SeedSequence(s)``: the instance stream (which K workers are sampled), the environment
stream (one per environment kind, shared by every level and every policy: common random
numbers), and the policies' streams. A *cell* is one (environment, policy) pair run on every
level and seed at once as one batch of ``levels x seeds`` runs; a cell may also run several
environments side by side (``env="stochastic+regime"``: ``envs x levels x seeds`` runs), which
halves the per-round overhead of each run and changes none of its numbers, since every run
depends only on its own seed, environment and level. A cell's result depends only on its
specification, so serial, parallel and resumed sweeps give identical numbers, bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from msroute import _version
from msroute._atomic import DAMAGED_FILE_ERRORS, atomic_path
from msroute._build import code_digest
from msroute._memory import check_memory
from msroute._validation import FloatArray, IntArray
from msroute.datasets import CrowdData, Instance, load_crowd, sample_instance
from msroute.datasets.crowd import DEFAULT_DATASET
from msroute.envs import ChunkCache, RegimeSwitchingEnv, StochasticEnv, check_range
from msroute.errors import CacheWarning, InvalidValueError
from msroute.experiments.backends import Backend, LocalBackend
from msroute.experiments.output import Progress
from msroute.policies.registry import get_policy_class
from msroute.problem import Constraints, Problem, ProblemBatch
from msroute.scenarios import ScenarioInstance, get_scenario

__all__ = [
    "ENVIRONMENTS",
    "ENV_JOIN",
    "LEVELS",
    "CellSpec",
    "RunMapEnv",
    "StackedEnv",
    "describe_levels",
    "env_kinds",
    "level_constraints",
    "run_cells",
]

#: Table 1 of the paper: (budget margin added to M * mean workload, expert cap); "none" is
#: unconstrained (Section 6.3 only).
LEVELS: dict[str, tuple[float, float] | None] = {
    "tight": (0.0, 2.0),
    "medium": (0.1, 2.5),
    "loose": (0.5, 5.0),
    "none": None,
}


def describe_levels() -> str:
    """The levels in numbers, for ``--help`` and messages (from ``LEVELS``)."""
    parts = []
    for name, spec in LEVELS.items():
        if spec is None:
            parts.append(f"{name}: no bounds")
        else:
            margin, cap = spec
            parts.append(
                f"{name}: workload <= M * mean workload + {margin:g}, flagged experts <= {cap:g}"
            )
    return "; ".join(parts)


#: Environment kinds of Section 6.1.
ENVIRONMENTS: tuple[str, ...] = ("stochastic", "regime")

#: Joins the kinds of a cell that runs several environments side by side (``CellSpec.env``).
ENV_JOIN = "+"

_INSTANCE_STREAM, _ENV_STREAM, _POLICY_STREAM, _CONTEXT_STREAM = 0, 1, 2, 3


def level_constraints(instance: Instance, m_draws: int, level: str) -> Constraints:
    """The constraints of a Table 1 level for one sampled pool.

    Budget: time-averaged workload at most ``M * mean(workload over the pool) + margin``;
    expert cap: time-averaged number of flagged experts routed at most ``alpha``. Both bound
    the realized per-round cost, each distinct routed expert counted once (docs/architecture.md).
    """
    if level not in LEVELS:
        raise InvalidValueError(f"unknown level {level!r}; choose from {', '.join(LEVELS)}")
    spec = LEVELS[level]
    names = tuple(instance.cost_names)
    if spec is None:
        return Constraints(upper=[None] * len(names), names=names)
    margin, cap = spec
    budget = m_draws * float(instance.costs[:, 0].mean()) + margin
    return Constraints(upper=[budget, cap], names=names)


def stream(seed: int, *key: int) -> np.random.SeedSequence:
    """The child stream ``key`` of seed ``seed`` (independent of every other key)."""
    return np.random.SeedSequence(entropy=seed, spawn_key=key)


def name_key(name: str) -> int:
    """A stable integer for a name, to key streams (Python's ``hash`` is salted per process)."""
    return zlib.crc32(name.encode())


@cache
def _packaged_data(dataset: str) -> CrowdData:
    return load_crowd(dataset=dataset)


@lru_cache(maxsize=256)
def paper_instance(
    seed: int,
    n_experts: int,
    n_dims: int,
    split: str = "round-robin",
    dataset: str = DEFAULT_DATASET,
) -> Instance:
    """The worker pool and matrices of one seed (Section 6.1) on a packaged data set (the
    paper's TREC 2010 by default): the same protocol whatever the data."""
    return sample_instance(
        _packaged_data(dataset),
        n_experts=n_experts,
        n_dims=n_dims,
        seed=stream(seed, _INSTANCE_STREAM),
        split=split,
    )


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
        out = np.empty((self._length(c), self.n_runs, self.n_dims, self.n_experts))
        for e, lo in zip(self.envs, self._offsets, strict=False):
            e.fill_chunk(c, out[:, lo : lo + e.n_runs])
        return self._cache.store(c, out)

    def draw_ahead(self, stop: int, threads: int) -> None:
        """Draw every chunk of rounds ``[0, stop)`` into the cache, each environment's runs by
        one of up to ``threads`` threads (numpy releases the GIL while drawing)."""
        todo = [c for c in range(-(-stop // self.chunk_size)) if c not in self._cache]
        chunks = {
            c: np.empty((self._length(c), self.n_runs, self.n_dims, self.n_experts)) for c in todo
        }

        def draw(i: int) -> None:
            env, lo = self.envs[i], self._offsets[i]
            for c, out in chunks.items():
                env.fill_chunk(c, out[:, lo : lo + env.n_runs])

        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(self.envs)))) as pool:
            list(pool.map(draw, range(len(self.envs))))
        for c, out in chunks.items():
            self._cache.store(c, out)


#: The environment of a cell: one kind, or several side by side.
CellEnv = StochasticEnv | RegimeSwitchingEnv | StackedEnv

#: Memory the skills of one environment may keep for the next cells of a process.
ENV_CACHE_BYTES = 320 * 2**20


def _chunks_to_cache(n_runs: int, per_round: int, horizon: int, chunk: int = 1000) -> int:
    """Every chunk of the horizon when they fit in ``ENV_CACHE_BYTES`` (the cells of one
    process then draw the skills once), otherwise the 2 a single pass needs: a long horizon
    then costs memory independent of T, and each cell draws its skills again."""
    chunks = -(-horizon // chunk)
    fits = chunks * chunk * n_runs * per_round * 8 <= ENV_CACHE_BYTES
    return max(2, chunks) if fits else 2


def make_env(
    kind: str,
    bases: FloatArray,
    seeds: Sequence[int],
    horizon: int,
    params: Mapping[str, Any],
) -> StochasticEnv | RegimeSwitchingEnv:
    """The environment of kind ``kind`` for the given seeds (one run each)."""
    ss = [stream(s, _ENV_STREAM, name_key(kind)) for s in seeds]
    kappa = float(params.get("kappa", 20.0))
    cached = _chunks_to_cache(len(seeds), bases.shape[-2] * bases.shape[-1], horizon)
    if kind == "stochastic":
        return StochasticEnv(bases, kappa, seed=ss, cache_chunks=cached)
    if kind == "regime":
        return RegimeSwitchingEnv(
            bases,
            horizon=horizon,
            n_blocks=int(params.get("n_blocks", 10)),
            fraction=float(params.get("fraction", 0.1)),
            shrink=float(params.get("shrink", 0.2)),
            kappa=kappa,
            seed=ss,
            cache_chunks=cached,
        )
    raise InvalidValueError(f"unknown environment {kind!r}; choose from {', '.join(ENVIRONMENTS)}")


@dataclass(frozen=True)
class CellSpec:
    """Everything that determines one cell's numbers (and nothing else).

    Attributes
    ----------
    experiment : str
        The experiment the cell belongs to (part of its cache path).
    env : str
        Environment kind ("stochastic" or "regime"), or several joined by "+" (``ENV_JOIN``)
        to run them side by side in one batch (``env_kinds``).
    policy : str
        Registered policy name.
    levels : tuple of str
        Constraint levels (Table 1) run in the batch.
    seeds : tuple of int
        Seeds run in the batch; run ``(ei * len(levels) + li) * len(seeds) + si`` is
        (environment ei, levels[li], seeds[si]).
    horizon, n_experts, m_draws, n_dims : int
        T, K, M, N.
    env_params : tuple of (str, value)
        kappa, n_blocks, fraction, shrink.
    policy_params : tuple of (str, value)
        Keyword arguments of the policy's constructor (beyond problem, horizon, runs, seed).
    record : tuple of str
        Extra outputs: "rewards" (per-round rewards, float32).
    cost_count : str
        "distinct" (each routed expert once) or "draws" (once per draw); see
        ``msroute.simulate.simulate``.
    split : str
        How tasks are grouped into skill dimensions ("round-robin", the paper's, or
        "contiguous"); see ``msroute.datasets.build_instance``.
    dataset : str
        The packaged crowd data the instances are sampled from ("trec", the paper's, or
        "web"); see ``msroute.datasets.DATASETS``.
    scenario : str
        "" (the paper's instances: ``n_experts``, ``n_dims``, ``split``, ``dataset`` and the
        Table 1 ``levels``) or a scenario name (``msroute.scenarios.get_scenario``): its
        instances, and ``levels`` are budget levels of its budgeted cost.
    scenario_params : tuple of (str, value)
        The scenario's parameters (user files: paths and their SHA-256).
    """

    experiment: str
    env: str
    policy: str
    levels: tuple[str, ...]
    seeds: tuple[int, ...]
    horizon: int
    n_experts: int = 50
    m_draws: int = 5
    n_dims: int = 3
    env_params: tuple[tuple[str, Any], ...] = ()
    policy_params: tuple[tuple[str, Any], ...] = ()
    record: tuple[str, ...] = field(default=())
    cost_count: str = "distinct"
    split: str = "round-robin"
    dataset: str = DEFAULT_DATASET
    scenario: str = ""
    scenario_params: tuple[tuple[str, Any], ...] = ()

    def key(self) -> str:
        """A short content hash of the specification (the cache file name)."""
        text = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def env_kinds(spec: CellSpec) -> tuple[str, ...]:
    """The environment kinds a cell runs side by side (one for most cells)."""
    return tuple(spec.env.split(ENV_JOIN))


@dataclass(frozen=True)
class Cell:
    """What a cell runs on: the pools, the (level, seed) problems and the seeds' skill stream.

    Attributes
    ----------
    instances : list of Instance or ScenarioInstance
        One sampled pool (or scenario instance) per seed.
    batch : ProblemBatch
        One problem per run, run ``(ei * L + li) * S + si`` being (environment ei, level li,
        seed si).
    env : StochasticEnv, RegimeSwitchingEnv or StackedEnv
        One run per seed (and environment: run ``ei * S + si``).
    run_map : ndarray of int, shape (R,)
        The environment run of each batch run.
    """

    instances: list[Instance] | list[ScenarioInstance]
    batch: ProblemBatch
    env: CellEnv
    run_map: IntArray

    def replay(self) -> RunMapEnv:
        """The skills as the batch's runs see them (for metrics that replay the rounds)."""
        return RunMapEnv(self.env, self.run_map)


def cell_bytes(spec: CellSpec) -> float:
    """An upper bound of the memory one cell needs: the chunks of its skill stream that the
    process's environment cache keeps (all of them if they fit in ``ENV_CACHE_BYTES``,
    else two), and the trajectories of its levels x seeds runs (reward and two cost
    coordinates per round, plus the recorded float32 rewards; a sweep cell streams its costs,
    so it needs less), for each environment it runs."""
    n_envs = len(env_kinds(spec))
    runs = n_envs * len(spec.levels) * len(spec.seeds)
    per_round = float(len(spec.seeds)) * spec.n_dims * spec.n_experts * 8.0
    kept = _chunks_to_cache(len(spec.seeds), spec.n_dims * spec.n_experts, spec.horizon)
    env = n_envs * per_round * min(float(spec.horizon), kept * 1000.0)
    traj = float(spec.horizon) * runs * ((1 + 2) * 8.0 + (4.0 if "rewards" in spec.record else 0))
    return env + traj


def check_cell_memory(spec: CellSpec) -> None:
    """Refuse a cell that cannot fit in memory before any of its work (ResourceError)."""
    check_memory(
        cell_bytes(spec),
        f"a cell of T = {spec.horizon} rounds x "
        f"{len(env_kinds(spec)) * len(spec.levels) * len(spec.seeds)} runs "
        f"({spec.env}/{spec.policy})",
        "lower the horizon (--horizon) or the number of seeds (--seeds)",
    )


#: What determines the instance of a seed: (scenario, scenario_params, K, N, split, dataset).
_InstanceKey = tuple[str, tuple[tuple[str, Any], ...], int, int, str, str]


def _instance_key(spec: CellSpec) -> _InstanceKey:
    if spec.scenario:  # the scenario alone determines its instances
        return (spec.scenario, spec.scenario_params, 0, 0, "", "")
    return (
        spec.scenario,
        spec.scenario_params,
        spec.n_experts,
        spec.n_dims,
        spec.split,
        spec.dataset,
    )


@lru_cache(maxsize=256)
def seed_instance(key: _InstanceKey, seed: int) -> Instance | ScenarioInstance:
    """The instance of seed ``seed``: the paper's pool, or the scenario's draw from the same
    instance stream."""
    scenario, params, n_experts, n_dims, split, dataset = key
    if scenario:
        return get_scenario(scenario, params).instance(stream(seed, _INSTANCE_STREAM))
    return paper_instance(seed, n_experts, n_dims, split, dataset)


def scenario_instance(
    scenario: str, params: tuple[tuple[str, Any], ...], seed: int
) -> ScenarioInstance:
    """The instance of seed ``seed`` of a scenario, as its cells see it (cached)."""
    inst = seed_instance((scenario, params, 0, 0, "", ""), seed)
    assert isinstance(inst, ScenarioInstance)
    return inst


def build_batch(spec: CellSpec) -> Cell:
    """Instances per seed, the (environment, level, seed) problem batch and the shared-stream
    environment(s).

    Levels are Table 1's (``level_constraints``) for the paper's instances, budget levels
    (``msroute.scenarios.Scenario.constraints``) for a scenario's. Every environment of a
    cell runs the same problems.
    """
    check_cell_memory(spec)
    key = _instance_key(spec)
    instances: list[Any] = [seed_instance(key, s) for s in spec.seeds]
    if spec.scenario:
        scenario = get_scenario(spec.scenario, spec.scenario_params)
        problems = [
            Problem(inst.costs, spec.m_draws, scenario.constraints(inst, level))
            for level in spec.levels
            for inst in instances
        ]
    else:
        problems = [
            Problem(inst.costs, spec.m_draws, level_constraints(inst, spec.m_draws, level))
            for level in spec.levels
            for inst in instances
        ]
    n_envs, n_seeds = len(env_kinds(spec)), len(spec.seeds)
    env = _cached_env(spec.env, spec.seeds, key, spec.horizon, spec.env_params)
    per_env = np.tile(np.arange(n_seeds), len(spec.levels))
    run_map = np.concatenate([ei * n_seeds + per_env for ei in range(n_envs)])
    return Cell(instances, ProblemBatch(problems * n_envs), env, run_map)


@lru_cache(maxsize=1)
def _cached_env(
    kind: str,
    seeds: tuple[int, ...],
    key: _InstanceKey,
    horizon: int,
    env_params: tuple[tuple[str, Any], ...],
) -> CellEnv:
    """The seeds' environment(s) (``kind`` as ``CellSpec.env``), kept for the next cells of
    this process: the cells of one environment (one per policy) then draw its skills once, not
    once per policy. The stream is a pure function of the arguments, so sharing it changes no
    number."""
    bases = np.stack([seed_instance(key, s).skills_base for s in seeds])
    envs = [make_env(k, bases, seeds, horizon, dict(env_params)) for k in kind.split(ENV_JOIN)]
    return envs[0] if len(envs) == 1 else StackedEnv(envs)


def policy_seeds(spec: CellSpec, policy: str | None = None) -> list[np.random.SeedSequence]:
    """The policy stream of every run of a cell, run ``(ei * L + li) * S + si`` from seed
    ``seeds[si]``.

    A run's stream depends only on its seed and the policy's name: the same whatever level,
    environment or batch it is run in, so ``msroute run --seed s`` replays run ``s`` of a sweep
    and every level of a seed sees the same policy randomness (common random numbers).
    """
    key = name_key(policy or spec.policy)
    per_seed = [stream(s, _POLICY_STREAM, key) for s in spec.seeds]
    return per_seed * (len(env_kinds(spec)) * len(spec.levels))


CellResult = dict[str, np.ndarray]


def _cell_path(out_dir: Path, spec: CellSpec) -> Path:
    return out_dir / "cells" / spec.experiment / f"{spec.env}-{spec.policy}-{spec.key()}.npz"


def _cell_stamp(spec: CellSpec) -> dict[str, Any]:
    """What a cached cell must match to be reused: its specification, and the msroute version
    and code (``msroute._build.code_digest``) that computed it: other code may compute
    other numbers under the same version, so its cells are redone."""
    stamp: dict[str, Any] = json.loads(json.dumps(asdict(spec), default=str))
    return {"msroute": _version.__version__, "code": code_digest(), **stamp}


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _manifest(result: CellResult) -> dict[str, list[Any]]:
    """Name -> [dtype, shape, sha256 of the bytes] of every array of a result."""
    return {
        k: [np.asarray(v).dtype.str, list(np.shape(v)), _digest(np.asarray(v))]
        for k, v in sorted(result.items())
    }


class _DamagedCell(Exception):
    """A cached cell that must be recomputed (the message says why)."""


def _check_cell(header: Any, arrays: CellResult) -> None:
    """Validate a cell's arrays against the manifest stored with them.

    Keys, dtypes, shapes and a SHA-256 of each array's bytes must match what was saved, and no
    float array may hold NaN: a cell that was truncated, bit-flipped, edited or written by a
    faulty run is recomputed instead of copied into the results.
    """
    manifest = header.get("arrays") if isinstance(header, dict) else None
    if not isinstance(manifest, dict):
        raise _DamagedCell("no array manifest")
    missing = sorted(set(manifest) - set(arrays))
    extra = sorted(set(arrays) - set(manifest))
    if missing or extra:
        raise _DamagedCell(f"missing arrays {missing}" if missing else f"extra arrays {extra}")
    for name, arr in arrays.items():
        entry = manifest[name]
        if not (isinstance(entry, list) and len(entry) == 3):
            raise _DamagedCell(f"bad manifest entry for {name!r}")
        dtype, shape, digest = entry
        if arr.dtype.str != dtype or list(arr.shape) != shape:
            raise _DamagedCell(
                f"array {name!r} is {arr.dtype.str} {arr.shape}, expected {dtype} {tuple(shape)}"
            )
        if arr.dtype.kind in "fc" and np.isnan(arr).any():
            raise _DamagedCell(f"array {name!r} contains NaN")
        if _digest(arr) != digest:
            raise _DamagedCell(f"array {name!r} does not match its checksum")


_READ_ERRORS: tuple[type[BaseException], ...] = (*DAMAGED_FILE_ERRORS, _DamagedCell)


def load_cell(out_dir: Path, spec: CellSpec) -> CellResult | None:
    """A finished cell's result from the cache, or None (missing, foreign, stale or damaged).

    A cell of another specification or msroute version is silently recomputed; a damaged one
    (unreadable, arrays missing, misshapen, of the wrong dtype, NaN or not matching their
    checksum) is recomputed with one ``CacheWarning`` naming the file.
    """
    path = _cell_path(out_dir, spec)
    if not path.exists():
        return None
    try:
        # Our own handle: np.load leaves the file open when the archive is damaged.
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            header = json.loads(str(data["__spec__"]))
            if not isinstance(header, dict):
                raise _DamagedCell("its header is not a JSON object")
            if header.get("stamp") != _cell_stamp(spec):
                return None
            result = {k: data[k] for k in data.files if k != "__spec__"}
        _check_cell(header, result)
    except _READ_ERRORS as exc:
        reason = str(exc) or type(exc).__name__
        warnings.warn(
            f"cached cell {path} is damaged ({reason[:120]}); recomputing it",
            CacheWarning,
            stacklevel=2,
        )
        return None
    return result


def save_cell(out_dir: Path, spec: CellSpec, result: CellResult) -> None:
    """Store a finished cell atomically (write to a temporary name, then rename), with the
    manifest ``load_cell`` validates it against."""
    header = {"stamp": _cell_stamp(spec), "arrays": _manifest(result)}
    arrays: dict[str, Any] = {"__spec__": np.array(json.dumps(header, sort_keys=True)), **result}
    with (
        atomic_path(_cell_path(out_dir, spec)) as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive,
    ):
        # numpy.savez_compressed's archive (one .npy per array), deflated at level 1: about a
        # third of its CPU, for files 10-25% larger (the float32 rewards hardly compress).
        for key, value in arrays.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


def run_cells(
    specs: Sequence[CellSpec],
    worker: Callable[[CellSpec], CellResult],
    out_dir: Path,
    *,
    jobs: int = 1,
    backend: Backend | None = None,
    progress: Progress | None = None,
    title: str = "cells",
    drop: tuple[str, ...] = (),
    when_free: Callable[[], None] | None = None,
) -> list[CellResult]:
    """Run (or load from the cache) every cell; results in the order of ``specs``.

    Parameters
    ----------
    specs : sequence of CellSpec
    worker : callable
        A module-level function ``spec -> result`` (picklable, for process parallelism).
    out_dir : Path
        Results directory; finished cells are cached under ``out_dir/cells`` and reused, so
        an interrupted sweep resumes where it stopped.
    jobs : int, default 1
        Worker processes of the default backend; 1 runs serially in this process.
    backend : Backend, optional
        Where the cells run (``msroute.experiments.backends``); default
        ``LocalBackend(jobs)``. Whatever the backend, this process stores each finished cell.
    progress : Progress, optional
        Shows a bar over the cells (none by default).
    title : str
        The bar's label.
    drop : tuple of str, optional
        Outputs to leave out of the returned results (they stay in the cache), so that a
        sweep of many cells holds only what its caller reads.
    when_free : callable, optional
        Called once, in this process, as soon as fewer cells are left running than ``jobs``:
        a core is then free until the last cell ends, and the caller's next step can start
        its fixed costs there (e.g. ``msroute.experiments.output.preload_plotting``)
        instead of after the last cell. Not called when no cell runs in parallel.
    """
    bar = progress or Progress(enabled=False)

    def kept(result: CellResult | None) -> CellResult | None:
        return None if result is None else {k: v for k, v in result.items() if k not in drop}

    results: list[CellResult | None] = [kept(load_cell(out_dir, s)) for s in specs]
    todo = [i for i, r in enumerate(results) if r is None]
    for i in todo:  # before any work
        check_cell_memory(specs[i])
    with bar.track(title, len(specs)):
        for i, r in enumerate(results):
            if r is not None:
                bar.advance(_label(specs[i]) + " (cached)")

        running, freed = len(todo), when_free is None

        def done(i: int, result: CellResult) -> None:
            nonlocal running, freed
            save_cell(out_dir, specs[i], result)
            results[i] = kept(result)
            bar.advance(_label(specs[i]))
            running -= 1
            if not freed and 0 < running < jobs and when_free is not None:
                freed = True  # once: the first time a worker has no cell left to start
                when_free()

        if todo:
            runner = backend or LocalBackend(jobs)
            order = _costliest_first(specs, todo)
            if isinstance(runner, LocalBackend) and runner.forks(len(todo)):
                with ThreadPoolExecutor(max_workers=1) as loader:
                    # Loading the machine code is Python work under the GIL; the draws run
                    # without it: the two overlap instead of following each other.
                    loaded = loader.submit(compile_ahead)
                    draw_ahead(specs[order[0]], runner.jobs)
                    loaded.result()
            try:
                runner.run(worker, [specs[i] for i in order], lambda j, res: done(order[j], res))
            finally:
                _cached_env.cache_clear()  # the workers are done with what was drawn ahead
    return [r for r in results if r is not None]


def draw_ahead(spec: CellSpec, threads: int) -> None:
    """Draw the skills of a cell's environment(s) into this process's cache, one environment
    per thread (up to ``threads``), before worker processes are forked from it: the workers
    then share these pages instead of each drawing every environment again (the same values:
    the stream is a pure function of the cell's specification). Nothing is drawn when the
    environments would not keep every chunk (a long horizon): each cell then draws its own."""
    env = build_batch(spec).env
    if env.cache_chunks * env.chunk_size < spec.horizon:
        return
    if isinstance(env, StackedEnv):
        env.draw_ahead(spec.horizon, threads)
        return
    for start in range(0, spec.horizon, env.chunk_size):
        env.skills(start, min(start + env.chunk_size, spec.horizon))


def compile_ahead() -> None:
    """Load the simulator's compiled round (``msroute._outcome``) in this process before
    worker processes are forked from it: they share it instead of each loading it from numba's
    cache (about 0.4 s of CPU) or compiling it (about 2 s) again."""
    from msroute._outcome import blas_pairs_order

    blas_pairs_order()


def _costliest_first(specs: Sequence[CellSpec], todo: list[int]) -> list[int]:
    """The order in which the cells start: grouped by skill stream (environment and block of
    seeds, in order of appearance: a worker's cached skills then serve its next cells instead
    of being drawn again for each), the costliest policy first within each
    (``msroute.experiments.cell_costs.relative_cost``, per level played), so that no long
    cell starts last while the other workers idle. The results do not depend on it."""

    def stream(spec: CellSpec) -> tuple[object, ...]:
        return (spec.env, spec.seeds, spec.horizon, spec.env_params, _instance_key(spec))

    envs: dict[tuple[object, ...], int] = {}
    for i in todo:
        envs.setdefault(stream(specs[i]), len(envs))

    def cost(spec: CellSpec) -> float:
        try:
            cls = get_policy_class(spec.policy)
        except InvalidValueError:  # a name the registry does not know (e.g. OPT's cells)
            return 1.0
        from msroute.experiments.cell_costs import relative_cost

        # A policy that ignores the constraints plays one level for all (sweep_worker).
        return relative_cost(spec.policy) / (len(spec.levels) if cls.ignores_constraints else 1)

    return sorted(todo, key=lambda i: (envs[stream(specs[i])], -cost(specs[i])))


def _label(spec: CellSpec) -> str:
    seeds = f"seed {spec.seeds[0]}" if len(spec.seeds) == 1 else f"{len(spec.seeds)} seeds"
    return f"{spec.env}/{spec.policy} N={spec.n_dims} {seeds}"


def params_items(params: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A canonical, hashable form of a parameter mapping."""
    return tuple(sorted((params or {}).items()))
