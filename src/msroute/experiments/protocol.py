"""The protocol of the paper's experiments (Section 6.1): constraint levels, seeds, instances.

Seeds (docs/architecture.md, "One round"): every seed ``s`` of a sweep derives independent
streams from ``SeedSequence(s)``: the instance stream (which K workers are sampled), the
environment stream (one per environment kind, shared by every level and every policy: common
random numbers), and the policies' streams. ``paper_instance`` is the pool of one seed, cached
per process.
"""

from __future__ import annotations

import zlib
from functools import cache, lru_cache

import numpy as np

from msroute.core.problem import Constraints
from msroute.datasets import CrowdData, Instance, load_crowd, sample_instance
from msroute.datasets.crowd import DEFAULT_DATASET
from msroute.errors import InvalidValueError

__all__ = [
    "CONTEXT_STREAM",
    "ENVIRONMENTS",
    "ENV_JOIN",
    "ENV_STREAM",
    "INSTANCE_STREAM",
    "LEVELS",
    "POLICY_STREAM",
    "describe_levels",
    "level_constraints",
    "name_key",
    "paper_instance",
    "stream",
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

#: The child streams of a seed: the instance (which workers are sampled), the environment,
#: the policies and the contextual experiment's contexts.
INSTANCE_STREAM, ENV_STREAM, POLICY_STREAM, CONTEXT_STREAM = 0, 1, 2, 3


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
        seed=stream(seed, INSTANCE_STREAM),
        split=split,
    )
