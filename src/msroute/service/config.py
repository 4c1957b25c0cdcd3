"""The configuration of ``msroute serve``: which routers one process owns, where their journals are.

The file is TOML with one ``[routers.NAME]`` table per router, each in the Router config format
(``msroute.router.RouterConfig``), and an optional ``[service]`` table for the HTTP layer:

    [service]
    max_body_bytes = 65536        # larger request bodies get 413
    max_rows = 10000              # largest ``limit`` of GET .../decisions
    read_timeout_s = 10           # a client sends a whole request within this (else 408)

    [routers.chat]
    policy = "omd"
    m_draws = 2
    cost_names = ["usd"]
    [routers.chat.experts]
    big = [0.03]
    small = [0.002]
    [routers.chat.constraints]
    upper = { usd = 0.02 }

A router's ``journal`` defaults to ``DATA_DIR/NAME.db``; a relative ``journal`` is taken
relative to ``DATA_DIR``. Each router config is validated when the file is loaded, so a typo
stops ``msroute serve`` before it binds a port.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msroute._toml import read_toml
from msroute.errors import ConfigError, MSRouteError
from msroute.router import RouterConfig
from msroute.router.config import resolve_paths

__all__ = ["ROUTER_NAME", "ServiceConfig", "load_service_config", "router_paths"]

#: Router names appear in URLs: letters, digits, ``_``, ``-`` and ``.``, at most 64 characters.
ROUTER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")

_SERVICE_KEYS = ("max_body_bytes", "max_rows", "read_timeout_s")
_INT_KEYS = ("max_body_bytes", "max_rows")
#: The longest ``read_timeout_s`` accepted, in seconds.
MAX_READ_TIMEOUT_S = 3600.0


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    """What one ``msroute serve`` process owns.

    Parameters
    ----------
    routers : mapping of str to dict
        Router name -> its config dict in the Router config format, with ``journal`` set to
        an absolute path (every served router is durable).
    max_body_bytes : int
        Request bodies longer than this are refused with 413 before they are parsed.
    max_rows : int
        The largest ``limit`` accepted by ``GET /v1/routers/{name}/decisions``.
    read_timeout_s : float
        Seconds a client has to send a whole request from its first byte (and a new
        connection its first request); slower ones get 408 and are disconnected, so that slow
        or idle connections cannot pile up.
    """

    routers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_body_bytes: int = 65536
    max_rows: int = 10000
    read_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        timeout = self.read_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise ConfigError(
                f"service.read_timeout_s must be a number of seconds, got {type(timeout).__name__}"
            )
        if not 0 < timeout <= MAX_READ_TIMEOUT_S:  # NaN fails too
            raise ConfigError(
                f"service.read_timeout_s == {timeout}, must be in (0, {MAX_READ_TIMEOUT_S:g}]"
            )
        object.__setattr__(self, "read_timeout_s", float(timeout))
        for key in _INT_KEYS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"service.{key} must be an integer, got {type(value).__name__}")
            if value < 1:
                raise ConfigError(f"service.{key} == {value}, must be >= 1")
        if not self.routers:
            raise ConfigError("routers: the service config names no router ([routers.NAME])")
        journals: dict[str, str] = {}
        frozen: dict[str, Mapping[str, Any]] = {}
        for name, cfg in self.routers.items():
            if not isinstance(name, str) or not ROUTER_NAME.fullmatch(name):
                raise ConfigError(
                    f"routers.{name}: a router name must match {ROUTER_NAME.pattern} "
                    "(it is part of the URL)"
                )
            if not isinstance(cfg, Mapping):
                raise ConfigError(f"routers.{name} must be a table, got {type(cfg).__name__}")
            journal = cfg.get("journal")
            if not isinstance(journal, str) or not Path(journal).is_absolute():
                raise ConfigError(
                    f"routers.{name}.journal must be an absolute path, got {journal!r}"
                )
            real = os.path.realpath(journal)  # one file, however its paths are spelled
            if real in journals:
                raise ConfigError(
                    f"routers.{name}.journal {journal!r} is also the journal of router "
                    f"{journals[real]!r}; each router needs its own journal"
                )
            journals[real] = name
            try:
                RouterConfig.from_dict(dict(cfg))
            except MSRouteError as exc:
                raise ConfigError(f"routers.{name}: {exc}") from exc
            frozen[name] = MappingProxyType(dict(cfg))
        object.__setattr__(self, "routers", MappingProxyType(frozen))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, data_dir: str | Path = ".") -> ServiceConfig:
        """Build from the parsed TOML document, resolving each router's journal path.

        Parameters
        ----------
        data : mapping
            The document: a ``routers`` table of router tables and an optional ``service`` table.
        data_dir : str or Path
            Where journals without an absolute ``journal`` path live.
        """
        unknown = sorted(set(data) - {"routers", "service"})
        if unknown:
            raise ConfigError(
                f"unknown top-level key(s) {unknown}; a service config has [routers.NAME] "
                "tables and an optional [service] table"
            )
        routers = data.get("routers", {})
        service = data.get("service", {})
        if not isinstance(routers, Mapping):
            raise ConfigError(f"routers must be a table, got {type(routers).__name__}")
        if not isinstance(service, Mapping):
            raise ConfigError(f"service must be a table, got {type(service).__name__}")
        bad = sorted(set(service) - set(_SERVICE_KEYS))
        if bad:
            raise ConfigError(
                f"unknown key(s) {bad} in [service]; known: {', '.join(_SERVICE_KEYS)}"
            )
        base = Path(data_dir).resolve()
        resolved: dict[str, dict[str, Any]] = {}
        for name, cfg in routers.items():
            if not isinstance(cfg, Mapping):
                raise ConfigError(f"routers.{name} must be a table, got {type(cfg).__name__}")
            entry = dict(cfg)
            journal = entry.get("journal", f"{name}.db")
            if not isinstance(journal, str) or not journal:
                raise ConfigError(f"routers.{name}.journal must be a file path, got {journal!r}")
            entry["journal"] = str(base / journal)
            resolved[str(name)] = entry
        return cls(routers=resolved, **dict(service))


def router_paths(data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """A config's data with its routers' relative files (a warm-start table, a context model's
    prompts or model) taken relative to ``base``, the config file's folder."""
    routers = data.get("routers")
    if not isinstance(routers, Mapping):
        return dict(data)
    return {
        **data,
        "routers": {
            name: resolve_paths(cfg, base) if isinstance(cfg, Mapping) else cfg
            for name, cfg in routers.items()
        },
    }


def load_service_config(path: str | Path, *, data_dir: str | Path = ".") -> ServiceConfig:
    """Read and validate a service config file (see the module docstring for the format).

    Errors name the file and the offending key.
    """
    path = Path(path)
    data = read_toml(path, ConfigError, "service config")
    try:
        return ServiceConfig.from_dict(router_paths(data, path.parent), data_dir=data_dir)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
