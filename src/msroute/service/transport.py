"""The service's connections: one ``send`` per response, and a deadline for reading each request.

``GuardedHttpTools`` wraps uvicorn's httptools protocol (it holds one and forwards the
``asyncio.Protocol`` calls to it; nothing of uvicorn is overridden) and adds two things:

- **One write per response.** uvicorn writes a response's status line and headers as soon as the
  app sends ``http.response.start``, and its body on ``http.response.body``: two ``send`` system
  calls and two TCP segments per response, and on loopback two wake-ups of the client. On the
  service's small JSON answers those system calls cost more CPU than anything else the event
  loop does per request. The protocol writes through ``GatheringTransport``: the bytes
  written during one turn of the event loop leave together, in one ``write`` of the real
  transport, as soon as the response they end is complete (``ReadDeadline`` says when), else
  at the start of the next turn (the pieces of a stream). A complete response is not held
  until the next turn: a turn that began with many events ready (a burst of requests, or of
  upstream answers in the gateway) would hold it back until the handlers of all the others had
  run. Bytes and their order are unchanged; closing a connection first writes what is
  gathered.
- **Slow clients are cut off.** A client must send a whole request (headers and body) within
  ``read_timeout_s`` of its first byte, and a new connection its first request within
  ``read_timeout_s`` of opening; otherwise it gets ``408 Request Timeout`` and the connection is
  closed. uvicorn closes idle keep-alive connections itself, but it has no deadline for a request
  that arrives a byte at a time, so without this a few hundred slow connections would pile up and
  hold the server's file descriptors and memory. Only time spent waiting for the client counts:
  the deadline is lifted once the app has read the body (or answers without reading it), so a
  request that waits for a slow disk is never cut off. A request pipelined behind another
  gets its deadline when the app begins it, if its bytes arrived while the other was served.
- **Every request read in full is answered.** When bytes that are not HTTP follow complete
  requests (pipelined in the same packet, or arriving while one is served), uvicorn answers the
  garbage with ``400`` and closes the connection at once, so the answers of the requests before
  it, whose effects the app may already have committed (a journaled decision), were never sent.
  The guard holds the 400 (a problem document, as every error of the service) and the close
  back until every request read in full before the garbage has been answered, then sends it;
  nothing after the garbage is read. A request that was cut off by the garbage (its body
  incomplete) is not served: it ends when the connection closes, as if its client had gone
  away. So with a client that half-closes its side after sending (the end of its input,
  ``eof_received``): asyncio closed the connection at once, and the answers of the requests
  it had sent were lost; the connection now stays open until they are sent.

The app tells the connection where a request stands through ``ReadDeadline``, an ASGI
middleware: uvicorn starts each request's task inside ``data_received``, so the task inherits a
context variable naming the connection's guard (``asyncio`` tasks copy the context they are
created in).

Relied on of uvicorn (pinned in ``pyproject.toml``, checked by ``tests/test_service_transport.py``):
the import path of ``HttpToolsProtocol`` and that ``uvicorn.Config(http=...)`` accepts a protocol
class, which uvicorn constructs with keyword arguments that are passed through unchanged; that a
parse error makes its ``data_received`` write the 400 and close the transport; and, to know which
requests are still unanswered (``_queued``, ``_cut_off_in_app``), its ``cycle`` and ``pipeline``
attributes and the cycles' ``more_body`` and ``response_complete``.
"""

from __future__ import annotations

import asyncio
import contextvars
from http import HTTPStatus
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["GatheringTransport", "GuardedHttpTools", "ReadDeadline", "guarded_http_tools"]

#: The guard of the connection whose bytes are being parsed (inherited by the request's task).
_GUARD: contextvars.ContextVar[GuardedHttpTools | None] = contextvars.ContextVar(
    "msroute_connection_guard", default=None
)

_CLOSING_RESPONSE = (
    b"HTTP/1.1 %d %s\r\ncontent-type: application/problem+json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_PROBLEM = b'{"type":"about:blank","title":"%s","status":%d,"detail":"%s"}'


def closing_problem(status: int, detail: str) -> bytes:
    """A whole ``application/problem+json`` response that closes the connection (``detail``:
    ASCII without quotes or backslashes)."""
    title = HTTPStatus(status).phrase.encode()
    body = _PROBLEM % (title, status, detail.encode())
    return _CLOSING_RESPONSE % (status, title, len(body), body)


#: What bytes that are not HTTP/1.1 get (instead of uvicorn's text/plain 400).
_REFUSAL = closing_problem(400, "request: not a valid HTTP/1.1 request; the connection is closed")


class GatheringTransport:
    """A transport whose writes of one event-loop turn reach the real transport as one write.

    Everything but ``write``, ``close`` and ``abort`` is the real transport's (flow control,
    ``is_closing``, ``get_extra_info``).
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        #: While not None, writes go here and a close is only recorded (``capture``).
        self._captured: list[bytes] | None = None
        self._close_captured = False

    def capture(self) -> None:
        """From now on, hold what is written and a close back (``release`` returns them)."""
        self._captured = []
        self._close_captured = False

    def release(self) -> tuple[bytes, bool]:
        """Stop capturing; the bytes written since ``capture`` and whether a close was asked."""
        data = b"".join(self._captured or ())
        closed = self._close_captured
        self._captured = None
        self._close_captured = False
        return data, closed

    def write(self, data: bytes) -> None:
        """Queue ``data``; the first write of a turn schedules the flush."""
        if self._captured is not None:
            self._captured.append(data)
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        """Hand what is queued to the real transport (nothing if it is closing: the peer left)."""
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        """Write what is queued, then close (the real transport sends its buffer first)."""
        if self._captured is not None:
            self._close_captured = True
            return
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is queued."""
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpTools(asyncio.Protocol):
    """uvicorn's httptools protocol, writing through a ``GatheringTransport``, with a
    deadline for reading each request.

    Parameters
    ----------
    read_timeout_s : float
        Seconds a client has to send a whole request from its first byte (and a new
        connection to send its first request).
    **uvicorn : Any
        What uvicorn constructs its protocol with, passed through.
    """

    def __init__(self, read_timeout_s: float, **uvicorn: Any) -> None:
        self._inner = HttpToolsProtocol(**uvicorn)
        self._read_timeout_s = read_timeout_s
        self._loop = asyncio.get_running_loop()
        self._transport: GatheringTransport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        #: A request of this connection has been read and is not yet answered in full.
        self._serving = False
        #: Requests of this connection the app has begun and not finished.
        self._in_app = 0
        #: The connection ends once every request read in full is answered, with these bytes
        #: last: the 400 for bytes that are not HTTP, none after the client's end of input
        #: (None: it goes on). ``_ended``: the close is done.
        self._ending: bytes | None = None
        self._ended = False

    # asyncio.Protocol --------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:  # uvloop's are not asyncio.Transport
        self._transport = GatheringTransport(transport, self._loop)
        gathering: Any = self._transport
        self._inner.connection_made(gathering)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._ending is not None:
            return  # after bytes that are not HTTP: nothing more is read
        if self._deadline is None and not self._serving:
            self._arm()  # the first byte of a request
        contextvars.copy_context().run(self._feed, data)

    def _feed(self, data: bytes) -> None:
        _GUARD.set(self)
        transport = self._transport
        assert transport is not None  # data comes after connection_made
        transport.capture()
        try:
            self._inner.data_received(data)
        finally:
            written, closed = transport.release()
        if not closed:
            if written:
                transport.write(written)
            return
        # uvicorn refused the bytes (its 400) and closed: answer the requests before them
        # first.
        self._end(_REFUSAL)

    def _end(self, last: bytes) -> None:
        """End the connection once the requests read in full are answered, with ``last``; the
        check runs at the next turn, once the app has begun the requests just parsed."""
        self._disarm()
        if self._ending is None:
            self._ending = last
        self._loop.call_soon(self._end_when_answered)

    def _end_when_answered(self) -> None:
        """Send the last bytes and close, once no request read in full is unanswered: none is
        in the app (but one whose body was cut off, which waits for it in vain) and none waits
        in uvicorn's pipeline."""
        transport = self._transport
        if self._ending is None or self._ended or transport is None or transport.is_closing():
            return
        if self._in_app > _cut_off_in_app(self._inner) or _queued(self._inner):
            return
        self._ended = True
        if self._ending:
            transport.write(self._ending)
        transport.close()

    def eof_received(self) -> bool:
        """The client will send nothing more (it may still read: a half-close). The transport
        stays open until the requests it sent in full are answered (asyncio would close it at
        once, and their answers, their effects committed, were lost)."""
        self._inner.eof_received()
        self._end(b"")
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # where the request stands (told by ReadDeadline) -------------------------------------------
    def request_begun(self, has_body: bool) -> None:
        """The app has begun a request of this connection. Its body, if it has one, is read
        under the deadline: one that began arriving while an earlier request was served (and
        armed nothing) gets its ``read_timeout_s`` from now."""
        self._in_app += 1
        if not has_body:
            self.request_read()
        elif self._deadline is None:
            self._arm()

    def request_ended(self) -> None:
        """The app has finished a request (answered it, or raised: uvicorn then answers 500
        in the same step); an ending connection ends at the next turn if nothing else waits."""
        self._in_app -= 1
        if self._ending is not None:
            self._loop.call_soon(self._end_when_answered)

    def request_read(self) -> None:
        """The app has the request's body (or answers without it): waiting is the server's."""
        self._serving = True
        self._disarm()

    def response_sent(self) -> None:
        """The response is complete: the next byte starts the next request's deadline."""
        self._serving = False

    def response_written(self) -> None:
        """The server has written the complete response: it leaves now, in one write."""
        if self._transport is not None:
            self._transport.flush()

    # the deadline ------------------------------------------------------------------------------
    def _arm(self) -> None:
        self._disarm()
        self._deadline = self._loop.call_later(self._read_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        detail = f"request: not received in full within {self._read_timeout_s:g}s"
        transport.write(closing_problem(408, detail))
        transport.close()


def _queued(inner: Any) -> bool:
    """Whether uvicorn's protocol holds a pipelined request read in full, not yet begun."""
    return any(not cycle.more_body for cycle, _ in inner.pipeline)


def _cut_off_in_app(inner: Any) -> int:
    """1 if the request whose body the garbage cut off is in the app (it waits for a body that
    never comes, until the connection closes), else 0."""
    cycle = inner.cycle
    if cycle is None or not cycle.more_body or cycle.response_complete:
        return 0
    return 0 if any(c is cycle for c, _ in inner.pipeline) else 1


def guarded_http_tools(read_timeout_s: float) -> type[GuardedHttpTools]:
    """The protocol class to give ``uvicorn.Config(http=...)``, with this read deadline."""

    class Guarded(GuardedHttpTools):
        def __init__(self, **uvicorn: Any) -> None:
            super().__init__(read_timeout_s, **uvicorn)

    return Guarded


class ReadDeadline:
    """ASGI middleware telling the connection's guard when its request has been read and when
    its response is complete, and then written (a no-op for requests that do not come through
    a guard)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guard = _GUARD.get()
        if guard is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        guard.request_begun(_has_body(scope))

        async def receive_body() -> Message:
            message = await receive()
            if not message.get("more_body", False):
                guard.request_read()
            return message

        async def send_response(message: Message) -> None:
            if message["type"] == "http.response.start":
                guard.request_read()
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                guard.response_sent()
                await send(message)
                guard.response_written()
                return
            await send(message)

        try:
            await self.app(scope, receive_body, send_response)
        finally:
            guard.request_ended()


def _has_body(scope: Scope) -> bool:
    """Whether the request declares a body (a non-zero length, or chunks)."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            return value.strip() not in (b"0", b"")
        if key == b"transfer-encoding":
            return True
    return False
