"""The gateway's HTTP/1.1 client (msroute.gateway.http1) against a scripted server on 127.0.0.1.

Each test runs an asyncio server whose answers are raw bytes, so every framing the client must
read (a length, chunks, a body until close, an interim 100, gzip) and every way an exchange can
fail (refused, cut off, not HTTP, cancelled) is exercised exactly; each runs on asyncio's event
loop and on uvloop's (the gateway serves on uvloop, whose transports differ).
"""

from __future__ import annotations

import asyncio
import gzip
import re
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from _server import free_port
from msroute._version import __version__
from msroute.gateway.http1 import HIGH_WATER, HTTPFailure, Pool, Response, target, tls_context

Answer = Callable[[bytes], bytes | None]


class Scripted:
    """A server answering each request by ``answer(request bytes)`` (None: close without one);
    it records the requests and counts the connections."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"content-length: (\d+)", head)
                body = await reader.readexactly(int(length.group(1))) if length else b""
                self.requests.append(head + body)
                out = self.answer(head + body)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if _last(out):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _last(answer: bytes) -> bool:
    """Whether the server closes the connection after sending ``answer``."""
    low = answer.lower()
    framed = b"content-length" in low or b"transfer-encoding" in low
    return b"connection: close" in low or not framed


def ok(body: bytes = b'{"ok":1}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def run(main: Callable[[], Coroutine[Any, Any, None]], loop: str) -> None:
    (uvloop.run if loop == "uvloop" else asyncio.run)(main())


LOOPS = pytest.mark.parametrize("loop", ["asyncio", "uvloop"])


async def post(pool: Pool, url: str, body: bytes = b"{}") -> tuple[Response, bytes]:
    response = await pool.post(target(url), b"authorization: Bearer k\r\n", body)
    try:
        return response, await response.read()
    finally:
        response.release()


@LOOPS
def test_one_connection_is_kept_alive_for_the_calls_in_turn(loop: str) -> None:
    async def main() -> None:
        async with Scripted(lambda r: ok()) as server:
            pool = Pool(tls_context())
            for i in range(3):
                response, body = await post(pool, server.url, b'{"n":%d}' % i)
                assert (response.status, body) == (200, b'{"ok":1}')
            assert server.connections == 1
            port = server.url.split(":")[2].split("/")[0]
            assert server.requests[2] == (
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%s\r\n"
                b"user-agent: msroute/%s\r\naccept-encoding: identity\r\n"
                b"authorization: Bearer k\r\ncontent-length: 7\r\n\r\n"
                b'{"n":2}' % (port.encode(), __version__.encode())
            )
            pool.close()

    run(main, loop)


@LOOPS
def test_chunks_a_body_until_close_and_an_interim_answer_are_read(loop: str) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    until_close = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after 100")
    answers = iter([chunked, until_close, interim, ok()])

    async def main() -> None:
        async with Scripted(lambda r: next(answers)) as server:
            pool = Pool(tls_context())
            assert (await post(pool, server.url))[1] == b"hello world"
            assert (await post(pool, server.url))[1] == b"all of it"
            response, body = await post(pool, server.url)
            assert (response.status, body) == (200, b"after 100")
            await post(pool, server.url)
            # The chunked answer's connection was kept; the one read until close was not.
            assert server.connections == 2

    run(main, loop)


@LOOPS
def test_a_gzip_body_is_decoded_and_an_unknown_encoding_refused(loop: str) -> None:
    packed = gzip.compress(b'{"packed":true}')
    answers = iter(
        [ok(packed, b"content-encoding: gzip\r\n"), ok(b"x", b"content-encoding: br\r\n")]
    )

    async def main() -> None:
        async with Scripted(lambda r: next(answers)) as server:
            pool = Pool(tls_context())
            assert (await post(pool, server.url))[1] == b'{"packed":true}'
            with pytest.raises(HTTPFailure, match="unsupported content encoding b'br'"):
                await post(pool, server.url)

    run(main, loop)


@LOOPS
@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\ncut",
            "closed before the answer ended",
        ),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.1"),
        (None, "closed before the answer ended"),
    ],
)
def test_a_broken_exchange_fails_and_its_connection_is_not_reused(
    loop: str, answer: bytes | None, why: str
) -> None:
    answers = iter([answer, ok()])

    async def main() -> None:
        async with Scripted(lambda r: next(answers)) as server:
            pool = Pool(tls_context())
            with pytest.raises(HTTPFailure, match=why):
                await post(pool, server.url)
            assert (await post(pool, server.url))[1] == b'{"ok":1}'
            assert server.connections == 2

    run(main, loop)


@LOOPS
def test_a_refused_connection_fails(loop: str) -> None:
    async def main() -> None:
        pool = Pool(tls_context())
        with pytest.raises(HTTPFailure, match=r"cannot connect \(ConnectionRefusedError\)"):
            await post(pool, f"http://127.0.0.1:{free_port()}/v1/chat/completions")

    run(main, loop)


@LOOPS
def test_a_call_cancelled_mid_answer_closes_its_connection(loop: str) -> None:
    slow = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"
    answers = iter([slow, ok()])

    async def main() -> None:
        async with Scripted(lambda r: next(answers)) as server:
            pool = Pool(tls_context())
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await post(pool, server.url)
            assert (await post(pool, server.url))[1] == b'{"ok":1}'
            assert server.connections == 2

    run(main, loop)


@LOOPS
def test_calls_beyond_the_limit_wait_for_a_connection(loop: str) -> None:
    async def main() -> None:
        async with Scripted(lambda r: ok()) as server:
            pool = Pool(tls_context(), max_per_origin=2)
            results = await asyncio.gather(*(post(pool, server.url) for _ in range(6)))
            assert [body for _, body in results] == [b'{"ok":1}'] * 6
            assert server.connections == 2

    run(main, loop)


@LOOPS
def test_an_idle_connection_past_its_time_is_not_reused(loop: str) -> None:
    async def main() -> None:
        async with Scripted(lambda r: ok()) as server:
            pool = Pool(tls_context(), idle_s=0.05)
            await post(pool, server.url)
            await asyncio.sleep(0.1)
            await post(pool, server.url)
            assert server.connections == 2

    run(main, loop)


@LOOPS
def test_a_large_answer_is_read_in_pieces_under_back_pressure(loop: str) -> None:
    big = bytes(range(256)) * (3 * HIGH_WATER // 256)

    async def main() -> None:
        async with Scripted(lambda r: ok(big)) as server:
            pool = Pool(tls_context())
            response = await pool.post(target(server.url), b"", b"{}")
            pieces: list[bytes] = []
            async for piece in response.chunks():
                pieces.append(piece)
                await asyncio.sleep(0.01)  # a slow reader: the connection pauses meanwhile
            response.release()
            assert b"".join(pieces) == big
            assert (await post(pool, server.url))[1] == big
            assert server.connections == 1

    run(main, loop)


def test_targets() -> None:
    t = target("https://api.example.com/v1/chat/completions")
    assert (t.origin, t.path, t.host_header) == (
        ("https", "api.example.com", 443),
        b"/v1/chat/completions",
        b"api.example.com",
    )
    assert target("http://[::1]:8000/x?a=1").host_header == b"[::1]:8000"
    assert target("http://[::1]:8000/x?a=1").path == b"/x?a=1"
    with pytest.raises(ValueError, match="not an http"):
        target("ftp://example.com/")
