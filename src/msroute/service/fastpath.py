"""The two hot endpoints, answered without FastAPI's per-request machinery.

``POST /v1/routers/{name}/decisions`` and ``POST /v1/routers/{name}/decisions/{id}/feedback``
carry nearly all the traffic, and FastAPI's layers (routing, dependency solving, its own
middleware) cost more CPU per request than the router itself. ``FastPath`` wraps the
FastAPI app and answers these two requests directly in the ordinary case: a served router, a
valid decision id in the path, an accepted token, a ``Content-Length`` JSON body that the request
model accepts. Every other request goes to the FastAPI app unchanged (a body already read is
replayed), so there is one set of rules and one set of error bodies: the body is validated by
the same pydantic model (``model_validate`` on the parsed JSON, as FastAPI does), the token by
the same ``BearerToken``, and whatever either refuses is answered by
FastAPI's handlers. The work and the answers are those of the FastAPI endpoints: the same
``ServedRouters`` operations, the same ``JSONResponse``, the same
problem table for the router's errors.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_json
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from msroute.errors import MSRouteError
from msroute.service.auth import BearerToken
from msroute.service.metrics import FEEDBACK_STATUSES
from msroute.service.models import ID_PATTERN, DecisionRequest, FeedbackRequest
from msroute.service.problems import internal_problem, msroute_problem
from msroute.service.routers import ServedRouters

__all__ = ["DECISIONS", "FEEDBACK", "FastPath"]

#: The path templates of the two hot endpoints (their label in the request-latency metric).
DECISIONS = "/v1/routers/{name}/decisions"
FEEDBACK = "/v1/routers/{name}/decisions/{decision_id}/feedback"

_log = logging.getLogger("msroute.service")
_ID = re.compile(ID_PATTERN)


class _Route:
    """What the request-latency middleware reads from ``scope["route"]``: the path template."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


_DECISIONS_ROUTE = _Route(DECISIONS)
_FEEDBACK_ROUTE = _Route(FEEDBACK)


#: The feedback answers, encoded once.
_STATUS_BODIES = {s: b'{"status":"%s"}' % s.encode() for s in FEEDBACK_STATUSES}


def json_bytes(content: Any) -> bytes:
    """``content`` as compact UTF-8 JSON, as ``JSONResponse`` renders it, in a fraction of the time.

    pydantic-core's encoder writes the same JSON values as ``json.dumps`` (numbers in the
    shortest form that reads back to the same float, e.g. ``1e-5`` for ``1e-05``). Non-finite
    numbers are not JSON: should the output spell one (or an id merely contain the letters), the
    standard encoder decides, which refuses them as ``JSONResponse`` does.
    """
    data = to_json(content, inf_nan_mode="constants")
    if b"NaN" in data or b"Infinity" in data:
        return json.dumps(
            content, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode()
    return data


class JSONAnswer:
    """An encoded JSON answer, sent with the headers ``JSONResponse`` sends (length, type)."""

    __slots__ = ("body", "status")

    def __init__(self, body: bytes, status: int = 200) -> None:
        self.body = body
        self.status = status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [
                    (b"content-length", b"%d" % len(self.body)),
                    (b"content-type", b"application/json"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": self.body})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the body already read, then defers to the server's."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


class FastPath:
    """ASGI wrapper answering the hot endpoints of ``routers`` itself; everything else to ``app``.

    Parameters
    ----------
    app : ASGI app
        The FastAPI app: every request this class does not answer, and the lifespan.
    routers : ServedRouters
        The routers the app serves.
    auth : BearerToken
        The app's token check.
    """

    def __init__(self, app: ASGIApp, routers: ServedRouters, auth: BearerToken) -> None:
        self.app = app
        self.routers = routers
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        parts = scope["path"].split("/")
        # ["", "v1", "routers", name, "decisions"] or [..., "decisions", decision_id, "feedback"]
        n = len(parts)
        hot = (
            (n == 5 or (n == 7 and parts[6] == "feedback" and _ID.fullmatch(parts[5]) is not None))
            and parts[4] == "decisions"
            and parts[1] == "v1"
            and parts[2] == "routers"
            and parts[0] == ""
            and parts[3] in self.routers.owners
            and self._ordinary(scope)
        )
        if not hot:
            await self.app(scope, receive, send)
            return
        body = await self._body(receive)
        if body is None:  # the client went away
            return
        try:
            content = json.loads(body)
            request: DecisionRequest | FeedbackRequest = (
                DecisionRequest if n == 5 else FeedbackRequest
            ).model_validate(content)
        except (ValueError, ValidationError):  # FastAPI answers with the problem it names
            await self.app(scope, _replay(body, receive), send)
            return
        scope["route"] = _DECISIONS_ROUTE if n == 5 else _FEEDBACK_ROUTE
        response = await self._answer(scope, parts, request)
        await response(scope, receive, send)

    def _ordinary(self, scope: Scope) -> bool:
        """A JSON body of declared length and an accepted token (else FastAPI answers)."""
        authorization = ""
        json_body = sized = False
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value.decode("latin-1")
            elif key == b"content-type":
                json_body = value == b"application/json" or value.startswith(b"application/json;")
            elif key == b"content-length":
                sized = True
        return json_body and sized and self.auth.refusal(authorization) is None

    @staticmethod
    async def _body(receive: Receive) -> bytes | None:
        """The whole request body, or None if the client disconnected first."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _answer(
        self, scope: Scope, parts: list[str], request: DecisionRequest | FeedbackRequest
    ) -> JSONAnswer | Response:
        name = parts[3]
        try:
            if isinstance(request, DecisionRequest):
                return JSONAnswer(json_bytes(await self.routers.decide(name, request)), 201)
            return JSONAnswer(_STATUS_BODIES[await self.routers.feedback(name, parts[5], request)])
        except MSRouteError as exc:
            return msroute_problem(exc, f"POST {scope['path']}")
        except Exception:
            _log.exception("POST %s", scope["path"])
            return internal_problem()
