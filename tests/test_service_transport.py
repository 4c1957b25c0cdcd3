"""The service's connections: responses leave in one write; slow clients are cut off.

In process, a recording transport shows what ``GatheringTransport`` hands on: the writes of one
event-loop turn as one write, in order; a complete response at once, in one write; a close
writes what is gathered first; an abort drops it; nothing goes to a transport that is
closing. Over loopback, a real ``msroute serve`` answers raw HTTP/1.1 requests on one socket
(keep-alive, pipelined, ``Connection: close``, a refused body) with complete, well-framed
responses; connections that are silent, or send a request too slowly,
get 408 and are closed within a bounded time while the server goes on serving; a request sent in
pieces within the deadline is served. ``serve`` binds its socket and opens the routers before it
runs uvicorn with the guarded protocol and the collector set for serving, and the installed
uvicorn is in the range ``pyproject.toml`` pins.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _server import HOST, ServerProcess, free_port
from _service import ROUTER, TOKEN, served, write_config
from msroute.service.transport import GatheringTransport, GuardedHttpTools

pytestmark = pytest.mark.timeout(120)


class Recording:
    """A transport that records what is written to it and whether it was closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_extra_info(self, name: str) -> Any:
        return f"extra {name}"


def gathering(body: Any) -> Recording:
    """Run ``body(transport, real)`` in an event loop; return the recording transport."""
    real = Recording()

    async def main() -> None:
        transport = GatheringTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        await body(transport, real)

    asyncio.run(main())
    return real


def test_writes_of_one_turn_leave_as_one_write_in_order() -> None:
    async def body(transport: GatheringTransport, real: Recording) -> None:
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"first")
        assert real.writes == []  # nothing before the turn ends
        await asyncio.sleep(0)
        transport.write(b"second")
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # an empty turn writes nothing

    real = gathering(body)
    assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\nfirst", b"second"]


def test_close_writes_what_is_gathered_first() -> None:
    async def body(transport: GatheringTransport, real: Recording) -> None:
        transport.write(b"last words")
        transport.close()
        assert (real.writes, real.closed) == ([b"last words"], True)
        await asyncio.sleep(0)  # the scheduled flush finds nothing left

    real = gathering(body)
    assert real.writes == [b"last words"]


def test_abort_drops_what_is_gathered_and_a_closing_transport_gets_nothing() -> None:
    async def body(transport: GatheringTransport, real: Recording) -> None:
        transport.write(b"dropped")
        transport.abort()
        await asyncio.sleep(0)
        assert real.writes == [] and real.aborted

    gathering(body)

    async def peer_left(transport: GatheringTransport, real: Recording) -> None:
        transport.write(b"too late")
        real.closed = True  # the peer went away before the turn ended
        await asyncio.sleep(0)

    assert gathering(peer_left).writes == []


def test_everything_else_is_the_real_transports() -> None:
    async def body(transport: GatheringTransport, real: Recording) -> None:
        assert transport.get_extra_info("peername") == "extra peername"
        assert transport.is_closing() is False

    gathering(body)


def test_a_complete_response_leaves_at_once_in_one_write() -> None:
    """A response is written to the socket as soon as the server has written its end, in one
    write with its head, not at the next turn of the event loop (which, with many events
    ready, waited for all their handlers); a stream's pieces still gather per turn."""
    import uvicorn
    from uvicorn.server import ServerState

    from msroute.service.transport import ReadDeadline, guarded_http_tools

    class Socketless(Recording):
        def get_extra_info(self, name: str) -> Any:
            return None  # no addresses, no TLS

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

    real = Socketless()
    seen: list[list[bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        head = [(b"content-length", b"2"), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})
        seen.append(list(real.writes))  # what the socket had when the last send returned

    async def main() -> None:
        config = uvicorn.Config(ReadDeadline(app), lifespan="off", log_level="error")
        config.load()
        protocol = guarded_http_tools(5.0)(config=config, server_state=ServerState(), app_state={})
        protocol.connection_made(real)
        protocol.data_received(b"POST /x HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\n\r\n{}")
        for _ in range(5):
            await asyncio.sleep(0)
        protocol.connection_lost(None)

    asyncio.run(main())
    ((written,),) = seen  # one write, there before the app's step ended
    assert written.startswith(b"HTTP/1.1 200 OK\r\n") and written.endswith(b"\r\n\r\n{}")
    assert real.writes == [written]


# --- over loopback ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("transport")
    with served(tmp, service={"max_body_bytes": 4096}) as (srv, _):
        yield srv


def _request(path: str, body: bytes = b"", *, close: bool = False) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {TOKEN}\r\n"
    head += "Content-Type: application/json\r\n"
    head += "Connection: close\r\n" if close else ""
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class Reader:
    """Reads HTTP/1.1 responses (Content-Length framed) from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), "connection closed before the headers"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        size = int(headers["content-length"])
        while len(self.buffer) < size:
            assert self._fill(), "connection closed inside the body"
        body, self.buffer = self.buffer[:size], self.buffer[size:]
        return int(lines[0].split()[1]), headers, body

    def at_end(self) -> bool:
        return not self.buffer and not self._fill()


def _connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection((HOST, server.port), timeout=20)
    return sock


def test_keep_alive_and_pipelined_requests_get_whole_responses(server: ServerProcess) -> None:
    decide = _request("/v1/routers/llm/decisions", b'{"context": "tech"}')
    with _connect(server) as sock:
        reader = Reader(sock)
        for _ in range(3):  # one at a time on one connection
            sock.sendall(decide)
            status, headers, body = reader.response()
            assert status == 201 and headers["content-type"] == "application/json"
            assert body.startswith(b'{"decision_id":')
        sock.sendall(decide * 3)  # pipelined: answered in order, each framed
        answers = [reader.response() for _ in range(3)]
        assert [a[0] for a in answers] == [201, 201, 201]
        assert len({a[2] for a in answers}) == 3


def test_connection_close_gets_the_whole_response_then_the_end(server: ServerProcess) -> None:
    with _connect(server) as sock:
        reader = Reader(sock)
        sock.sendall(_request("/v1/routers/llm/decisions", b'{"context": "tech"}', close=True))
        status, _, body = reader.response()
        assert status == 201 and body.endswith(b"}")
        assert reader.at_end()


def test_refused_body_is_answered_whole_before_the_close(server: ServerProcess) -> None:
    with _connect(server) as sock:
        reader = Reader(sock)
        sock.sendall(_request("/v1/routers/llm/decisions", b"{" + b" " * 5000 + b"}"))
        status, headers, body = reader.response()
        assert status == 413 and headers["content-type"] == "application/problem+json"
        assert b"limit" in body
        assert reader.at_end()


def _decisions(server: ServerProcess) -> int:
    with _connect(server) as sock:
        head = f"GET /v1/routers/llm HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {TOKEN}"
        sock.sendall(head.encode() + b"\r\nConnection: close\r\n\r\n")
        status, _, body = Reader(sock).response()
        assert status == 200
        return int(json.loads(body)["decisions"])


GARBAGE = (
    b"GARBAGE\r\n\r\n",
    b"\x00\x01\x02 not http\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
)


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize(("valid", "apart"), [(1, False), (2, False), (2, True)])
def test_requests_before_bytes_that_are_not_http_get_their_answers_first(
    server: ServerProcess, garbage: bytes, valid: int, apart: bool
) -> None:
    """Pipelined valid requests followed by garbage (in one packet, or the garbage sent on its
    own while they are served): each valid request is answered (its decision is journaled),
    then the garbage gets 400 and the connection ends."""
    before = _decisions(server)
    decide = _request("/v1/routers/llm/decisions", b'{"context": "tech"}')
    with _connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = Reader(sock)
        if apart:
            sock.sendall(decide * valid)
            sock.sendall(garbage)
        else:
            sock.sendall(decide * valid + garbage)
        answers = [reader.response() for _ in range(valid + 1)]
        assert reader.at_end()
    assert [a[0] for a in answers] == [201] * valid + [400]
    assert all(a[2].startswith(b'{"decision_id":') for a in answers[:valid])
    assert answers[-1][1]["content-type"] == "application/problem+json"
    assert json.loads(answers[-1][2])["status"] == 400
    assert _decisions(server) == before + valid  # every journaled decision was answered


def test_a_request_cut_off_by_bad_bytes_is_not_served_and_the_one_before_is(
    server: ServerProcess,
) -> None:
    """A request whose chunked body turns into garbage is refused (400) and not applied; the
    complete request before it in the same packet is answered first."""
    before = _decisions(server)
    decide = _request("/v1/routers/llm/decisions", b'{"context": "tech"}')
    head = f"POST /v1/routers/llm/decisions HTTP/1.1\r\nHost: {HOST}\r\n"
    head += f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
    cut = (head + 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"con\r\nZZ\r\n').encode()
    with _connect(server) as sock:
        reader = Reader(sock)
        sock.sendall(decide + cut)
        assert reader.response()[0] == 201
        assert reader.response()[0] == 400
        assert reader.at_end()
    assert _decisions(server) == before + 1


@pytest.mark.parametrize("valid", [1, 3])
def test_a_client_that_half_closes_after_sending_gets_every_answer(
    server: ServerProcess, valid: int
) -> None:
    """A client that ends its side after sending (shutdown of writes; it still reads): each
    request it sent in full is served and answered, then the connection closes. asyncio closed
    it at the end of input, and the journaled decisions' answers were lost."""
    before = _decisions(server)
    decide = _request("/v1/routers/llm/decisions", b'{"context": "tech"}')
    with _connect(server) as sock:
        reader = Reader(sock)
        sock.sendall(decide * valid)
        sock.shutdown(socket.SHUT_WR)
        assert [reader.response()[0] for _ in range(valid)] == [201] * valid
        assert reader.at_end()
    assert _decisions(server) == before + valid


def test_a_half_close_inside_a_request_ends_the_connection_at_once(server: ServerProcess) -> None:
    """The end of input cuts a request's body: nothing more can come, so the connection closes
    without waiting for the read deadline, and nothing was applied."""
    before = _decisions(server)
    with _connect(server) as sock:
        sock.sendall(_request("/v1/routers/llm/decisions", b'{"context": "tech"}')[:-5])
        sock.shutdown(socket.SHUT_WR)
        assert _closed_within(sock, 5) == b""
    assert _decisions(server) == before


def test_bytes_that_are_not_http_alone_get_400_at_once(server: ServerProcess) -> None:
    with _connect(server) as sock:
        reader = Reader(sock)
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        status, headers, body = reader.response()
        assert status == 400 and headers["connection"] == "close"
        assert b"not a valid HTTP/1.1 request" in body
        assert reader.at_end()


def test_serve_opens_the_routers_then_runs_uvicorn_on_its_socket_with_the_guarded_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    from msroute.service import load_service_config, serve
    from msroute.service.server import GC_THRESHOLD

    seen: list[tuple[uvicorn.Config, Any, bool]] = []
    journal = tmp_path / "llm.db"

    class Server:
        def __init__(self, config: uvicorn.Config) -> None:
            self.config = config

        async def serve(self, sockets: list[socket.socket]) -> None:
            (sock,) = sockets
            seen.append((self.config, sock.getsockname(), journal.exists()))

    monkeypatch.setattr(uvicorn, "Server", Server)
    collector: list[Any] = []
    monkeypatch.setattr(gc, "freeze", lambda: collector.append("freeze"))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: collector.append(t))
    config = write_config(tmp_path / "service.toml", {"llm": ROUTER})
    port = free_port()
    serve(load_service_config(config, data_dir=tmp_path), token=TOKEN, port=port)
    ((cfg, address, opened),) = seen
    assert issubclass(cfg.http, GuardedHttpTools)  # type: ignore[arg-type]
    assert address == (HOST, port) and opened  # bound and routers open before uvicorn runs
    assert cfg.access_log is False
    assert collector == ["freeze", GC_THRESHOLD]  # the app's objects frozen before serving


def test_the_installed_uvicorn_is_in_the_pinned_range() -> None:
    """The transport relies on uvicorn's httptools protocol (its import path, and that it is
    constructed with keyword arguments passed through): pyproject.toml pins the range."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    (pin,) = [Requirement(r) for r in extras["serve"] if r.startswith("uvicorn")]
    assert pin.specifier and "<" in str(pin.specifier), "uvicorn needs an upper bound"
    assert pin.specifier.contains(version("uvicorn")), (str(pin.specifier), version("uvicorn"))


# --- slow clients -----------------------------------------------------------------------------

READ_TIMEOUT_S = 1.0


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends before it closes the connection; fail if it is still open later."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the connection is still open after {seconds} s; got {data[:80]!r}")
    except ConnectionResetError:
        pass
    return data


def test_slow_and_silent_clients_are_cut_off_and_the_server_goes_on(tmp_path: Path) -> None:
    head = f"POST /v1/routers/llm/decisions HTTP/1.1\r\nHost: {HOST}\r\n".encode()
    with served(tmp_path, service={"read_timeout_s": READ_TIMEOUT_S}) as (srv, client):
        socks: list[socket.socket] = []
        try:
            started = time.monotonic()
            for i in range(45):
                sock = socket.create_connection((HOST, srv.port), timeout=5)
                socks.append(sock)
                if i % 3 == 1:  # the headers, a part at a time, never finished
                    sock.sendall(head)
                elif i % 3 == 2:  # the headers, then part of the body
                    sock.sendall(
                        head + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
                    )
                # else: connected and silent
            dripping = socks[1]
            for _ in range(3):  # a byte now and then does not move the deadline
                time.sleep(READ_TIMEOUT_S / 4)
                dripping.sendall(b"X")
            # Meanwhile the server answers others.
            assert (
                client.post("/v1/routers/llm/decisions", json={"context": "tech"}).status_code
                == 201
            )
            for sock in socks:
                data = _closed_within(sock, READ_TIMEOUT_S + 10)
                assert data == b"" or data.startswith(b"HTTP/1.1 408 "), data[:80]
            elapsed = time.monotonic() - started
            assert elapsed < READ_TIMEOUT_S + 10
            assert client.get("/v1/routers/llm").status_code == 200
        finally:
            for sock in socks:
                sock.close()


def test_a_request_sent_in_pieces_within_the_deadline_is_served(tmp_path: Path) -> None:
    body = b'{"context": "tech"}'
    raw = _request("/v1/routers/llm/decisions", body)
    with (
        served(tmp_path, service={"read_timeout_s": READ_TIMEOUT_S}) as (srv, _),
        _connect(srv) as sock,
    ):
        reader = Reader(sock)
        for piece in (raw[:20], raw[20:-5], raw[-5:]):
            sock.sendall(piece)
            time.sleep(READ_TIMEOUT_S / 5)
        assert reader.response()[0] == 201
        # Idle between two requests of a keep-alive connection: the read deadline waits for
        # the next request's first byte (uvicorn's keep-alive timeout governs idle time).
        time.sleep(READ_TIMEOUT_S * 1.5)
        sock.sendall(raw)
        assert reader.response()[0] == 201


def test_a_request_pipelined_behind_another_and_never_finished_is_cut_off(
    tmp_path: Path,
) -> None:
    """The second request's bytes arrive while the first is served (which armed no deadline
    for them): it still gets 408 within the read deadline, after the first one's answer."""
    decide = _request("/v1/routers/llm/decisions", b'{"context": "tech"}')
    stalled = _request("/v1/routers/llm/decisions", b"x" * 100)[:-95]
    with (
        served(tmp_path, service={"read_timeout_s": READ_TIMEOUT_S}) as (srv, _),
        _connect(srv) as sock,
    ):
        started = time.monotonic()
        sock.sendall(decide + stalled)
        data = _closed_within(sock, READ_TIMEOUT_S + 10)
        assert time.monotonic() - started < READ_TIMEOUT_S + 10
    assert data.startswith(b"HTTP/1.1 201 ") and b"HTTP/1.1 408 Request Timeout" in data


class StubProtocol:
    """Stands for uvicorn's protocol inside the guard: records what it is handed."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.data: list[bytes] = []
        self.lost = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def test_the_deadline_counts_only_time_spent_waiting_for_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In process, with a stand-in for uvicorn's protocol: the deadline runs from the first byte
    of a request until the app has read it, never while the app works on it."""
    from msroute.service import transport as module

    monkeypatch.setattr(module, "HttpToolsProtocol", StubProtocol)
    timeout = 0.05

    async def main() -> tuple[Recording, StubProtocol, list[bool]]:
        real = Recording()
        guard = module.guarded_http_tools(timeout)(config="c", server_state="s")
        inner: Any = guard._inner
        assert inner.kwargs == {"config": "c", "server_state": "s"}  # passed through unchanged
        closed: list[bool] = []
        guard.connection_made(real)
        guard.data_received(b"POST / HTTP/1.1\r\n")
        guard.request_read()  # the app has the request: its own time is not limited
        await asyncio.sleep(timeout * 4)
        closed.append(real.closed)
        guard.response_sent()
        await asyncio.sleep(timeout * 4)  # idle between requests: uvicorn's keep-alive governs
        closed.append(real.closed)
        guard.data_received(b"POST / HT")  # the next request starts and stalls
        await asyncio.sleep(timeout * 4)
        closed.append(real.closed)
        return real, inner, closed

    real, inner, closed = asyncio.run(main())
    assert closed == [False, False, True]
    assert inner.data == [b"POST / HTTP/1.1\r\n", b"POST / HT"]
    assert len(real.writes) == 1 and real.writes[0].startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    head, body = real.writes[0].split(b"\r\n\r\n", 1)
    assert b"content-length: %d" % len(body) in head and b"408" in body
