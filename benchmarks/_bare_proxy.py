"""A pass-through proxy on the gateway's own HTTP stack: the floor of ``bench_gateway.py``.

``python benchmarks/_bare_proxy.py PORT UPSTREAM_URL`` serves ``POST /v1/chat/completions`` on
127.0.0.1 by sending the request's body, unread, to ``UPSTREAM_URL/chat/completions`` and
answering with the upstream's status and body; ``GET /health`` answers 200. It runs as the
gateway does (uvicorn with the service's httptools protocol, on uvloop; the gateway's keep-alive
client, ``msroute.gateway.http1``) and does nothing else: no routing, no journal, no JSON, no
metrics, no auth. Its latency over calling the upstream directly is what any gateway built on
this stack pays before it does its own work.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

from msroute.gateway.http1 import Pool, Target, target, tls_context
from msroute.service.server import _run
from msroute.service.transport import guarded_http_tools

Message = dict[str, Any]


def proxy(upstream: Target) -> Callable[..., Awaitable[None]]:
    """The ASGI app forwarding to ``upstream``."""
    pool: list[Pool] = []  # made on the server's event loop, at startup

    async def app(
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                if event["type"] == "lifespan.startup":
                    pool.append(Pool(tls_context()))
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/health":
            await _answer(send, 200, b"{}")
            return
        pieces = []
        more = True
        while more:
            event = await receive()
            pieces.append(event.get("body", b""))
            more = event.get("more_body", False)
        response = await pool[0].post(
            upstream, b"content-type: application/json\r\n", b"".join(pieces)
        )
        try:
            body = await response.read()
        finally:
            response.release()
        await _answer(send, response.status, body)

    return app


async def _answer(send: Callable[[Message], Awaitable[None]], status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def main(port: int, upstream_url: str) -> None:
    """Serve until killed."""
    config = uvicorn.Config(
        proxy(target(upstream_url.rstrip("/") + "/chat/completions")),
        host="127.0.0.1",
        port=port,
        http=guarded_http_tools(30.0),
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,
    )
    await uvicorn.Server(config).serve()


if __name__ == "__main__":
    _run(main(int(sys.argv[1]), sys.argv[2]))
