"""Calls to the upstream OpenAI-compatible endpoints, each within its timeout.

An upstream is reached at its configured ``base_url`` only, through the gateway's own HTTP/1.1
client (``msroute.gateway.http1``: it follows no redirect and uses no proxy, so no request goes
to another host). Its key, read from the environment variable the config names, travels in its
``Authorization`` header and nowhere else; the gateway's own token is never forwarded, and
nothing an upstream answers on an error (which may quote a key) is echoed to the client or the
log but its status.

A request is encoded once for the whole team (``request_body``) and each member's model put
in front of it; an answer is parsed by pydantic-core, and a whole answer keeps its bytes, so
that a team of one answers with them as they came. An answer that is not UTF-8 JSON (RFC 8259)
is not a chat completion.

A failure is an ``UpstreamFailure``: 504 for a timeout, 502 for anything else (a connection
refused, an error status, an answer that is not a chat completion), with what the call is known
to have billed: the usage an error answer reports (else nothing), and for a timeout the
expert's booking (its usage never came, and the upstream may have billed it).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic_core import from_json

from msroute.gateway.config import Upstream
from msroute.gateway.http1 import HTTPFailure, Pool, Response, Target, target, tls_context
from msroute.gateway.prices import Usage, usage_of
from msroute.service.fastpath import json_bytes

__all__ = ["Answer", "Stream", "UpstreamFailure", "Upstreams", "parse_json", "request_body"]

_log = logging.getLogger("msroute.gateway")
T = TypeVar("T")

#: The most of an upstream's error answer read (to find its usage).
_ERROR_BYTES = 65536


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
    """One upstream's chat completion: its JSON body (parsed, and its bytes as they came), its
    usage (None: it reported none) and how long it took."""

    expert: str
    body: dict[str, Any]
    raw: bytes
    usage: Usage | None
    seconds: float


def parse_json(data: bytes) -> Any:
    """``data`` parsed as JSON (UTF-8, a byte order mark allowed), by pydantic-core.

    Raises
    ------
    ValueError
        Not UTF-8 JSON, or a constant JSON has not (``NaN``, ``Infinity``), or an escaped lone
        surrogate (a string no UTF-8 carries).
    """
    return from_json(data.removeprefix(codecs.BOM_UTF8), allow_inf_nan=False)


def request_body(body: Mapping[str, Any], stream: bool) -> bytes:
    """What every member of a team is sent but its model, encoded once: the client's request
    without ``model`` and the gateway's ``msroute`` options; a stream asks for its usage
    (``stream_options``). ``Upstreams`` puts each member's model in front.

    Raises
    ------
    ValueError
        A number JSON cannot carry (one out of a double's range, read as infinite).
    """
    out = {k: v for k, v in body.items() if k not in ("model", "msroute")}
    if stream:
        options = out.get("stream_options")
        out["stream_options"] = {
            **(options if isinstance(options, Mapping) else {}),
            "include_usage": True,
        }
    return json_bytes(out)


class Stream:
    """An upstream's server-sent events, opened (status 200 read): ``events()`` yields each
    event's JSON (``None`` for the closing ``[DONE]``); ``usage`` is set once the usage chunk
    has passed; ``close()`` ends the call."""

    def __init__(self, expert: str, response: Response, timeout_s: float) -> None:
        self.expert = expert
        self.usage: Usage | None = None
        self._response = response
        self._timeout_s = timeout_s

    async def events(self) -> AsyncIterator[dict[str, Any] | None]:
        """Each ``data:`` event as JSON, until ``[DONE]`` or the end of the stream: a chat
        completion chunk (``_is_chunk``), checked here so that relaying and merging the events
        of a team's streams can trust them.

        Raises
        ------
        UpstreamFailure
            The next event did not come within the timeout, the connection broke, or an event
            was not UTF-8 JSON (RFC 8259: no ``NaN``) or not a chunk.
        """
        lines = _lines(self._response.chunks())
        while True:
            try:
                async with asyncio.timeout(self._timeout_s):
                    line = await anext(lines, None)
            except TimeoutError:
                raise self._failure(504, f"no event within {self._timeout_s:g}s") from None
            except HTTPFailure as exc:
                raise self._failure(502, f"the stream broke: {exc}") from exc
            if line is None:
                return
            if not line.startswith(b"data:"):
                continue  # comments, event names, the blank lines between events
            data = line[5:].strip()
            if data == b"[DONE]":
                yield None
                return
            try:
                event = parse_json(data)
            except ValueError:
                raise self._failure(502, "an event is not JSON") from None
            if not isinstance(event, dict):
                raise self._failure(502, "an event is not a JSON object")
            if not _is_chunk(event):
                raise self._failure(502, "an event is not a chat completion chunk")
            usage = usage_of(event)
            if usage is not None:
                self.usage = usage
            yield event

    def _failure(self, status: int, why: str) -> UpstreamFailure:
        return UpstreamFailure(self.expert, status, f"upstream {self.expert}: {why}", self.usage)

    async def close(self) -> None:
        """End the call (the upstream stops sending)."""
        self._response.release()


def _is_chunk(event: Mapping[str, Any]) -> bool:
    """Whether an event's ``choices`` are a chunk's: absent or null (a usage chunk), or a list
    of objects whose ``index``, where given, is an integer >= 0 (a team's merge moves it to the
    member's place)."""
    choices = event.get("choices")
    if choices is None:
        return True
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        index = choice.get("index", 0)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            return False
    return True


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of a body (ended by LF or CRLF, the terminator removed); the last line
    even without its terminator."""
    rest = b""
    async for chunk in chunks:
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for line in parts:
            yield line[:-1] if line.endswith(b"\r") else line
    if rest:
        yield rest


class Upstreams:
    """The gateway's connections to its upstreams, and each upstream's key.

    Parameters
    ----------
    keys : mapping of str to str
        An ``api_key_env`` variable's name -> its value (read from the environment at start).
    max_connections : int
        Connections kept open to one upstream origin (scheme, host, port) at most.
    """

    def __init__(self, keys: Mapping[str, str], max_connections: int = 256) -> None:
        self._keys = dict(keys)
        self._pool = Pool(tls_context(), max_per_origin=max_connections)
        self._requests: dict[tuple[str, str | None, str], tuple[Target, bytes, bytes]] = {}

    def _request(self, upstream: Upstream) -> tuple[Target, bytes, bytes]:
        """Where the upstream's calls go, their headers (its key, if it has one) and what their
        body begins with (its model)."""
        key = (upstream.url, upstream.api_key_env, upstream.model)
        known = self._requests.get(key)
        if known is None:
            secret = None if upstream.api_key_env is None else self._keys.get(upstream.api_key_env)
            headers = b"content-type: application/json\r\naccept: application/json\r\n"
            if secret is not None:
                headers += b"authorization: Bearer %s\r\n" % secret.encode("ascii")
            model = b'{"model":%s,' % json_bytes(upstream.model)
            known = self._requests[key] = (target(upstream.url), headers, model)
        return known

    async def _send(self, upstream: Upstream, body: bytes) -> Response:
        to, headers, model = self._request(upstream)
        data = model + body[1:] if body != b"{}" else model[:-1] + b"}"
        return await self._pool.post(to, headers, data)

    async def complete(self, upstream: Upstream, body: bytes) -> Answer:
        """One chat completion, whole, within the upstream's ``timeout_s`` (``body``: the
        team's ``request_body``)."""
        expert = upstream.expert
        started = time.perf_counter()
        status, content = await _within(upstream, self._exchange(upstream, body))
        if status != 200:
            raise _status_failure(expert, status, content)
        try:
            data = parse_json(content)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise UpstreamFailure(
                expert, 502, f"upstream {expert}: the answer is not a chat completion", None
            )
        raw = content.removeprefix(codecs.BOM_UTF8)
        return Answer(expert, data, raw, usage_of(data), time.perf_counter() - started)

    async def stream(self, upstream: Upstream, body: bytes) -> Stream:
        """Open a streamed chat completion (``body``: the team's ``request_body``): its status
        within ``timeout_s``; the events then come each within ``timeout_s`` of the last."""
        response = await _within(upstream, self._open(upstream, body))
        return Stream(upstream.expert, response, upstream.timeout_s)

    async def _exchange(self, upstream: Upstream, body: bytes) -> tuple[int, bytes]:
        """A whole call: the answer's status and body."""
        response = await self._send(upstream, body)
        try:
            return response.status, await response.read()
        finally:
            response.release()

    async def _open(self, upstream: Upstream, body: bytes) -> Response:
        """A streamed call, its status 200 read (else an ``UpstreamFailure``)."""
        response = await self._send(upstream, body)
        if response.status != 200:
            try:
                content = await _read_some(response)
            finally:
                response.release()
            raise _status_failure(upstream.expert, response.status, content)
        return response

    async def close(self) -> None:
        """Close the idle connections."""
        self._pool.close()


async def _within(upstream: Upstream, call: Awaitable[T]) -> T:
    """``call`` (what a call or a stream opens with) within the upstream's ``timeout_s``: no
    answer in time is a 504 ``UpstreamFailure``, a failed exchange a 502, both without usage."""
    expert = upstream.expert
    try:
        async with asyncio.timeout(upstream.timeout_s):
            return await call
    except TimeoutError:
        raise UpstreamFailure(
            expert, 504, f"upstream {expert}: no answer within {upstream.timeout_s:g}s", None
        ) from None
    except HTTPFailure as exc:
        raise UpstreamFailure(expert, 502, f"upstream {expert}: {exc}", None) from exc


async def _read_some(response: Response) -> bytes:
    """At most about ``_ERROR_BYTES`` of an answer's body (what came before it broke)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.chunks():
            chunks.append(chunk)
            size += len(chunk)
            if size >= _ERROR_BYTES:
                break
    except HTTPFailure:
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
