"""Calls to the upstream OpenAI-compatible endpoints, with httpx, each within its timeout.

An upstream is reached at its configured ``base_url`` only: the client follows no redirect and
ignores the environment's proxy settings, so no request goes to another host. Its key, read
from the environment variable the config names, travels in its ``Authorization`` header and
nowhere else; the gateway's own token is never forwarded, and nothing an upstream answers on
an error (which may quote a key) is echoed to the client or the log but its status.

A failure is an ``UpstreamFailure``: 504 for a timeout, 502 for anything else (a connection
refused, an error status, an answer that is not a chat completion), with what the call is known
to have billed: the usage an error answer reports (else nothing), and for a timeout the
expert's booking (its usage never came, and the upstream may have billed it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import certifi
import httpx

from msroute.gateway.config import Upstream
from msroute.gateway.prices import Usage, usage_of

__all__ = ["Answer", "Stream", "UpstreamFailure", "Upstreams", "upstream_body"]

_log = logging.getLogger("msroute.gateway")

#: The most of an upstream's error answer read (to find its usage).
_ERROR_BYTES = 65536
#: HTTP clients the upstream connections are spread over (``Upstreams``).
POOLS = 16


class UpstreamFailure(Exception):
    """An upstream call that gave no answer: ``status`` 502 or 504, the message to answer
    (naming the expert, never the upstream's own text), and the usage it billed (if known)."""

    def __init__(self, expert: str, status: int, message: str, usage: Usage | None) -> None:
        super().__init__(message)
        self.expert = expert
        self.status = status
        self.message = message
        self.usage = usage
        self.timed_out = status == 504


@dataclass(frozen=True, slots=True)
class Answer:
    """One upstream's chat completion: its JSON body, its usage (None: it reported none) and
    how long it took."""

    expert: str
    body: dict[str, Any]
    usage: Usage | None
    seconds: float


def upstream_body(body: Mapping[str, Any], upstream: Upstream, stream: bool) -> dict[str, Any]:
    """The request an upstream gets: the client's, without the gateway's ``msroute`` options,
    for the upstream's own model; a stream asks for its usage (``stream_options``)."""
    out = {k: v for k, v in body.items() if k != "msroute"}
    out["model"] = upstream.model
    if stream:
        options = out.get("stream_options")
        out["stream_options"] = {
            **(options if isinstance(options, Mapping) else {}),
            "include_usage": True,
        }
    return out


class Stream:
    """An upstream's server-sent events, opened (status 200 read): ``events()`` yields each
    event's JSON (``None`` for the closing ``[DONE]``); ``usage`` is set once the usage chunk
    has passed; ``close()`` ends the call."""

    def __init__(self, expert: str, response: httpx.Response, timeout_s: float) -> None:
        self.expert = expert
        self.usage: Usage | None = None
        self._response = response
        self._timeout_s = timeout_s

    async def events(self) -> AsyncIterator[dict[str, Any] | None]:
        """Each ``data:`` event as JSON, until ``[DONE]`` or the end of the stream.

        Raises
        ------
        UpstreamFailure
            The next event did not come within the timeout, the connection broke, or an event
            was not JSON.
        """
        lines = self._response.aiter_lines()
        while True:
            try:
                async with asyncio.timeout(self._timeout_s):
                    line = await anext(lines, None)
            except TimeoutError:
                raise self._failure(504, f"no event within {self._timeout_s:g}s") from None
            except httpx.HTTPError as exc:
                raise self._failure(502, f"the stream broke ({type(exc).__name__})") from exc
            if line is None:
                return
            if not line.startswith("data:"):
                continue  # comments, event names, the blank lines between events
            data = line[5:].strip()
            if data == "[DONE]":
                yield None
                return
            try:
                event = json.loads(data)
            except ValueError:
                raise self._failure(502, "an event is not JSON") from None
            if not isinstance(event, dict):
                raise self._failure(502, "an event is not a JSON object")
            usage = usage_of(event)
            if usage is not None:
                self.usage = usage
            yield event

    def _failure(self, status: int, why: str) -> UpstreamFailure:
        return UpstreamFailure(self.expert, status, f"upstream {self.expert}: {why}", self.usage)

    async def close(self) -> None:
        """End the call (the upstream stops sending)."""
        await self._response.aclose()


class Upstreams:
    """The gateway's HTTP client and each upstream's key.

    Parameters
    ----------
    keys : mapping of str to str
        An ``api_key_env`` variable's name -> its value (read from the environment at start).
    max_connections : int
        Connections kept open to the upstreams, in all.
    """

    def __init__(self, keys: Mapping[str, str], max_connections: int = 256) -> None:
        self._keys = dict(keys)
        per_pool = max(1, max_connections // POOLS)
        limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
        # No redirect is followed and no proxy or .netrc of the environment is used: requests
        # go to the configured base_url and nowhere else. The connections are spread over
        # POOLS clients taken in turn: an httpx pool does work in the square of its
        # connections on every request (httpcore's keep-alive check), which with 50 calls
        # under way cost more than the rest of the gateway together.
        tls = ssl.create_default_context(cafile=certifi.where())  # httpx's default, loaded once
        self._clients = [
            httpx.AsyncClient(
                limits=limits, follow_redirects=False, trust_env=False, timeout=None, verify=tls
            )
            for _ in range(POOLS)
        ]
        self._turn = itertools.cycle(self._clients)

    @property
    def _client(self) -> httpx.AsyncClient:
        return next(self._turn)

    def _headers(self, upstream: Upstream) -> dict[str, str]:
        key = None if upstream.api_key_env is None else self._keys.get(upstream.api_key_env)
        return {} if key is None else {"authorization": f"Bearer {key}"}

    async def complete(self, upstream: Upstream, body: Mapping[str, Any]) -> Answer:
        """One chat completion, whole, within the upstream's ``timeout_s``."""
        expert = upstream.expert
        started = time.perf_counter()
        try:
            async with asyncio.timeout(upstream.timeout_s):
                response = await self._client.post(
                    upstream.url, json=body, headers=self._headers(upstream)
                )
        except TimeoutError:
            raise UpstreamFailure(
                expert, 504, f"upstream {expert}: no answer within {upstream.timeout_s:g}s", None
            ) from None
        except httpx.HTTPError as exc:
            raise UpstreamFailure(
                expert, 502, f"upstream {expert}: cannot reach it ({type(exc).__name__})", None
            ) from exc
        if response.status_code != 200:
            raise _status_failure(expert, response.status_code, response.content)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise UpstreamFailure(
                expert, 502, f"upstream {expert}: the answer is not a chat completion", None
            )
        return Answer(expert, data, usage_of(data), time.perf_counter() - started)

    async def stream(self, upstream: Upstream, body: Mapping[str, Any]) -> Stream:
        """Open a streamed chat completion: its status within ``timeout_s``; the events then
        come each within ``timeout_s`` of the last."""
        expert = upstream.expert
        client = self._client
        request = client.build_request(
            "POST", upstream.url, json=body, headers=self._headers(upstream)
        )
        try:
            async with asyncio.timeout(upstream.timeout_s):
                response = await client.send(request, stream=True)
        except TimeoutError:
            raise UpstreamFailure(
                expert, 504, f"upstream {expert}: no answer within {upstream.timeout_s:g}s", None
            ) from None
        except httpx.HTTPError as exc:
            raise UpstreamFailure(
                expert, 502, f"upstream {expert}: cannot reach it ({type(exc).__name__})", None
            ) from exc
        if response.status_code != 200:
            try:
                content = await _read_some(response)
            finally:
                await response.aclose()
            raise _status_failure(expert, response.status_code, content)
        return Stream(expert, response, upstream.timeout_s)

    async def close(self) -> None:
        """Close the connections."""
        for client in self._clients:
            await client.aclose()


async def _read_some(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= _ERROR_BYTES:
                break
    except httpx.HTTPError:
        pass
    return b"".join(chunks)


def _status_failure(expert: str, status: int, content: bytes) -> UpstreamFailure:
    """The failure of an upstream that answered ``status``: its usage, if its error answer
    reports one, is what it billed."""
    usage = None
    if len(content) <= _ERROR_BYTES:
        try:
            usage = usage_of(json.loads(content))
        except ValueError:
            usage = None
    _log.warning("upstream %s answered %d", expert, status)
    return UpstreamFailure(expert, 502, f"upstream {expert}: answered {status}", usage)
