"""A sweep's cell: its specification, and what it runs on (instances, problems, skill stream).

A *cell* is one (environment, policy) pair run on every level and seed at once as one batch of
``levels x seeds`` runs; a cell may also run several environments side by side
(``env="stochastic+regime"``: ``envs x levels x seeds`` runs), which halves the per-round
overhead of each run and changes none of its numbers, since every run depends only on its own
seed, environment and level. A cell's result depends only on its specification
(``CellSpec``), so serial, parallel and resumed sweeps give identical numbers, bit for bit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from msroute._memory import check_memory
from msroute._validation import FloatArray, IntArray
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.datasets import Instance
from msroute.datasets.crowd import DEFAULT_DATASET
from msroute.env_layouts import RunMapEnv, StackedEnv
from msroute.envs import RegimeSwitchingEnv, StochasticEnv
from msroute.errors import InvalidValueError
from msroute.experiments.protocol import (
    ENV_JOIN,
    ENV_STREAM,
    ENVIRONMENTS,
    INSTANCE_STREAM,
    POLICY_STREAM,
    level_constraints,
    name_key,
    paper_instance,
    stream,
)
from msroute.scenarios import ScenarioInstance, get_scenario

__all__ = [
    "Cell",
    "CellResult",
    "CellSpec",
    "build_batch",
    "cached_env",
    "cell_bytes",
    "check_cell_memory",
    "env_kinds",
    "instance_key",
    "make_env",
    "params_items",
    "policy_seeds",
    "scenario_instance",
    "seed_instance",
]


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
    ss = [stream(s, ENV_STREAM, name_key(kind)) for s in seeds]
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


def instance_key(spec: CellSpec) -> _InstanceKey:
    """What determines the instances of a cell's seeds (the key of ``seed_instance``)."""
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
        return get_scenario(scenario, params).instance(stream(seed, INSTANCE_STREAM))
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
    key = instance_key(spec)
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
    env = cached_env(spec.env, spec.seeds, key, spec.horizon, spec.env_params)
    per_env = np.tile(np.arange(n_seeds), len(spec.levels))
    run_map = np.concatenate([ei * n_seeds + per_env for ei in range(n_envs)])
    return Cell(instances, ProblemBatch(problems * n_envs), env, run_map)


@lru_cache(maxsize=1)
def cached_env(
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
    per_seed = [stream(s, POLICY_STREAM, key) for s in spec.seeds]
    return per_seed * (len(env_kinds(spec)) * len(spec.levels))


CellResult = dict[str, np.ndarray]


def params_items(params: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A canonical, hashable form of a parameter mapping."""
    return tuple(sorted((params or {}).items()))
