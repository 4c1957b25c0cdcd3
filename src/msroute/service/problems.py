"""Errors as ``application/problem+json`` (RFC 9457), from one table.

Every error response of the service is a problem document ``{"type", "title", "status",
"detail"}`` whose ``detail`` names the offending field. msroute's own errors map to a status by
``STATUS_OF`` (first matching class wins); request bodies that do not match the schema are
422 with one ``errors`` entry per field (never echoing the values sent); unparsable JSON is 400.
A problem document is written in ASCII (other characters as JSON escapes): a name quoted from
the request may hold what UTF-8 cannot encode (a lone surrogate, which a JSON escape in the
request can spell), and the error must still be answered, with the name as sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from msroute.errors import (
    DecisionConflictError,
    InfeasibleConstraintsError,
    JournalError,
    MSRouteError,
    UnknownDecisionError,
    UnknownRouterError,
)

__all__ = [
    "PROBLEM_JSON",
    "STATUS_OF",
    "ProblemResponse",
    "install_problem_handlers",
    "internal_problem",
    "json_content",
    "msroute_problem",
    "problem_response",
]

PROBLEM_JSON = "application/problem+json"


def json_content(content_type: str) -> bool:
    """Whether a request's ``Content-Type`` declares JSON, by FastAPI's rule:
    ``application/json`` or ``application/<anything>+json`` (parameters ignored)."""
    main, _, sub = content_type.partition(";")[0].strip().lower().partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


_log = logging.getLogger("msroute.service")

#: msroute error class -> HTTP status, most specific first (only msroute's own errors are
#: mapped: anything else is a bug and a 500). A bad value is 422 (well-formed JSON that cannot be
#: applied); a journal that cannot be written (a full disk, an I/O error: ``JournalError``) and any
#: other msroute error that is not about a value is 503: nothing of the request was applied, and
#: it may be retried once the disk has recovered (``/healthz`` says 503 until then).
STATUS_OF: tuple[tuple[type[Exception], int], ...] = (
    (UnknownRouterError, 404),
    (UnknownDecisionError, 404),
    (InfeasibleConstraintsError, 409),
    (DecisionConflictError, 409),
    (JournalError, 503),
    (ValueError, 422),
    (TypeError, 422),
    (MSRouteError, 503),
)


class ProblemResponse(JSONResponse):
    """A JSON response written in ASCII: every string, whatever it holds, is encodable."""

    media_type = PROBLEM_JSON

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def problem_response(
    status: int,
    detail: str,
    *,
    errors: Sequence[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ProblemResponse:
    """A problem+json response with the standard title of ``status`` (and ``extra`` members)."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        **(extra or {}),
    }
    if errors is not None:
        body["errors"] = list(errors)
    return ProblemResponse(body, status_code=status, headers=headers)


def _message(exc: BaseException) -> str:
    # KeyError and friends quote a single string argument; show the message itself.
    if len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc) or type(exc).__name__


def msroute_problem(
    exc: MSRouteError, where: str, redact: Callable[[str], str] = str
) -> JSONResponse:
    """The problem response for an msroute error raised while serving ``where`` (method, path).

    The status comes from ``STATUS_OF``; errors that are not about a value (5xx) are logged
    whole. The answer's detail is the message through ``redact`` (the service's takes journal
    paths out).
    """
    status = next(s for cls, s in STATUS_OF if isinstance(exc, cls))
    message = _message(exc)
    if status >= 500:
        _log.error("%s: %s", where, message)
    return problem_response(status, redact(message))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    entries = [
        {
            "loc": [str(p) for p in err.get("loc", ())],
            "msg": err.get("msg", ""),
            "type": err["type"],
        }
        for err in exc.errors()
    ]
    if any(e["type"] == "json_invalid" for e in entries):
        return problem_response(400, "body: not valid JSON", errors=entries)
    if (
        entries
        and entries[0]["loc"] == ["body"]
        and not json_content(request.headers.get("content-type", ""))
    ):
        return problem_response(
            415, "body: send a JSON object with the header 'Content-Type: application/json'"
        )
    detail = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in entries)
    return problem_response(422, detail or "invalid request", errors=entries)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not parse the body
        detail = f"body: not valid JSON ({_message(exc.__cause__)})"
    return problem_response(exc.status_code, detail, headers=exc.headers)


def internal_problem() -> JSONResponse:
    """The 500 answered for a bug: no detail leaks; the server logs the traceback."""
    return problem_response(500, "internal error; the server log has the details")


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # The server logs the traceback (Starlette re-raises after this response is sent).
    return internal_problem()


def install_problem_handlers(app: FastAPI, redact: Callable[[str], str] = str) -> None:
    """Make every error of ``app`` a problem+json response (msroute errors' messages through
    ``redact``)."""

    async def _msroute_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, MSRouteError)
        return msroute_problem(exc, f"{request.method} {request.url.path}", redact)

    app.add_exception_handler(MSRouteError, _msroute_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
