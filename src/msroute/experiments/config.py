"""Experiment configurations: frozen dataclasses with the paper's settings as defaults,
overridable from a TOML file (one table per experiment) and from command-line flags."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from msroute.datasets.crowd import DEFAULT_DATASET, check_dataset
from msroute.experiments.common import ENVIRONMENTS, LEVELS
from msroute.policies.registry import POLICIES

__all__ = ["ExperimentConfig", "load_toml", "with_overrides"]

C = TypeVar("C", bound="ExperimentConfig")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Settings every experiment has.

    Attributes
    ----------
    seeds : int
        Number of seeds; the seeds are ``first_seed, first_seed + 1, ...``.
    first_seed : int
    horizon : int
        T, rounds per run.
    n_experts, m_draws : int
        K and M (50 and 5 in the paper).
    kappa : float
        Beta concentration of the environments (20).
    cost_count : str
        How a round's realized cost counts the routed experts: "distinct" (each once, the
        paper's ``l_t``; default) or "draws" (once per draw; an alternative reading).
    dataset : str
        The packaged crowd data the instances are sampled from: "trec" (the paper's TREC 2010,
        default) or "web" (five-grade web relevance); the instance protocol is the same.
    """

    seeds: int = 20
    first_seed: int = 0
    horizon: int = 10_000
    n_experts: int = 50
    m_draws: int = 5
    kappa: float = 20.0
    cost_count: str = "distinct"
    dataset: str = DEFAULT_DATASET

    def __post_init__(self) -> None:
        for name in ("seeds", "horizon", "n_experts", "m_draws"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} == {value!r}, must be an integer >= 1")
        if self.kappa <= 0:
            raise ValueError(f"kappa == {self.kappa}, must be > 0")
        if self.cost_count not in ("distinct", "draws"):
            raise ValueError(f"cost_count == {self.cost_count!r}, must be 'distinct' or 'draws'")
        check_dataset(self.dataset)

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds of the experiment."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))


def check_names(
    values: tuple[str, ...], allowed: Mapping[str, Any] | tuple[str, ...], what: str
) -> None:
    """Every value must be a known name."""
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ValueError(
            f"unknown {what} {bad or '(none given)'}; choose from {', '.join(allowed)}"
        )


def check_levels(levels: tuple[str, ...]) -> None:
    """Levels must come from Table 1."""
    check_names(levels, LEVELS, "level(s)")


def check_envs(envs: tuple[str, ...]) -> None:
    """Environments must be known kinds."""
    check_names(envs, ENVIRONMENTS, "environment(s)")


def check_policies(policies: tuple[str, ...]) -> None:
    """Policies must be registered names."""
    check_names(policies, POLICIES, "policy(ies)")


def load_toml(path: str | Path, experiment: str) -> dict[str, Any]:
    """The ``[experiment]`` table of a TOML file (top-level keys apply to every experiment)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from exc
    common = {k: v for k, v in data.items() if not isinstance(v, dict)}
    table = data.get(experiment, {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [{experiment}] must be a table")
    return {**common, **table}


def with_overrides(config: C, values: Mapping[str, Any], source: str) -> C:
    """A copy of ``config`` with ``values`` applied; unknown keys are an error naming them."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(
            f"{source}: unknown setting(s) {unknown} for {type(config).__name__}; "
            f"known: {', '.join(sorted(fields))}"
        )
    clean: dict[str, Any] = {}
    for key, value in values.items():
        current = getattr(config, key)
        clean[key] = tuple(value) if isinstance(current, tuple) else value
    return dataclasses.replace(config, **clean)
