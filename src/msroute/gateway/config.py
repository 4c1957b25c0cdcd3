"""The configuration of ``msroute gateway``: a service config whose experts are LLM endpoints.

The file is a ``msroute serve`` config (``[service]``, one ``[routers.NAME]`` table per router)
in which a router's experts may be tables describing an OpenAI-compatible upstream:

    [routers.chat]
    policy = "omd"
    m_draws = 1
    cost_names = ["usd"]                      # the default; usd is what calls are billed in
    expected_tokens = { input = 800, output = 300 }  # a call's booking before its usage is known
    usd_per_day = 40                          # and/or usd_per_month (docs/gateway.md)
    [routers.chat.constraints]
    upper = { usd = 0.01 }                    # optional: dollars per query
    [routers.chat.experts.big]
    base_url = "https://api.openai.com/v1"
    model = "gpt-4o"
    api_key_env = "OPENAI_API_KEY"            # the variable's name, never the key
    timeout_s = 60
    input_usd_per_mtok = 2.5
    output_usd_per_mtok = 10
    [routers.chat.experts.small]
    base_url = "http://127.0.0.1:8000/v1"
    model = "llama-3.1-8b"
    prices = "litellm"                        # LiteLLM's shipped price map (price_model = ...)

Each expert's cost vector in the router (what a call is booked at when it is routed, until its
usage replaces it) is its ``cost`` table where given, and for ``usd`` otherwise
``expected_tokens`` at its prices. The router keys of the gateway (``expected_tokens``,
``usd_per_day``, ``usd_per_month``, ``budget_update_s``, ``score_name``,
``upstream_error_reward``) are taken out, and the rest is validated as the Router config it is.
A router whose experts are cost vectors is served as ``msroute serve`` serves it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from msroute._toml import read_toml
from msroute.errors import ConfigError
from msroute.gateway.prices import Prices, Usage, litellm_prices, price
from msroute.service.config import ServiceConfig, router_paths

__all__ = [
    "BudgetConfig",
    "GatewayConfig",
    "GatewayRouter",
    "Upstream",
    "gateway_config_from_dict",
    "load_gateway_config",
]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: What a key may hold: it is sent in the ``Authorization`` header as is.
_HEADER_VALUE = re.compile(r"[\x20-\x7e]+")
_UPSTREAM_KEYS = frozenset(
    {
        "base_url",
        "model",
        "api_key_env",
        "timeout_s",
        "input_usd_per_mtok",
        "output_usd_per_mtok",
        "cached_input_usd_per_mtok",
        "prices",
        "price_model",
        "cost",
    }
)
_ROUTER_KEYS = (
    "expected_tokens",
    "usd_per_day",
    "usd_per_month",
    "budget_update_s",
    "score_name",
    "upstream_error_reward",
)
#: The cost name realized dollars are booked under.
USD = "usd"
#: The longest an upstream call may take, in seconds.
MAX_TIMEOUT_S = 3600.0


@dataclass(frozen=True, kw_only=True)
class Upstream:
    """One expert's OpenAI-compatible endpoint and its prices (no key: only its variable)."""

    expert: str
    base_url: str
    model: str
    api_key_env: str | None
    timeout_s: float
    prices: Prices

    @property
    def url(self) -> str:
        """The endpoint of chat completions."""
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """Dollars per day and per month (UTC calendar periods), turned into a per-query bound
    (``msroute.gateway.budget``); ``update_s``: seconds between two changes of that bound."""

    usd_per_day: float | None = None
    usd_per_month: float | None = None
    update_s: float = 900.0


@dataclass(frozen=True, kw_only=True)
class GatewayRouter:
    """What the gateway adds to one served router."""

    name: str
    journal: str
    upstreams: Mapping[str, Upstream] = field(default_factory=dict)
    budget: BudgetConfig | None = None
    #: The configured bound on dollars per query (the budget's per-query bound never exceeds it).
    usd_bound: float | None = None
    #: The Langfuse score name that is the reward (None: any).
    score_name: str | None = None
    #: The reward fed back for a call whose upstream failed (None: it waits for feedback).
    upstream_error_reward: float | None = None


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """A service config and, per router, its upstreams and budget."""

    service: ServiceConfig
    routers: Mapping[str, GatewayRouter]


def _positive(value: object, key: str, maximum: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}: must be a number, got {value!r:.80}")
    v = float(value)
    if not 0.0 < v <= maximum:  # NaN fails too
        raise ConfigError(f"{key}: must be in (0, {maximum:g}], got {value!r:.80}")
    return v


def _text(value: object, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 512:
        raise ConfigError(f"{key}: must be a non-empty string, got {value!r:.80}")
    return value


def _base_url(value: object, key: str) -> str:
    url = _text(value, key)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{key}: must be an http:// or https:// URL with a host, got {url!r}")
    if parts.username or parts.password:
        raise ConfigError(f"{key}: holds credentials; give the key's variable in api_key_env")
    if parts.query or parts.fragment:
        raise ConfigError(f"{key}: must not have a query or a fragment, got {url!r}")
    return url


def _prices(table: Mapping[str, Any], model: str, key: str) -> Prices:
    source = table.get("prices")
    if source is None:
        base = None
    elif source == "litellm":
        base = litellm_prices(_text(table.get("price_model", model), f"{key}.price_model"), key)
    else:
        raise ConfigError(f"{key}.prices: the only price library is 'litellm', got {source!r:.80}")
    if source is None and "price_model" in table:
        raise ConfigError(f"{key}.price_model: needs prices = 'litellm'")
    given = {
        k: price(table[k], f"{key}.{k}")
        for k in ("input_usd_per_mtok", "output_usd_per_mtok", "cached_input_usd_per_mtok")
        if k in table
    }
    if base is None:
        missing = [k for k in ("input_usd_per_mtok", "output_usd_per_mtok") if k not in given]
        if missing:
            raise ConfigError(
                f"{key}: missing {', '.join(missing)} (dollars per million tokens), or set "
                "prices = 'litellm'"
            )
        return Prices(**given)
    return Prices(
        given.get("input_usd_per_mtok", base.input_usd_per_mtok),
        given.get("output_usd_per_mtok", base.output_usd_per_mtok),
        given.get("cached_input_usd_per_mtok", base.cached_input_usd_per_mtok),
    )


def _upstream(
    expert: str, table: Mapping[str, Any], key: str, environ: Mapping[str, str]
) -> Upstream:
    unknown = sorted(set(table) - _UPSTREAM_KEYS)
    if unknown:
        raise ConfigError(
            f"{key}: unknown key(s) {unknown}; an upstream has {sorted(_UPSTREAM_KEYS)}"
        )
    env = table.get("api_key_env")
    if env is not None:
        if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
            raise ConfigError(
                f"{key}.api_key_env: must name an environment variable (the key stays in it), "
                f"got {env!r:.80}"
            )
        secret = environ.get(env)
        if not secret:
            raise ConfigError(f"{key}.api_key_env: the environment variable {env} is not set")
        if not _HEADER_VALUE.fullmatch(secret):
            raise ConfigError(
                f"{key}.api_key_env: the environment variable {env} holds characters a key "
                "cannot have in an HTTP header (only visible ASCII and spaces)"
            )
    model = _text(table.get("model"), f"{key}.model")
    return Upstream(
        expert=expert,
        base_url=_base_url(table.get("base_url"), f"{key}.base_url"),
        model=model,
        api_key_env=env,
        timeout_s=_positive(table.get("timeout_s", 60.0), f"{key}.timeout_s", MAX_TIMEOUT_S),
        prices=_prices(table, model, key),
    )


def _expected(value: object, key: str) -> Usage | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) - {"input", "output"} or not value:
        raise ConfigError(f"{key}: must be a table {{ input = N, output = N }}, got {value!r:.80}")
    counts = []
    for k in ("input", "output"):
        n = value.get(k, 0)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 10**9:
            raise ConfigError(f"{key}.{k}: must be a number of tokens, got {n!r:.80}")
        counts.append(n)
    return Usage(counts[0], counts[1])


def _booking(
    upstream: Upstream, table: Mapping[str, Any], expected: Usage | None, key: str
) -> dict[str, Any]:
    """The expert's cost table in the router: its ``cost``, with ``usd`` from the expected
    tokens at its prices where not given."""
    cost = table.get("cost", {})
    if not isinstance(cost, Mapping):
        raise ConfigError(f"{key}.cost: must be a table by cost name, got {cost!r:.80}")
    out = dict(cost)
    if USD not in out:
        if expected is None:
            raise ConfigError(
                f"{key}: give cost = {{ usd = ... }} (the dollars a call is booked at until its "
                "usage is known), or the router's expected_tokens = { input = N, output = N }"
            )
        out[USD] = upstream.prices.usd(expected)
    return out


def _router(name: str, cfg: object, environ: Mapping[str, str]) -> tuple[object, GatewayRouter]:
    """The router's config for the service, and what the gateway keeps of it."""
    where = f"routers.{name}"
    if not isinstance(cfg, Mapping):
        return cfg, GatewayRouter(name=name, journal="")  # the service config names the error
    entry = {k: v for k, v in cfg.items() if k not in _ROUTER_KEYS}
    experts = cfg.get("experts")
    tables = (
        {e: t for e, t in experts.items() if isinstance(t, Mapping) and "base_url" in t}
        if isinstance(experts, Mapping)
        else {}
    )
    gateway_keys = sorted(set(cfg) & set(_ROUTER_KEYS))
    if not tables:
        if gateway_keys:
            raise ConfigError(f"{where}: {gateway_keys} need experts with a base_url")
        return entry, GatewayRouter(name=name, journal="")
    assert isinstance(experts, Mapping)
    plain = sorted(set(experts) - set(tables))
    if plain:
        raise ConfigError(
            f"{where}.experts: {plain} have no base_url; a gateway router's experts are all "
            "upstreams"
        )
    names = entry.setdefault("cost_names", [USD])
    if not isinstance(names, list) or USD not in names:
        raise ConfigError(f"{where}.cost_names: a gateway router books dollars: add {USD!r}")
    expected = _expected(cfg.get("expected_tokens"), f"{where}.expected_tokens")
    upstreams: dict[str, Upstream] = {}
    costs: dict[str, Any] = {}
    for expert, table in tables.items():
        key = f"{where}.experts.{expert}"
        upstreams[expert] = _upstream(str(expert), table, key, environ)
        costs[expert] = _booking(upstreams[expert], table, expected, key)
    entry["experts"] = costs
    budget = None
    if "usd_per_day" in cfg or "usd_per_month" in cfg:
        budget = BudgetConfig(
            usd_per_day=_optional(cfg.get("usd_per_day"), f"{where}.usd_per_day"),
            usd_per_month=_optional(cfg.get("usd_per_month"), f"{where}.usd_per_month"),
            update_s=_positive(cfg.get("budget_update_s", 900.0), f"{where}.budget_update_s"),
        )
    elif "budget_update_s" in cfg:
        raise ConfigError(f"{where}.budget_update_s: needs usd_per_day or usd_per_month")
    score = cfg.get("score_name")
    error_reward = cfg.get("upstream_error_reward")
    if error_reward is not None and (
        isinstance(error_reward, bool)
        or not isinstance(error_reward, int | float)
        or not math.isfinite(error_reward)
    ):
        raise ConfigError(
            f"{where}.upstream_error_reward: must be a finite number, got {error_reward!r:.80}"
        )
    constraints = cfg.get("constraints")
    upper = constraints.get("upper") if isinstance(constraints, Mapping) else None
    bound = upper.get(USD) if isinstance(upper, Mapping) else None
    return entry, GatewayRouter(
        name=name,
        journal="",
        upstreams=MappingProxyType(upstreams),
        budget=budget,
        usd_bound=None if bound is None else float(bound),
        score_name=None if score is None else _text(score, f"{where}.score_name"),
        upstream_error_reward=None if error_reward is None else float(error_reward),
    )


def _check_error_reward(gw: GatewayRouter, router: Mapping[str, Any]) -> None:
    """Refuse an ``upstream_error_reward`` outside the router's reward range (``router``: its
    validated config), as the router refuses its ``on_missing`` default reward: it is fed back
    at every failed call, which the router would refuse (a 503, the call not booked)."""
    reward = gw.upstream_error_reward
    if reward is None:
        return
    low = float(router.get("reward_min", 0.0))
    high = router.get("reward_max")
    high = math.inf if high is None else float(high)
    if not low <= reward <= high:
        raise ConfigError(
            f"routers.{gw.name}.upstream_error_reward: the reward fed back at a failed call, "
            f"{reward:g}, is outside [reward_min, reward_max] = [{low:g}, {high:g}]"
        )


def _optional(value: object, key: str) -> float | None:
    return None if value is None else _positive(value, key, 1e12)


def gateway_config_from_dict(
    data: Mapping[str, Any],
    *,
    data_dir: str | Path = ".",
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """Build from the parsed TOML document (see the module docstring).

    ``environ`` (default: the process's) must hold every ``api_key_env`` variable.
    """
    env = os.environ if environ is None else environ
    routers = data.get("routers", {})
    if not isinstance(routers, Mapping):
        raise ConfigError(f"routers must be a table, got {type(routers).__name__}")
    entries: dict[str, object] = {}
    extras: dict[str, GatewayRouter] = {}
    for name, cfg in routers.items():
        entries[name], extras[name] = _router(str(name), cfg, env)
    service = ServiceConfig.from_dict({**data, "routers": entries}, data_dir=data_dir)
    for name, extra in extras.items():
        _check_error_reward(extra, service.routers[name])
    return GatewayConfig(
        service=service,
        routers=MappingProxyType(
            {
                name: dataclasses.replace(extra, journal=str(service.routers[name]["journal"]))
                for name, extra in extras.items()
            }
        ),
    )


def load_gateway_config(
    path: str | Path, *, data_dir: str | Path = ".", environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read and validate a gateway config file; errors name the file and the key."""
    path = Path(path)
    data = read_toml(path, ConfigError, "gateway config")
    try:
        return gateway_config_from_dict(
            router_paths(data, path.parent), data_dir=data_dir, environ=environ
        )
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
