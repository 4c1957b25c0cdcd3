"""The gateway's HTTP/1.1 client for its upstreams: keep-alive connections as asyncio protocols,
responses parsed by httptools (llhttp, the parser uvicorn serves with).

An upstream call is one ``POST`` of a JSON body, answered either whole or as a stream of
server-sent events. This client does that and nothing else: no redirects, no proxies, no
cookies, no ``.netrc``; a request goes to the configured URL and nowhere else. It replaces a
general client (httpx) that spent more CPU per call than the rest of the gateway together.

- ``Pool.post`` sends a request on an idle connection to the target's origin (or a new one) and
  returns the ``Response`` once its status line and headers have come; ``Response.read`` gives
  the whole body, ``Response.chunks`` its pieces as they come. ``Response.release`` hands the
  connection back: kept for the next call if the exchange ended cleanly and both sides allow
  keep-alive, else closed. A call that is cancelled (its timeout) closes its connection.
- At most ``max_per_origin`` connections per origin are open; a call beyond waits for one.
  An idle connection unused for ``idle_s`` seconds is closed rather than reused (a server closes
  idle connections after a while, and a request sent as it does so gets no answer).
- Bodies in ``Content-Length``, chunks, or until the server closes (no length given);
  ``Content-Encoding`` gzip or deflate is decoded (the request asks for none). An answer read
  faster than it is consumed pauses reading at ``HIGH_WATER`` bytes buffered.

Every failure is an ``HTTPFailure``: no connection, a connection that broke before the answer
ended, or bytes that are not an HTTP/1.1 response.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httptools

from msroute._version import __version__
from msroute.errors import ConfigError

__all__ = ["HIGH_WATER", "HTTPFailure", "Pool", "Response", "Target", "target", "tls_context"]

#: Bytes of an answer buffered before reading from its connection pauses.
HIGH_WATER = 256 * 1024

_USER_AGENT = f"msroute/{__version__}".encode()


class HTTPFailure(Exception):
    """An exchange that gave no whole answer; the message says why (never the server's text)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: its origin (scheme, host, port), the request line's path and the
    ``Host`` header's value."""

    scheme: str
    host: str
    port: int
    path: bytes
    host_header: bytes

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def target(url: str) -> Target:
    """The ``Target`` of an ``http://`` or ``https://`` URL (``ConfigError`` for another)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{url!r}: not an http:// or https:// URL with a host")
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    if port != default:
        shown += f":{port}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, path.encode("ascii"), shown.encode("idna"))


def tls_context() -> ssl.SSLContext:
    """Certificate checks against certifi's authorities where it is installed (as httpx did),
    else the system's."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


class Response:
    """One answer, from its status and headers on (``Pool.post`` returns it)."""

    def __init__(self, connection: _Connection) -> None:
        self.status = 0
        #: Header names in lower case; a header given twice keeps its values joined by ``, ``.
        self.headers: dict[bytes, bytes] = {}
        self._connection = connection
        self._pieces: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._head: asyncio.Future[None] = connection.loop.create_future()
        self._waiter: asyncio.Future[None] | None = None
        self._interim = False
        self._until_close = False
        self._complete = False
        self._error: HTTPFailure | None = None
        self._decoder: Callable[[bytes], bytes] | None = None

    # filled by the connection -------------------------------------------------------------
    def _header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        seen = self.headers.get(name)
        self.headers[name] = value if seen is None else seen + b", " + value

    def _headers_done(self, status: int) -> None:
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._interim = True
            self.headers = {}
            return
        self.status = status
        encoding = self.headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding in (b"gzip", b"deflate"):
            # wbits 47: a gzip or zlib header, detected; a raw deflate stream is tried below.
            self._decoder = _Decoder().decode
        elif encoding != b"identity":
            self._fail(HTTPFailure(f"answer in an unsupported content encoding {encoding!r}"))
            return
        self._until_close = (
            b"content-length" not in self.headers
            and b"transfer-encoding" not in self.headers
            and status not in (204, 304)
        )
        if not self._head.done():
            self._head.set_result(None)

    def _body(self, data: bytes) -> None:
        if self._interim or self._error is not None:
            return
        self._pieces.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER:
            self._connection.pause()
        self._wake()

    def _message_done(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._complete = True
        self._wake()

    def _lost(self) -> None:
        """The connection closed: the end of a body sent until close, else a failure."""
        if self._complete:
            return
        if self._head.done() and self._until_close and self._error is None:
            self._complete = True
            self._wake()
            return
        self._fail(HTTPFailure("the connection closed before the answer ended"))

    def _fail(self, error: HTTPFailure) -> None:
        if self._error is None and not self._complete:
            self._error = error
            if not self._head.done():
                self._head.set_exception(error)
                self._head.exception()  # retrieved: a call cancelled meanwhile never awaits it
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # read by the caller ------------------------------------------------------------------
    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's pieces as they come (decoded), until it ends.

        Raises
        ------
        HTTPFailure
            The connection broke or the bytes stopped being HTTP before the body ended.
        """
        while True:
            if self._pieces:
                yield self._take()
                continue
            if self._error is not None:
                raise self._error
            if self._complete:
                return
            await self._more()

    async def read(self) -> bytes:
        """The whole body (decoded): ``chunks`` joined.

        Raises
        ------
        HTTPFailure
            As ``chunks``.
        """
        pieces: list[bytes] = []
        while True:
            if self._pieces:
                pieces.append(self._take())
                continue
            if self._error is not None:
                raise self._error
            if self._complete:
                return b"".join(pieces)
            await self._more()

    def _take(self) -> bytes:
        """What has come of the body so far (decoded); reading goes on."""
        data = b"".join(self._pieces)
        self._pieces.clear()
        self._buffered = 0
        self._connection.resume()
        return data if self._decoder is None else self._decoder(data)

    async def _more(self) -> None:
        """Until more of the body comes, it ends, or the exchange fails."""
        self._waiter = self._connection.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool if the exchange ended
        cleanly and keep-alive holds, else it is closed (idempotent)."""
        connection = self._connection
        if connection.response is not self:
            return
        connection.response = None
        reusable = (
            self._complete
            and self._error is None
            and not self._until_close
            and connection.keep_alive()
        )
        connection.pool.put_back(connection, reusable)


class _Decoder:
    """A gzip, zlib or raw deflate stream, decoded piece by piece."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(47)
        self._started = False

    def decode(self, data: bytes) -> bytes:
        try:
            out = self._inflate.decompress(data)
        except zlib.error:
            if self._started:
                raise HTTPFailure("the answer's compressed body is damaged") from None
            self._inflate = zlib.decompressobj(-15)  # a raw deflate stream (no header)
            try:
                out = self._inflate.decompress(data)
            except zlib.error:
                raise HTTPFailure("the answer's compressed body is damaged") from None
        self._started = True
        return out


class _Connection(asyncio.Protocol):
    """One connection to an origin, with at most one exchange under way (``response``)."""

    def __init__(self, pool: Pool, origin: tuple[str, str, int]) -> None:
        self.pool = pool
        self.origin = origin
        self.loop = pool.loop
        self.transport: Any = None
        self.response: Response | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._paused = False
        self._keep_alive = False

    # asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:  # uvloop's are not asyncio.Transport
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes no request asked for: not reusable
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            response._fail(HTTPFailure(f"the answer is not HTTP/1.1 ({type(exc).__name__})"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response._lost()

    # httptools callbacks ------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response._header(name, value)

    def on_headers_complete(self) -> None:
        # Read here: once the message is complete the parser no longer says.
        self._keep_alive = self._parser.should_keep_alive()
        if self.response is not None:
            self.response._headers_done(self._parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._body(body)

    def on_message_complete(self) -> None:
        if self.response is not None:
            self.response._message_done()

    # used by the pool and the response -------------------------------------------------------
    def send(self, data: bytes) -> Response:
        assert self.transport is not None  # connected before it is handed out
        response = self.response = Response(self)
        if self.closed:  # the server closed it as it was handed out
            response._lost()
        else:
            self.transport.write(data)
        return response

    def keep_alive(self) -> bool:
        return not self.closed and self._keep_alive

    def pause(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Origin:
    """An origin's idle connections, how many are open, and the calls waiting for one."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[_Connection] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def wake_one(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class Pool:
    """Keep-alive connections to the upstreams' origins (see the module docstring).

    Parameters
    ----------
    tls : ssl.SSLContext
        For ``https`` origins.
    max_per_origin : int
        Connections open to one origin at most.
    idle_s : float
        Seconds an idle connection is kept for reuse.
    """

    def __init__(self, tls: ssl.SSLContext, max_per_origin: int = 256, idle_s: float = 5.0) -> None:
        self.loop = asyncio.get_running_loop()
        self._tls = tls
        self._max = max_per_origin
        self._idle_s = idle_s
        self._origins: dict[tuple[str, str, int], _Origin] = {}

    async def post(self, to: Target, headers: bytes, body: bytes) -> Response:
        """Send ``POST`` with ``headers`` (whole ``name: value\\r\\n`` lines, without ``Host``
        and ``Content-Length``) and ``body``; the answer once its head has come.

        Raises
        ------
        HTTPFailure
            No connection could be opened, or it broke before the head came.
        """
        connection = await self._acquire(to)
        head = (
            b"POST %s HTTP/1.1\r\nhost: %s\r\nuser-agent: %s\r\naccept-encoding: identity\r\n"
            b"%scontent-length: %d\r\n\r\n"
            % (to.path, to.host_header, _USER_AGENT, headers, len(body))
        )
        response = connection.send(head + body)
        try:
            await response._head
        except BaseException:
            response.release()  # not complete: closed
            raise
        return response

    async def _acquire(self, to: Target) -> _Connection:
        origin = self._origins.get(to.origin)
        if origin is None:
            origin = self._origins[to.origin] = _Origin()
        while True:
            now = self.loop.time()
            while origin.idle:
                connection = origin.idle.pop()
                if not connection.closed and now - connection.idle_since < self._idle_s:
                    return connection
                self._drop(origin, connection)
            if origin.open < self._max:
                break
            waiter = self.loop.create_future()
            origin.waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    origin.wake_one()  # woken, then cancelled: pass the turn on
                raise
        origin.open += 1
        try:
            return await self._connect(to)
        except BaseException:
            origin.open -= 1
            origin.wake_one()
            raise

    async def _connect(self, to: Target) -> _Connection:
        tls = self._tls if to.scheme == "https" else None
        try:
            _, protocol = await self.loop.create_connection(
                lambda: _Connection(self, to.origin),
                to.host,
                to.port,
                ssl=tls,
                server_hostname=to.host if tls is not None else None,
            )
        except (OSError, ssl.SSLError) as exc:  # refused, unresolved, a certificate refused
            raise HTTPFailure(f"cannot connect ({type(exc).__name__})") from exc
        return protocol

    def put_back(self, connection: _Connection, reusable: bool) -> None:
        """A connection whose exchange ended: idle again, or closed."""
        origin = self._origins[connection.origin]
        if reusable and not connection.closed:
            connection.idle_since = self.loop.time()
            origin.idle.append(connection)
            origin.wake_one()
        else:
            self._drop(origin, connection)

    def _drop(self, origin: _Origin, connection: _Connection) -> None:
        connection.close()
        origin.open -= 1
        origin.wake_one()

    def close(self) -> None:
        """Close every idle connection (those under way close as their calls end)."""
        for origin in self._origins.values():
            while origin.idle:
                self._drop(origin, origin.idle.pop())
