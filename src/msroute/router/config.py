"""The router's configuration: one TOML file or dict, every key validated by name.

Format (the same one ``msroute serve`` reads):

    policy = "omd"                 # any registered policy; [params] for its keyword arguments
    m_draws = 3
    cost_names = ["usd", "gpu"]
    contexts = ["billing", "tech"] # optional (OMD: one routing per context; others: one for all)
    seed = 0
    journal = "router.db"          # optional: without it the router lives in memory only
    journal_sync = "full"          # or "normal" (faster; may lose the last commits on power loss)
    snapshot_every = 4096          # journal events between two policy snapshots
    feedback_ttl_s = 600           # after it a decision expires
    on_missing = "drop"            # or a number: the default reward of an expired decision
    reward_min = 0.0               # feedback rewards outside [reward_min, reward_max] are refused
    reward_max = 3.0               # optional (unset: the policy's most, 1e6); the range must lie
                                   # in the policy's reward_range, [0, 1e6] for the built-in ones
    horizon = 100000               # T for the hyperparameters that need one (baselines' duals)
    pacing = true                  # every bound holds on the realized spend (docs/budgets.md)
    name = "support-queue"         # optional label
    [experts]                      # stable string ids -> cost vector (one value per cost name;
                                   # costs and bounds lie in [0, 1e12] and [-1e12, 1e12])
    big = [0.030, 1.0]
    small = { usd = 0.002, gpu = 0.0 }
    [constraints]
    upper = { usd = 0.02 }         # bounds on the time-averaged realized cost, by cost name
    lower = { gpu = 0.1 }
    [params]
    eta_mult = 0.1
    [warm_start]                   # optional: start from an eval table (msroute.warmstart)
    table = "eval.csv"             # an outcome table whose models are the experts' ids (its
                                   # categories the contexts); relative: to this file's folder
    strength = 100                 # pseudo-counts per context and expert (default 100)
    anchor = true                  # the prior anchors the learner (default; msroute.policies.warm)
    margin = true                  # ... within the live budget margin (default; the same module)
    explored = true                # ... its floor counting the table as explored (default; same)
    [contexts_from]                # optional, instead of contexts: contexts from the prompt's text
    prompts = "eval.csv"           # an outcome table with a prompt column: a context model is
                                   # fitted on its prompts (msroute.prompts) and saved beside
                                   # the journal (JOURNAL.contexts.npz): one context per task
                                   # of its category column, else per cluster
    by = "task"                    # or "scores", "words": clusters (default: "task" when the
                                   # table has two or more categories and k is not given)
    k = 24                         # clusters (default: chosen from the table)
    seed = 0                       # the fit's seed
    # model = "contexts.npz"       # or a model fitted before (msroute.prompts), instead of prompts

Integers (``m_draws``, ``seed``, ``snapshot_every``, ``horizon``, an integer in ``[params]``)
fit in 64 bits, what the journal stores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from msroute._toml import read_toml
from msroute._validation import check_cost_range, quoted, text_name
from msroute.errors import RouterConfigError
from msroute.policies.registry import POLICIES

__all__ = [
    "DEFAULT_WARM_STRENGTH",
    "SNAPSHOT_EVERY",
    "RouterConfig",
    "cost_vector",
    "resolve_paths",
]

#: The warm start's default strength (``msroute.warmstart.DEFAULT_STRENGTH``).
DEFAULT_WARM_STRENGTH = 100.0
#: Journal events between two snapshots by default: four of the tail's folds
#: (``msroute.router.journal.TAIL_FOLD``). A snapshot (the policy's zip, its row and HMAC, and
#: the fold it makes) costs as much as a few hundred events; a reopen replays at most this many
#: events after the last one (about 50 us an event at K = 5).
SNAPSHOT_EVERY = 4096

Sync = Literal["full", "normal"]

_KEYS = {
    "policy",
    "m_draws",
    "cost_names",
    "contexts",
    "seed",
    "journal",
    "journal_sync",
    "snapshot_every",
    "feedback_ttl_s",
    "on_missing",
    "reward_min",
    "reward_max",
    "horizon",
    "pacing",
    "name",
    "experts",
    "constraints",
    "params",
    "warm_start",
    "contexts_from",
}


def _number(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RouterConfigError(f"{key}: must be a number, got {value!r:.80}")
    v = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf
    if not math.isfinite(v):
        raise RouterConfigError(f"{key}: must be finite, got {value!r:.80}")
    return v


#: The largest integer a configuration takes (a 64-bit integer, what the journal stores
#: exactly): a key of thousands of digits could not be journaled (``json`` refuses to write it).
INT_MAX = 2**63 - 1


def _int(value: object, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RouterConfigError(f"{key}: must be an integer, got {quoted(value)}")
    if value < minimum:
        raise RouterConfigError(f"{key}: must be >= {minimum}, got {quoted(value)}")
    if value > INT_MAX:
        raise RouterConfigError(f"{key}: must be <= 2**63 - 1, got {quoted(value)}")
    return value


def _names(value: object, key: str) -> tuple[str, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise RouterConfigError(f"{key}: must be a non-empty list of names, got {value!r}")
    names = tuple(text_name(n, f"{key}[{i}]", RouterConfigError) for i, n in enumerate(value))
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise RouterConfigError(f"{key}: duplicate names {dup}")
    return names


def cost_vector(value: object, cost_names: Sequence[str], key: str) -> tuple[float, ...]:
    """A cost vector given as a list in ``cost_names`` order or a dict by cost name.

    Every entry must be a finite number in ``[0, 1e12]`` (the range of costs and bounds,
    ``msroute._validation.COST_MAX``); a dict must name every cost exactly once. Errors name
    ``key`` (e.g. ``experts.big`` or ``cost``).
    """
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(cost_names))
        if unknown:
            raise RouterConfigError(f"{key}: unknown cost name(s) {unknown}; known: {cost_names}")
        missing = [n for n in cost_names if n not in value]
        if missing:
            raise RouterConfigError(f"{key}: missing cost(s) {missing}")
        items = [(f"{key}.{n}", value[n]) for n in cost_names]
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != len(cost_names):
            raise RouterConfigError(
                f"{key}: needs {len(cost_names)} values (one per cost name {list(cost_names)}), "
                f"got {len(value)}"
            )
        items = [(f"{key}.{n}", v) for n, v in zip(cost_names, value, strict=True)]
    else:
        raise RouterConfigError(
            f"{key}: must be a list in cost_names order or a table by cost name, got {value!r}"
        )
    out = []
    for k, v in items:
        x = _number(v, k)
        if x < 0:
            raise RouterConfigError(f"{k}: costs must be >= 0, got {x}")
        out.append(check_cost_range(x, k, RouterConfigError))
    return tuple(out)


def _bounds(value: object, key: str, cost_names: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise RouterConfigError(f"{key}: must be a table by cost name, got {value!r}")
    out = {}
    for n, v in value.items():
        if n not in cost_names:
            raise RouterConfigError(f"{key}.{n}: unknown cost name; known: {list(cost_names)}")
        out[str(n)] = check_cost_range(_number(v, f"{key}.{n}"), f"{key}.{n}", RouterConfigError)
    return out


#: The warm start's switches (``msroute.warmstart.warm_start``), each true by default; a recorded
#: configuration that names one not was written before it existed (``RouterConfig.recorded``).
_WARM_FLAGS = ("anchor", "margin", "explored")


def _warm_start(value: object) -> dict[str, Any] | None:
    """``warm_start = {table = "eval.csv", strength = N, anchor = true, margin = true, explored =
    true}``, validated (strength >= 0; ``anchor``, ``margin`` and ``explored`` booleans, default
    true: ``msroute.warmstart.warm_start``)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise RouterConfigError(
            "warm_start: must be a table (table, strength, anchor, margin, explored), got "
            f"{value!r:.80}"
        )
    unknown = sorted(set(value) - {"table", "strength", *_WARM_FLAGS})
    if unknown:
        raise RouterConfigError(
            f"warm_start: unknown key(s) {unknown}; known: table, strength, "
            f"{', '.join(_WARM_FLAGS)}"
        )
    table = value.get("table")
    if not isinstance(table, str) or not table:
        raise RouterConfigError(f"warm_start.table: must be a file path, got {table!r:.80}")
    strength = _number(value.get("strength", DEFAULT_WARM_STRENGTH), "warm_start.strength")
    if strength < 0:
        raise RouterConfigError(f"warm_start.strength: must be >= 0, got {strength}")
    flags = {key: value.get(key, True) for key in _WARM_FLAGS}
    for key, flag in flags.items():
        if not isinstance(flag, bool):
            raise RouterConfigError(f"warm_start.{key}: must be true or false, got {flag!r:.80}")
    return {"table": table, "strength": strength, **flags}


def _contexts_from(value: object, contexts: tuple[str, ...] | None) -> dict[str, Any] | None:
    """``contexts_from = {prompts = "eval.csv", by, k, seed}`` or ``{model = "contexts.npz"}``,
    validated; a router that has applied it (``msroute.router.text``) adds its model's path and
    SHA-256 and its contexts (the model's: tasks or clusters)."""
    if value is None:
        return None
    key = "contexts_from"
    if not isinstance(value, Mapping):
        raise RouterConfigError(f"{key}: must be a table (prompts or model), got {value!r:.80}")
    unknown = sorted(set(value) - {"prompts", "model", "k", "by", "seed", "sha256"})
    if unknown:
        raise RouterConfigError(
            f"{key}: unknown key(s) {unknown}; known: prompts, model, k, by, seed"
        )
    out: dict[str, Any] = {"seed": _int(value.get("seed", 0), f"{key}.seed", 0)}
    for name in ("prompts", "model", "sha256"):
        path = value.get(name)
        if path is not None and (not isinstance(path, str) or not path):
            raise RouterConfigError(f"{key}.{name}: must be a string, got {path!r:.80}")
        if path is not None:
            out[name] = path
    if "k" in value:
        out["k"] = _int(value["k"], f"{key}.k", 1)
    if "by" in value:  # its values are msroute.prompts.model's (checked by the fit)
        if not isinstance(value["by"], str) or "prompts" not in value:
            raise RouterConfigError(
                f"{key}.by: a string, with prompts (how the model is fitted on them), got "
                f"{value['by']!r:.80}"
            )
        out["by"] = value["by"]
    applied = "sha256" in out
    if not applied and ("prompts" in out) == ("model" in out):
        raise RouterConfigError(
            f"{key}: give prompts (an eval table to fit the model on) or model (a fitted model)"
        )
    if applied != (contexts is not None):
        raise RouterConfigError(
            "contexts: set by contexts_from (its model's contexts); leave contexts out"
            if contexts is not None
            else f"{key}.sha256: set by the router that applied it"
        )
    return out


def resolve_paths(data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """``data`` with relative file paths (``warm_start.table``, ``contexts_from.prompts`` and
    ``.model``) taken relative to ``base`` (a config file's folder)."""
    out = dict(data)
    for section, keys in (("warm_start", ("table",)), ("contexts_from", ("prompts", "model"))):
        table = data.get(section)
        if not isinstance(table, Mapping):
            continue
        paths = {k: Path(table[k]) for k in keys if isinstance(table.get(k), str)}
        out[section] = {
            **table,
            **{k: str(p if p.is_absolute() else base / p) for k, p in paths.items()},
        }
    return out


@dataclass(frozen=True)
class RouterConfig:
    """A validated router configuration (build it with ``from_dict`` or ``from_toml``).

    See the module docstring for the keys. ``experts`` keeps the table's order; ``upper`` and
    ``lower`` map cost names to bounds on the time-averaged realized cost.
    """

    policy: str
    m_draws: int
    cost_names: tuple[str, ...]
    experts: dict[str, tuple[float, ...]]
    upper: dict[str, float] = field(default_factory=dict)
    lower: dict[str, float] = field(default_factory=dict)
    contexts: tuple[str, ...] | None = None
    seed: int = 0
    journal: str | None = None
    journal_sync: Sync = "full"
    snapshot_every: int = SNAPSHOT_EVERY
    feedback_ttl_s: float = 600.0
    on_missing: Literal["drop"] | float = "drop"
    reward_min: float = 0.0
    reward_max: float | None = None
    horizon: int = 100_000
    pacing: bool = True
    name: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    warm_start: dict[str, Any] | None = None
    contexts_from: dict[str, Any] | None = None

    @classmethod
    def from_toml(cls, path: str | Path) -> RouterConfig:
        """Read and validate a TOML file; errors name the file and the key. A relative
        ``warm_start.table`` (or ``contexts_from`` file) is taken relative to the file's
        folder."""
        p = Path(path)
        data = read_toml(p, RouterConfigError, "router config")
        try:
            return cls.from_dict(resolve_paths(data, p.parent))
        except RouterConfigError as exc:
            raise RouterConfigError(f"{p}: {exc}") from exc

    @classmethod
    def recorded(cls, data: Mapping[str, Any]) -> RouterConfig:
        """A configuration a journal or snapshot recorded, with the meaning it had when it was
        written: a warm start that names no ``anchor`` (or ``margin``, ``explored``) ran without
        one (``from_dict`` otherwise).
        """
        warm = data.get("warm_start") if isinstance(data, Mapping) else None
        if isinstance(warm, Mapping):
            older = {key: False for key in _WARM_FLAGS if key not in warm}
            data = {**data, "warm_start": {**warm, **older}}
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RouterConfig:
        """Validate every key, type and range; an error names the offending key."""
        if not isinstance(data, Mapping):
            raise RouterConfigError(f"the router config must be a table, got {type(data).__name__}")
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise RouterConfigError(f"unknown key(s) {unknown}; known: {sorted(_KEYS)}")
        for key in ("policy", "m_draws", "cost_names", "experts"):
            if key not in data:
                raise RouterConfigError(f"{key}: required")
        policy = data["policy"]
        if not isinstance(policy, str) or policy.lower() not in POLICIES:
            raise RouterConfigError(f"policy: unknown policy {policy!r}; known: {list(POLICIES)}")
        cost_names = _names(data["cost_names"], "cost_names")
        experts_raw = data["experts"]
        if not isinstance(experts_raw, Mapping) or not experts_raw:
            raise RouterConfigError("experts: must be a non-empty table of id -> cost vector")
        experts = {}
        for eid, cost in experts_raw.items():
            text_name(eid, "experts (an id)", RouterConfigError)
            experts[eid] = cost_vector(cost, cost_names, f"experts.{eid}")
        constraints = data.get("constraints", {})
        if not isinstance(constraints, Mapping):
            raise RouterConfigError(f"constraints: must be a table, got {constraints!r}")
        bad = sorted(set(constraints) - {"upper", "lower"})
        if bad:
            raise RouterConfigError(f"constraints: unknown key(s) {bad}; known: upper, lower")
        upper = _bounds(constraints.get("upper", {}), "constraints.upper", cost_names)
        lower = _bounds(constraints.get("lower", {}), "constraints.lower", cost_names)
        for n in set(upper) & set(lower):
            if lower[n] > upper[n]:
                raise RouterConfigError(
                    f"constraints.lower.{n}: {lower[n]} is above constraints.upper.{n} = {upper[n]}"
                )
        contexts = None if data.get("contexts") is None else _names(data["contexts"], "contexts")
        sync = data.get("journal_sync", "full")
        if sync not in ("full", "normal"):
            raise RouterConfigError(f"journal_sync: must be 'full' or 'normal', got {sync!r}")
        journal = data.get("journal")
        if journal is not None and (not isinstance(journal, str) or not journal):
            raise RouterConfigError(f"journal: must be a file path, got {journal!r}")
        ttl = _number(data.get("feedback_ttl_s", 600.0), "feedback_ttl_s")
        if ttl <= 0:
            raise RouterConfigError(f"feedback_ttl_s: must be > 0, got {ttl}")
        reward_min = _number(data.get("reward_min", 0.0), "reward_min")
        reward_max = data.get("reward_max")
        if reward_max is not None:
            reward_max = _number(reward_max, "reward_max")
            if reward_max < reward_min:
                raise RouterConfigError(f"reward_max: {reward_max} is below reward_min")
        on_missing_raw = data.get("on_missing", "drop")
        on_missing: Literal["drop"] | float
        if on_missing_raw == "drop":
            on_missing = "drop"
        else:
            on_missing = _number(on_missing_raw, "on_missing")
            hi = math.inf if reward_max is None else reward_max
            if not reward_min <= on_missing <= hi:
                raise RouterConfigError(
                    f"on_missing: the default reward {on_missing} is outside "
                    f"[reward_min, reward_max] = [{reward_min}, {hi}]"
                )
        name = data.get("name")
        if name is not None and not isinstance(name, str):
            raise RouterConfigError(f"name: must be a string, got {name!r}")
        if name:
            text_name(name, "name", RouterConfigError)
        params = data.get("params", {})
        if not isinstance(params, Mapping):
            raise RouterConfigError(f"params: must be a table, got {params!r}")
        for k, v in params.items():
            if v is not None and not isinstance(v, bool | int | float | str):
                raise RouterConfigError(
                    f"params.{k}: must be a number, string or bool, got {quoted(v)}"
                )
            if isinstance(v, int) and not -INT_MAX <= v <= INT_MAX:
                raise RouterConfigError(f"params.{k}: an integer beyond 64 bits, {quoted(v)}")
        pacing = data.get("pacing", True)
        if not isinstance(pacing, bool):
            raise RouterConfigError(f"pacing: must be true or false, got {pacing!r:.80}")
        reserved = sorted(set(params) & {"horizon", "n_runs", "seed", "n_contexts", "pacing"})
        if reserved:
            raise RouterConfigError(
                f"params.{reserved[0]}: set by the router (use the top-level key where one exists)"
            )
        return cls(
            warm_start=_warm_start(data.get("warm_start")),
            contexts_from=_contexts_from(data.get("contexts_from"), contexts),
            policy=policy.lower(),
            m_draws=_int(data["m_draws"], "m_draws", 1),
            cost_names=cost_names,
            experts=experts,
            upper=upper,
            lower=lower,
            contexts=contexts,
            seed=_int(data.get("seed", 0), "seed", 0),
            journal=journal,
            journal_sync=sync,
            snapshot_every=_int(data.get("snapshot_every", SNAPSHOT_EVERY), "snapshot_every", 1),
            feedback_ttl_s=ttl,
            on_missing=on_missing,
            reward_min=reward_min,
            reward_max=reward_max,
            horizon=_int(data.get("horizon", 100_000), "horizon", 1),
            pacing=pacing,
            name=name,
            params=dict(params),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-ready form; ``RouterConfig.from_dict(cfg.to_dict()) == cfg``."""
        out: dict[str, Any] = {
            "policy": self.policy,
            "m_draws": self.m_draws,
            "cost_names": list(self.cost_names),
            "seed": self.seed,
            "journal_sync": self.journal_sync,
            "snapshot_every": self.snapshot_every,
            "feedback_ttl_s": self.feedback_ttl_s,
            "on_missing": self.on_missing,
            "reward_min": self.reward_min,
            "horizon": self.horizon,
            "pacing": self.pacing,
            "experts": {k: list(v) for k, v in self.experts.items()},
            "constraints": {"upper": dict(self.upper), "lower": dict(self.lower)},
            "params": dict(self.params),
        }
        for key in ("contexts", "journal", "reward_max", "name", "warm_start", "contexts_from"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value) if isinstance(value, tuple) else value
        return out
