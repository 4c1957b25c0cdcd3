"""Shared pieces of the service tests: a small router config, TOML writing, an HTTP client.

Every server is a real ``msroute serve`` child process on 127.0.0.1 (``ServerProcess``), driven
with a real HTTP client (httpx) with a timeout on every request; the ``served`` context manager
kills the child by its pid even when the test fails. Every answer the client of ``served`` gets
is checked against the server's own OpenAPI document (``DeclaredStatuses``): a status that the
document does not declare for the operation fails the request.
"""

from __future__ import annotations

import contextlib
import json
import re
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


class DeclaredStatuses:
    """An httpx response hook: fail any answer whose status the OpenAPI document does not
    declare for its operation (requests that match no operation, such as a 404 for an unknown
    path or a 405, are left to the tests that make them)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._operations: list[tuple[re.Pattern[str], str, set[str]]] | None = None

    def operations(self) -> list[tuple[re.Pattern[str], str, set[str]]]:
        if self._operations is None:
            doc = httpx.get(self.base_url + "/openapi.json", headers=AUTH, timeout=TIMEOUT).json()
            self._operations = [
                (
                    re.compile(re.sub(r"\{[^}]+\}", "[^/]+", path)),
                    method.upper(),
                    set(op["responses"]),
                )
                for path, item in doc["paths"].items()
                for method, op in item.items()
            ]
        return self._operations

    def declared(self, method: str, path: str) -> set[str] | None:
        """The statuses declared for ``method path``, or None if no operation matches."""
        for pattern, op_method, statuses in self.operations():
            if op_method == method and pattern.fullmatch(path):
                return statuses
        return None

    def __call__(self, response: httpx.Response) -> None:
        request = response.request
        if request.url.path == "/openapi.json":
            return
        declared = self.declared(request.method, request.url.path)
        if declared is not None and str(response.status_code) not in declared:
            raise AssertionError(
                f"{request.method} {request.url.path} answered {response.status_code}, which "
                f"its OpenAPI operation does not declare (it declares {sorted(declared)})"
            )


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
        httpx.Client(
            base_url=server.url,
            headers=AUTH,
            timeout=TIMEOUT,
            event_hooks={"response": [DeclaredStatuses(server.url)]},
        ) as client,
    ):
        yield server, client
