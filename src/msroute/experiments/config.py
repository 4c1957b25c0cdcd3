"""Experiment configurations: frozen dataclasses with the paper's settings as defaults,
overridable from a TOML file (one table per experiment) and from command-line flags."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from msroute._toml import read_toml
from msroute._validation import FLOAT_TINY, quoted
from msroute.datasets.crowd import DEFAULT_DATASET, check_dataset
from msroute.errors import ConfigError, InvalidTypeError, InvalidValueError
from msroute.experiments.protocol import ENVIRONMENTS, LEVELS
from msroute.policies.registry import POLICIES

__all__ = ["RANGES", "ExperimentConfig", "check_schema", "load_toml", "with_overrides"]

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
        check_schema(self)  # every field: type and range
        if self.cost_count not in ("distinct", "draws"):
            raise InvalidValueError(
                f"cost_count == {self.cost_count!r}, must be 'distinct' or 'draws'"
            )
        check_dataset(self.dataset)

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds of the experiment."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))


def check_names(
    values: tuple[str, ...], allowed: Mapping[str, Any] | tuple[str, ...], what: str
) -> None:
    """Every value must be a known name, each once (a repeat would run, and merge, twice)."""
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise InvalidValueError(
            f"unknown {what} {bad or '(none given)'}; choose from {', '.join(allowed)}"
        )
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise InvalidValueError(f"{what} {twice} given more than once; give each once")


def check_levels(levels: tuple[str, ...]) -> None:
    """Levels must come from Table 1."""
    check_names(levels, LEVELS, "level(s)")


def check_envs(envs: tuple[str, ...]) -> None:
    """Environments must be known kinds."""
    check_names(envs, ENVIRONMENTS, "environment(s)")


def check_policies(policies: tuple[str, ...]) -> None:
    """Policies must be registered names."""
    check_names(policies, POLICIES, "policy(ies)")


def load_toml(
    path: str | Path, experiment: str, tables: Sequence[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The settings a TOML file gives ``experiment``, as (source, values) layers in the order
    they apply: the top-level keys (for every experiment), then the ``[experiment]`` table.

    The source names the file and the table, so a later error names file, table and key. A
    file that cannot be read, is not UTF-8 text, is not valid TOML (the message has the line),
    or has a table not in ``tables`` (when given) raises ``ConfigError``.
    """
    data = read_toml(path, ConfigError, "configuration")
    if tables is not None:
        unknown = sorted(k for k, v in data.items() if isinstance(v, dict) and k not in tables)
        if unknown:
            raise ConfigError(
                f"{path}: unknown table(s) {', '.join(f'[{t}]' for t in unknown)}; "
                f"known tables: {', '.join(f'[{t}]' for t in tables)}"
            )
    common = {k: v for k, v in data.items() if not isinstance(v, dict)}
    table = data.get(experiment, {})
    return [(f"{path} (top level)", common), (f"{path} [{experiment}]", table)]


#: Ranges of the numeric settings, by key, for every experiment that has the key: (smallest,
#: largest, whether the smallest is excluded). One schema: types come from the annotations.
RANGES: dict[str, tuple[float, float, bool]] = {
    "seeds": (1, 100_000, False),
    "seeds_per_cell": (1, 100_000, False),
    "first_seed": (0, 2**63 - 1, False),
    "horizon": (1, 10**12, False),
    "n_experts": (1, 10**6, False),
    "m_draws": (1, 10**6, False),
    "kappa": (0.0, 1e12, True),
    "n_dims": (1, 10**6, False),
    "dims": (1, 10**6, False),
    "eta_mult": (0.0, 1e12, True),
    "ctx_eta_mult": (0.0, 1e12, True),
    "batch": (1, 10**12, False),
    "ctx_batch": (1, 10**12, False),
    "mc_samples": (1, 10**9, False),
    "n_blocks": (1, 10**12, False),
    "fraction": (0.0, 1.0, True),
    "shrink": (0.0, 1.0, False),
    "window": (1, 10**12, False),
    "every": (1, 10**12, False),
    "case_types": (0, 10**6, False),
}


def check_schema(config: object) -> None:
    """Check every field of a config dataclass against its annotated type and ``RANGES``.

    Raises ``TypeError`` or ``ValueError`` naming the key, what it must be and what it is. A
    string where an array is expected, a bool where a number is expected and NaN or infinite
    numbers are all refused (TOML can write each of them).
    """
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        _check_type(value, hints[f.name], f.name)
        if f.name in RANGES and value is not None:
            for v in _leaves(value):
                _check_range(v, f.name, *RANGES[f.name])


_NAMES: dict[Any, tuple[str, str]] = {
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
    bool: ("true or false", "booleans"),
}


def _describe(tp: Any) -> str:
    if typing.get_origin(tp) is tuple:
        item = typing.get_args(tp)[0]
        return "an array of " + ("arrays" if typing.get_origin(item) is tuple else _NAMES[item][1])
    return _NAMES[tp][0] if tp in _NAMES else str(tp)


def _check_type(value: Any, tp: Any, key: str) -> None:
    args = typing.get_args(tp)
    if len(args) == 2 and type(None) in args:  # ``X | None``: None keeps a derived default
        if value is None:
            return
        tp = args[0] if args[1] is type(None) else args[1]
    origin = typing.get_origin(tp)
    if origin is tuple:
        if not isinstance(value, tuple | list):
            raise InvalidTypeError(
                f"{key} must be {_describe(tp)}, got {quoted(value)} ({type(value).__name__})"
            )
        for item in value:
            _check_type(item, typing.get_args(tp)[0], f"{key} entry")
        return
    ok = {
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
        bool: lambda v: isinstance(v, bool),
    }.get(tp)
    if ok is None:  # pragma: no cover - a new field type must be added above
        raise InvalidTypeError(f"{key}: no schema for type {tp}")
    if not ok(value):
        raise InvalidTypeError(
            f"{key} must be {_describe(tp)}, got {quoted(value)} ({type(value).__name__})"
        )
    if tp is float and not math.isfinite(value):
        raise InvalidValueError(f"{key} == {value}, must be a finite number")


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, tuple | list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _check_range(value: float, key: str, low: float, high: float, open_low: bool) -> None:
    if (value <= low if open_low else value < low) or value > high:
        span = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise InvalidValueError(f"{key} == {quoted(value)}, must be in {span}")
    if 0.0 < abs(value) < FLOAT_TINY:
        raise InvalidValueError(
            f"{key} == {quoted(value)} is subnormal "
            f"(nonzero and below {FLOAT_TINY:.3g}: it has lost digits)"
        )


def with_overrides(config: C, values: Mapping[str, Any], source: str) -> C:
    """A copy of ``config`` with ``values`` applied, validated against the schema up front.

    Unknown keys, wrong types and out-of-range values raise ``ConfigError`` naming the
    source (file and table, or the flag), the key and the value.
    """
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: unknown setting(s) {unknown} for {type(config).__name__}; "
            f"known: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(type(config))
    clean: dict[str, Any] = {}
    try:
        for key, value in values.items():
            _check_type(value, hints[key], key)  # before any conversion (no list of letters)
            clean[key] = _as_tuples(value)
        return dataclasses.replace(config, **clean)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list | tuple) else value
