"""A stub OpenAI-compatible upstream on 127.0.0.1, for the gateway's tests and benchmark.

``python tests/_upstream.py PORT`` serves ``POST /v1/chat/completions`` (and ``/chat/completions``).
Each call behaves as its ``model`` says, a query string: ``stub?latency_ms=20&prompt=100&
completion=40&cached=10&status=500&hang=1&no_usage=1&chunks=4`` (every key optional). The answer
has a ``usage`` with those counts (``prompt`` defaults to the number of characters of the
messages divided by 4), the content ``"answer of <model>"``, and in ``system_fingerprint`` the
``Authorization`` header the stub received (so a test sees which key was sent). ``status``
answers that error status (with a usage if ``error_usage=1``); ``hang`` waits an hour. A stream
sends the content in ``chunks`` events, a usage chunk when ``stream_options.include_usage`` is
set, then ``[DONE]``.

:class:`StubUpstream` runs it as a child process and stops it by its pid (SIGKILL) on exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl

HOST = "127.0.0.1"


def _behaviour(model: str) -> dict[str, str]:
    _, _, query = model.partition("?")
    return dict(parse_qsl(query))


def _usage(b: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    text = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    prompt = int(b.get("prompt", max(1, text // 4)))
    completion = int(b.get("completion", 20))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(b.get("cached", 0))},
    }


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The stub's ASGI app."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/health":
        await _send(send, 200, b'{"ok":true}')
        return
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            break
    body = json.loads(raw)
    model = str(body.get("model", ""))
    b = _behaviour(model)
    auth = dict(scope["headers"]).get(b"authorization", b"").decode()
    if "latency_ms" in b:
        await asyncio.sleep(float(b["latency_ms"]) / 1000)
    if b.get("hang"):
        await asyncio.sleep(3600)
    usage = _usage(b, body)
    if "status" in b:
        error: dict[str, Any] = {"error": {"message": f"stub error, key {auth}", "type": "x"}}
        if b.get("error_usage"):
            error["usage"] = usage
        await _send(send, int(b["status"]), json.dumps(error).encode())
        return
    content = f"answer of {model}"
    base = {"id": "stub-1", "created": 1700000000, "model": model, "system_fingerprint": auth}
    if not body.get("stream"):
        answer = {
            **base,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
        if not b.get("no_usage"):
            answer["usage"] = usage
        await _send(send, 200, json.dumps(answer).encode())
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    chunks = max(1, int(b.get("chunks", 3)))
    size = -(-len(content) // chunks)
    for i in range(chunks):
        piece = content[i * size : (i + 1) * size]
        event = {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
        }
        await send({"type": "http.response.body", "body": _event(event), "more_body": True})
    options = body.get("stream_options") or {}
    if options.get("include_usage") and not b.get("no_usage"):
        event = {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}
        await send({"type": "http.response.body", "body": _event(event), "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _event(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


async def _send(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ChildServer:
    """A server script in a child process on 127.0.0.1, ready once ``GET /health`` answers (a
    context manager: killed by pid on exit, and if it does not start)."""

    def __init__(self, argv: list[str], port: int, startup_s: float = 30.0) -> None:
        self.argv = argv
        self.port = port
        self.startup_s = startup_s
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[1]} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.port}/health", timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        self.__exit__(None, None, None)
        raise TimeoutError(f"{self.argv[1]} did not start")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class StubUpstream(ChildServer):
    """The stub in a child process on 127.0.0.1 (a context manager: killed by pid on exit)."""

    def __init__(self, port: int, startup_s: float = 30.0) -> None:
        super().__init__([sys.executable, str(Path(__file__)), str(port)], port, startup_s)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(
        app, host=HOST, port=int(sys.argv[1]), log_level="warning", access_log=False, lifespan="on"
    )
