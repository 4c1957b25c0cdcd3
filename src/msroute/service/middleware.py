"""ASGI middleware of the service: a cap on request bodies and the request-latency histogram.

Both are plain ASGI wrappers (no per-request task or body buffering), so they cost a few
microseconds per request.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from msroute.service.problems import problem_response

__all__ = ["BodyLimit", "RequestTimer"]


class BodyLimit:
    """Refuse request bodies longer than ``max_bytes`` with 413, before the app parses them.

    A declared ``Content-Length`` over the limit is refused at once, before the app runs; a
    chunked body is counted as it arrives and refused (through the app's error handlers) as soon
    as it passes the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.detail = f"body: longer than the limit of {max_bytes} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
                # The server delivers no more than the declared length: nothing to count.
                await self.app(scope, receive, send)
                return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the endpoint's body parsing: the app's handlers answer 413.
                    raise HTTPException(413, self.detail)
            return message

        await self.app(scope, counting_receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(413, self.detail, headers={"connection": "close"})
        await response(scope, receive, send)


class RequestTimer:
    """Observe each request's duration under its method and path template (``/v1/routers/{name}``).

    Requests that match no route are counted under the endpoint ``"unmatched"`` and methods
    other than the standard ones under ``"OTHER"``, so clients cannot create unbounded label
    values.
    """

    METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram
        self._children: dict[tuple[str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            route: Any = scope.get("route")
            method = scope["method"] if scope["method"] in self.METHODS else "OTHER"
            key = (method, getattr(route, "path", None) or "unmatched")
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self.histogram.labels(*key)
            child.observe(time.perf_counter() - start)
