"""Shared pieces of the service tests: a small router config, TOML writing, an HTTP client.

Every server is a real ``msroute serve`` child process on 127.0.0.1 (``ServerProcess``), driven
with a real HTTP client (httpx) with a timeout on every request; the ``served`` context manager
kills the child by its pid even when the test fails.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from _server import ServerProcess

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TIMEOUT = httpx.Timeout(20.0)

#: Four priced LLM-like experts, two contexts, a budget that binds (uniform routing costs more).
ROUTER: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "contexts": ["billing", "tech"],
    "seed": 7,
    "feedback_ttl_s": 3600,
    "reward_max": 1.0,
    "experts": {"large": [0.03], "medium": [0.012], "small": [0.002], "tiny": [0.001]},
    "constraints": {"upper": {"usd": 0.02}},
}


def _toml_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def write_config(
    path: Path, routers: Mapping[str, Mapping[str, Any]], service: Mapping[str, Any] | None = None
) -> Path:
    """Write a service config with one ``[routers.NAME]`` table per router."""
    lines: list[str] = []
    if service:
        lines.append("[service]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in service.items()]
    for name, cfg in routers.items():
        lines.append(f"[routers.{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in cfg.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@contextlib.contextmanager
def served(
    tmp: Path,
    routers: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    token: str | None = TOKEN,
    service: Mapping[str, Any] | None = None,
    data_dir: Path | None = None,
) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    """A running server over ``routers`` and an authenticated client; both end on exit."""
    config = write_config(tmp / "service.toml", routers or {"llm": ROUTER}, service)
    data = data_dir or tmp / "data"
    data.mkdir(exist_ok=True)
    with (
        ServerProcess(config, data, token=token, log=tmp / "server.log") as server,
        httpx.Client(base_url=server.url, headers=AUTH, timeout=TIMEOUT) as client,
    ):
        yield server, client
