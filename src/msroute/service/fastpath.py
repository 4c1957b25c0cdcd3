"""The two hot endpoints, answered without FastAPI's per-request machinery; every body's nesting
bounded before it is parsed.

``POST /v1/routers/{name}/decisions`` and ``POST /v1/routers/{name}/decisions/{id}/feedback``
carry nearly all the traffic, and FastAPI's layers (dependency solving, its own middleware) cost
more CPU per request than the router itself. ``FastPath`` wraps the FastAPI app and answers
these two requests directly in the ordinary case: a served router, a valid decision id in the
path, an accepted token, a ``Content-Length`` JSON body that the request model accepts. The two
requests are recognized by the FastAPI app's own route objects (Starlette's public
``Route.matches``), so there is one route table. An app extension's hot endpoints (the
gateway's chat completions) are answered the same way, by the ``RawHandler`` its FastAPI route
calls too, given the body once the token, the type and the length are known to be in order.
Every other request goes to the FastAPI app unchanged (a body already read is replayed), so
there is one set of rules and one set of error bodies: the body is validated by the same strict
pydantic model (``model_validate`` on the parsed JSON, as FastAPI does), the token by the same
``BearerToken``, and whatever either refuses is answered by FastAPI's handlers. The work and the
answers are those of the FastAPI endpoints: the same ``ServedRouters`` operations, the
same ``JSONResponse``, the same problem table for the router's errors.

Every JSON request body (``POST``, ``PUT``, ``PATCH``, whatever the route) is checked here before
any JSON parser sees it (``json_refusal``): a body that is not UTF-8 is refused with 415, and one
nested deeper than ``MAX_JSON_DEPTH`` arrays or objects with 400. No request of the API nests
deeper than three levels, and Python's parser would otherwise recurse once per level. The depth
is read from the bytes, which is exact for UTF-8 (no byte of a multi-byte character is a quote,
a backslash or a bracket) but not for the UTF-16 and UTF-32 that Python's parser also takes
(``json.detect_encoding``), where a character's bytes can read as a quote and hide every bracket
after it; RFC 8259 requires UTF-8 of JSON between systems, so the others are refused rather
than scanned in a second way.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_json
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from msroute.errors import MSRouteError
from msroute.service.auth import BearerToken
from msroute.service.metrics import FEEDBACK_STATUSES
from msroute.service.models import ID_PATTERN, DecisionRequest, FeedbackRequest
from msroute.service.problems import (
    internal_problem,
    json_content,
    msroute_problem,
    problem_response,
)
from msroute.service.routers import ServedRouters

__all__ = [
    "DECISIONS",
    "FEEDBACK",
    "MAX_JSON_DEPTH",
    "FastPath",
    "RawHandler",
    "json_refusal",
    "json_too_deep",
]

#: The path templates of the two hot endpoints (their label in the request-latency metric).
DECISIONS = "/v1/routers/{name}/decisions"
FEEDBACK = "/v1/routers/{name}/decisions/{decision_id}/feedback"

_log = logging.getLogger("msroute.service")
_ID = re.compile(ID_PATTERN)

#: A hot endpoint of an app extension: a request's body (JSON, checked by ``json_refusal``) ->
#: the response to send. Its FastAPI route answers with the same function.
RawHandler = Callable[[bytes], Awaitable[ASGIApp]]

#: The deepest nesting of arrays and objects accepted in a request body.
MAX_JSON_DEPTH = 32
#: A JSON string (skipped whole) or a bracket. The string's pattern matches each byte one way
#: only and always succeeds (an unterminated string runs to the end of the body, a body the
#: parser refuses anyway), so the scan is linear in the body: no backtracking, no rescans.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_UTF8 = frozenset({"utf-8", "utf-8-sig"})


def json_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``body`` nests arrays and objects deeper than ``limit``, read without parsing.

    Brackets inside strings do not count. A body with no more than ``limit`` opening brackets
    in all is answered from two byte counts; others are scanned once, without recursion.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for match in _TOKENS.finditer(body):
        first = match.group()[:1]
        if first in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif first in (b"]", b"}"):
            depth -= 1
    return False


def json_refusal(body: bytes) -> tuple[int, str] | None:
    """Why a JSON body is refused before any parser sees it, as (status, detail), or None:
    415 if it is not UTF-8 (by the parser's own detection, ``json.detect_encoding``; a UTF-8
    byte order mark is taken), 400 if it nests deeper than ``MAX_JSON_DEPTH``."""
    encoding = json.detect_encoding(body)
    if encoding not in _UTF8:
        return 415, f"body: JSON must be encoded as UTF-8 (RFC 8259), not {encoding.upper()}"
    if json_too_deep(body):
        return 400, f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels"
    return None


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
    decide, feedback : starlette route
        The app's routes of ``POST`` ``DECISIONS`` and ``POST`` ``FEEDBACK``.
    raw : sequence of (starlette route, RawHandler)
        An extension's ``POST`` routes answered here by their handler (with the route's
        token, type and length in order; else FastAPI answers).
    """

    def __init__(
        self,
        app: ASGIApp,
        routers: ServedRouters,
        auth: BearerToken,
        *,
        decide: BaseRoute,
        feedback: BaseRoute,
        raw: Sequence[tuple[BaseRoute, RawHandler]] = (),
    ) -> None:
        self.app = app
        self.routers = routers
        self.auth = auth
        self._hot: Sequence[tuple[BaseRoute, bool]] = ((decide, True), (feedback, False))
        self._raw = tuple(raw)
        # The raw routes by their path, where no hot route could take that path: a request
        # for one of them is matched against that route alone.
        self._raw_by_path = {
            path: (route, handler)
            for route, handler in self._raw
            if isinstance(path := getattr(route, "path", None), str)
            and not any(_template_takes(hot, path) for hot, _ in self._hot)
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        raw = self._raw_by_path.get(scope["path"])
        if raw is not None and _takes(raw[0], scope) and self._ordinary(scope):
            await self._answer_raw(scope, receive, send, *raw)
            return
        matched = self._match(scope)
        if matched is None:
            for route, handler in self._raw:
                if route.matches(scope)[0] is Match.FULL and self._ordinary(scope):
                    await self._answer_raw(scope, receive, send, route, handler)
                    return
            await self._app_checked(scope, receive, send)
            return
        route, deciding, params = matched
        name = params["name"]
        decision_id = params.get("decision_id", "")
        hot = (
            name in self.routers.owners
            and (deciding or _ID.fullmatch(decision_id) is not None)
            and self._ordinary(scope)
        )
        if not hot:
            await self._app_checked(scope, receive, send)
            return
        body = await self._json_body(scope, receive, send)
        if body is None:
            return
        try:
            content = json.loads(body)
            request: DecisionRequest | FeedbackRequest = (
                DecisionRequest if deciding else FeedbackRequest
            ).model_validate(content)
        except (ValueError, RecursionError, ValidationError):  # FastAPI answers, naming it
            await self.app(scope, _replay(body, receive), send)
            return
        scope["route"] = route
        response = await self._answer(scope, name, decision_id, request)
        await response(scope, receive, send)

    def _match(self, scope: Scope) -> tuple[BaseRoute, bool, dict[str, Any]] | None:
        """The hot route the request is for (whether it decides, its path parameters)."""
        for route, deciding in self._hot:
            match, child = route.matches(scope)
            if match is Match.FULL:
                return route, deciding, child["path_params"]
        return None

    async def _app_checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The FastAPI app, once a JSON body is known to be UTF-8 and not to nest too deeply."""
        try:
            body = await self._body(receive)
        except HTTPException as exc:  # a chunked body over the limit (BodyLimit)
            detail = str(exc.detail)
            response = problem_response(exc.status_code, detail, headers={"connection": "close"})
            await response(scope, receive, send)
            return
        if body is None:
            return
        refusal = json_refusal(body) if _declares_json(scope) else None
        if refusal is not None:
            await problem_response(*refusal)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _ordinary(self, scope: Scope) -> bool:
        """A JSON body of declared length and an accepted token (else FastAPI answers). A
        header given twice counts by its first value, as FastAPI reads it."""
        authorization: str | None = None
        json_body: bool | None = None
        sized = False
        for key, value in scope["headers"]:
            if key == b"authorization":
                if authorization is None:
                    authorization = value.decode("latin-1")
            elif key == b"content-type":
                if json_body is None:
                    json_body = value == b"application/json" or value.startswith(
                        b"application/json;"
                    )
            elif key == b"content-length":
                sized = True
        return bool(json_body) and sized and self.auth.refusal(authorization or "") is None

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

    async def _json_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The request's whole body, once ``json_refusal`` accepts it; None when the client
        went away first or the body was refused (answered here)."""
        body = await self._body(receive)
        if body is None:
            return None
        refusal = json_refusal(body)
        if refusal is not None:
            await problem_response(*refusal)(scope, receive, send)
            return None
        return body

    async def _answer_raw(
        self, scope: Scope, receive: Receive, send: Send, route: BaseRoute, handler: RawHandler
    ) -> None:
        body = await self._json_body(scope, receive, send)
        if body is None:
            return
        scope["route"] = route
        try:
            response = await handler(body)
        except Exception:  # a bug: answered as FastAPI's handler of the unexpected answers it
            _log.exception("POST %s", scope["path"])
            response = internal_problem()
        await response(scope, receive, send)

    async def _answer(
        self, scope: Scope, name: str, decision_id: str, request: DecisionRequest | FeedbackRequest
    ) -> JSONAnswer | Response:
        try:
            if isinstance(request, DecisionRequest):
                return JSONAnswer(json_bytes(await self.routers.decide(name, request)), 201)
            status = await self.routers.feedback(name, decision_id, request)
            return JSONAnswer(_STATUS_BODIES[status])
        except MSRouteError as exc:
            return msroute_problem(exc, f"POST {scope['path']}", self.routers.redact)
        except Exception:
            _log.exception("POST %s", scope["path"])
            return internal_problem()


def _takes(route: BaseRoute, scope: Scope) -> bool:
    """Whether ``route``, a route of the path ``scope`` names exactly, takes the request
    (``route.matches`` is a full match): its method, where no ``root_path`` changes which path
    the route sees; else ``route.matches`` says."""
    if not scope.get("root_path"):
        methods = getattr(route, "methods", None)
        return not methods or scope["method"] in methods
    return route.matches(scope)[0] is Match.FULL


def _template_takes(route: BaseRoute, path: str) -> bool:
    """Whether ``route``'s path template matches ``path`` (a route without one: assumed to)."""
    regex = getattr(route, "path_regex", None)
    return regex is None or regex.match(path) is not None


def _declares_json(scope: Scope) -> bool:
    """Whether FastAPI may parse the request's body as JSON: its type declares JSON
    (``json_content``), or it has none (FastAPI before ``strict_content_type`` parses it)."""
    for key, value in scope["headers"]:
        if key == b"content-type":
            return not value or json_content(value.decode("latin-1"))
    return True
