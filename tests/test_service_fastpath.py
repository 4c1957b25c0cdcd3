"""The fast path answers the ordinary hot requests itself and hands every other one to FastAPI.

The ASGI wrapper is driven in process over real routers (journals in a temporary directory): an
ordinary decision or feedback is answered without reaching the wrapped app, and each kind of
request the fast path must not answer reaches the wrapped app with its body intact (there, the
real FastAPI app answers it: tests/test_service_api.py checks those answers over HTTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from _service import ROUTER, TOKEN, served, write_config
from msroute.service.auth import BearerToken
from msroute.service.config import load_service_config
from msroute.service.fastpath import (
    DECISIONS,
    FEEDBACK,
    MAX_JSON_DEPTH,
    FastPath,
    JSONAnswer,
    json_bytes,
    json_refusal,
    json_too_deep,
)
from msroute.service.routers import ServedRouters

Message = dict[str, Any]


async def _unreached(request: Request) -> JSONResponse:
    raise AssertionError("the fast path calls no endpoint")


#: The two hot routes, as the app declares them (the fast path matches requests with them).
HOT = {
    "decide": Route(DECISIONS, _unreached, methods=["POST"]),
    "feedback": Route(FEEDBACK, _unreached, methods=["POST"]),
}


class Inner:
    """Stands for the FastAPI app: records each request it gets, with the body it can read."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        message = await receive()
        self.seen.append((scope["path"], message.get("body", b"")))
        await send({"type": "http.response.start", "status": 599, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def request(
    app: FastPath,
    path: str,
    body: bytes,
    *,
    headers: dict[str, str] | None = None,
    chunks: int = 1,
    first: tuple[tuple[str, str], ...] = (),
) -> tuple[int, Any, Message]:
    """POST ``body`` (in ``chunks`` parts) through ``app``; its status, JSON body and scope.
    ``first``: headers sent before the others (a header given twice)."""
    hdrs = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    hdrs.update(headers or {})
    if chunks == 1:
        hdrs["content-length"] = str(len(body))
    size = -(-len(body) // chunks) or 1
    parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    incoming = [
        {"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
        for i, p in enumerate(parts)
    ]
    scope: Message = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in [*first, *hdrs.items()] if v],
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    raw = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(raw) if raw else None, scope


def run(tmp_path: Path, body: Callable[[FastPath, Inner], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        async with fast_path(tmp_path) as (app, inner):
            await body(app, inner)

    asyncio.run(main())


@contextlib.asynccontextmanager
async def fast_path(tmp_path: Path) -> AsyncIterator[tuple[FastPath, Inner]]:
    """A fast path over the test router (started, stopped on exit) and the app it wraps."""
    config = write_config(tmp_path / "service.toml", {"llm": ROUTER})
    routers = ServedRouters(load_service_config(config, data_dir=tmp_path))
    await routers.start()
    try:
        inner = Inner()
        yield FastPath(inner, routers, BearerToken(TOKEN), **HOT), inner
    finally:
        await routers.stop()


async def _decide(app: FastPath) -> dict[str, Any]:
    status, dec, scope = await request(app, "/v1/routers/llm/decisions", b'{"context": "tech"}')
    assert status == 201 and scope["route"].path == DECISIONS
    assert isinstance(dec, dict)
    return dec


def test_ordinary_requests_are_answered_here(tmp_path: Path) -> None:
    async def body(app: FastPath, inner: Inner) -> None:
        dec = await _decide(app)
        assert len(dec["draws"]) == ROUTER["m_draws"]
        url = f"/v1/routers/llm/decisions/{dec['decision_id']}/feedback"
        status, answer, scope = await request(app, url, b'{"reward": 0.5}')
        assert (status, answer, scope["route"].path) == (200, {"status": "applied"}, FEEDBACK)
        status, answer, _ = await request(app, url, b'{"reward": 0.5}')
        assert (status, answer) == (200, {"status": "duplicate"})
        assert inner.seen == []
        counters = app.routers.metrics.hot("llm")
        assert counters.decisions._value.get() == 1
        assert counters.feedback["applied"]._value.get() == 1

    run(tmp_path, body)


def test_router_errors_are_problems_from_the_shared_table(tmp_path: Path) -> None:
    async def body(app: FastPath, inner: Inner) -> None:
        url = "/v1/routers/llm/decisions/no-such-id/feedback"
        status, problem, _ = await request(app, url, b'{"reward": 0.5}')
        assert status == 404 and "no-such-id" in problem["detail"]
        status, problem, _ = await request(
            app, "/v1/routers/llm/decisions", b'{"context": "weather"}'
        )
        assert status == 422 and "weather" in problem["detail"]
        assert inner.seen == []

    run(tmp_path, body)


HANDED_ON: list[tuple[str, str, bytes, dict[str, str], int]] = [
    # case, path, body, extra headers, chunks
    ("not JSON", DECISIONS, b"{not json", {}, 1),
    ("schema refuses", DECISIONS, b'{"contxt": "tech"}', {}, 1),
    ("NaN reward", FEEDBACK, b'{"reward": NaN}', {}, 1),
    ("no token", DECISIONS, b"{}", {"authorization": ""}, 1),
    ("wrong token", DECISIONS, b"{}", {"authorization": "Bearer nope"}, 1),
    ("not JSON content", DECISIONS, b"{}", {"content-type": "text/plain"}, 1),
    ("deep, not JSON content", DECISIONS, b"[" * 100, {"content-type": "text/plain"}, 1),
    (
        "deep, a form",
        DECISIONS,
        b"[" * 100,
        {"content-type": "application/x-www-form-urlencoded"},
        1,
    ),
    ("chunked", DECISIONS, b'{"context": "tech"}', {}, 3),
    ("unknown router", "/v1/routers/nope/decisions", b"{}", {}, 1),
    ("bad decision id", "/v1/routers/llm/decisions/a%20b/feedback", b'{"reward": 1}', {}, 1),
    ("id with newline", "/v1/routers/llm/decisions/ab\n/feedback", b'{"reward": 1}', {}, 1),
    ("trailing slash", "/v1/routers/llm/decisions/", b"{}", {}, 1),
]


@pytest.mark.parametrize(("case", "path", "raw", "headers", "chunks"), HANDED_ON)
def test_other_requests_reach_fastapi_with_their_body(
    tmp_path: Path, case: str, path: str, raw: bytes, headers: dict[str, str], chunks: int
) -> None:
    async def body(app: FastPath, inner: Inner) -> None:
        target = path.format(name="llm", decision_id="d-1")
        status, _, _ = await request(app, target, raw, headers=headers, chunks=chunks)
        assert status == 599, case
        # The body the fast path read (to bound its nesting) is replayed whole.
        assert inner.seen == [(target, raw)], case
        assert app.routers.metrics.hot("llm").decisions._value.get() == 0

    run(tmp_path, body)


@pytest.mark.parametrize(
    "first",
    [(("content-type", "text/plain"),), (("authorization", "Bearer nope"),)],
    ids=["content-type", "authorization"],
)
def test_a_header_given_twice_counts_by_its_first_value_as_fastapi_reads_it(
    tmp_path: Path, first: tuple[tuple[str, str], ...]
) -> None:
    """A first value FastAPI refuses (not JSON, a wrong token) before an ordinary one: the fast
    path, which read the last value, answered what FastAPI refuses (201 where FastAPI says
    415 or 401). It hands the request on."""

    async def body(app: FastPath, inner: Inner) -> None:
        raw = b'{"context": "tech"}'
        status, _, _ = await request(app, "/v1/routers/llm/decisions", raw, first=first)
        assert status == 599 and inner.seen == [("/v1/routers/llm/decisions", raw)]

    run(tmp_path, body)


def test_lifespan_and_other_methods_pass_through(tmp_path: Path) -> None:
    seen: list[str] = []

    async def inner(scope: Message, receive: Any, send: Any) -> None:
        seen.append(scope["type"] + " " + scope.get("method", ""))

    async def body() -> None:
        config = write_config(tmp_path / "service.toml", {"llm": ROUTER})
        routers = ServedRouters(load_service_config(config, data_dir=tmp_path))
        app = FastPath(inner, routers, BearerToken(TOKEN), **HOT)
        for scope in ({"type": "lifespan"}, {"type": "http", "method": "GET", "path": DECISIONS}):
            await app(scope, None, None)  # type: ignore[arg-type]

    asyncio.run(body())
    assert seen == ["lifespan ", "http GET"]


# --- the encoded answers ---------------------------------------------------------------------

ANSWERS: list[Any] = [
    {"status": "applied"},
    {
        "decision_id": "NaN-Infinity",  # the letters alone do not make a number non-finite
        "team": ["é-expert", "tiny"],
        "draws": ["tiny", "é-expert", "tiny"],
        "propensities": {"tiny": 0.1 + 0.2, "é-expert": 5e-324, "big": 1.7976931348623157e308},
        "policy_version": 2**63,
        "cost": {"usd": 1e-05, "tokens": 1.5e16, "zero": -0.0},
        "deadline": 1767225600.123456,
    },
    {"propensities": None, "text": 'quote " backslash \\ newline \n control \x01 \u2028'},
]


@pytest.mark.parametrize("content", ANSWERS)
def test_answers_are_the_json_of_jsonresponse(content: Any) -> None:
    """Same JSON values, same headers as the JSONResponse the FastAPI endpoints send."""

    async def body() -> tuple[list[Message], list[Message]]:
        ours: list[Message] = []
        theirs: list[Message] = []

        async def collect(into: list[Message], message: Message) -> None:
            into.append(message)

        await JSONAnswer(json_bytes(content), 201)({}, None, lambda m: collect(ours, m))  # type: ignore[arg-type]
        response = JSONResponse(content, status_code=201)
        await response({"type": "http"}, None, lambda m: collect(theirs, m))  # type: ignore[arg-type]
        return ours, theirs

    ours, theirs = asyncio.run(body())
    assert ours[0]["status"] == theirs[0]["status"] == 201
    assert dict(ours[0]["headers"])[b"content-type"] == dict(theirs[0]["headers"])[b"content-type"]
    assert json.loads(ours[1]["body"]) == json.loads(theirs[1]["body"]) == content
    assert dict(ours[0]["headers"])[b"content-length"] == str(len(ours[1]["body"])).encode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused_as_jsonresponse_refuses_them(bad: float) -> None:
    content = {"decision_id": "d", "cost": {"usd": bad}}
    with pytest.raises(ValueError, match="JSON compliant"):
        JSONResponse(content)
    with pytest.raises(ValueError, match="JSON compliant"):
        json_bytes(content)


# --- nesting bounded before parsing ------------------------------------------------------------


def _nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


@pytest.mark.parametrize(
    ("raw", "deep"),
    [
        (_nested(MAX_JSON_DEPTH), False),
        (_nested(MAX_JSON_DEPTH + 1), True),
        (b'{"a": ' * MAX_JSON_DEPTH + b"1" + b"}" * MAX_JSON_DEPTH, False),
        (b'{"a": ' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1), True),
        (b'{"context": "' + b"[" * 1000 + b'"}', False),  # brackets inside a string
        (b'{"context": "\\"' + b"[" * 1000 + b'"}', False),  # after an escaped quote
        (b"[" + b"[]," * 5000 + b"[]]", False),  # many brackets, shallow
        (b"[" * 30_000, True),  # unbalanced
        (b'"' + b"[" * 40, False),  # an unterminated string holds the rest
        (b"[" * 40 + b'"\\', True),  # ... even when it ends in a lone backslash
        (b'["\\\n' + b"[" * 40 + b'"]', False),  # a backslash before a newline (not JSON)
    ],
)
def test_json_depth_is_read_without_parsing(raw: bytes, deep: bool) -> None:
    assert json_too_deep(raw) is deep
    if not deep and raw.count(b"[") == raw.count(b"]"):
        json.loads(raw)  # the bound is below what the parser can take


def test_the_depth_scan_ends_on_hostile_bodies() -> None:
    """Bodies built to make a string pattern backtrack (an unterminated string after enough
    brackets to be scanned, runs of escaped quotes) are scanned in one pass: with the pattern
    this replaced, the first took hours (its time doubled with each byte), so the child
    running them would not end within the timeout."""
    code = (
        "from msroute.service.fastpath import json_too_deep\n"
        "bodies = [b'\"' + b'[' * 40, b'[' * 33 + b'\"' + b'\\\\\"' * 30_000,"
        " b'[' * 33 + b'\"a' * 30_000]\n"
        "print([json_too_deep(b) for b in bodies])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["[False,", "True,", "True]"]


@pytest.mark.parametrize(
    "path", [DECISIONS, FEEDBACK, "/v1/routers/{name}/experts", "/v1/routers/nope/decisions"]
)
def test_deeply_nested_bodies_are_400_before_any_parser(tmp_path: Path, path: str) -> None:
    async def body(app: FastPath, inner: Inner) -> None:
        target = path.format(name="llm", decision_id="d-1")
        raw = b'{"reward": ' + _nested(20_000) + b"}"
        status, problem, _ = await request(app, target, raw)
        assert status == 400 and f"deeper than {MAX_JSON_DEPTH}" in problem["detail"]
        status, problem, _ = await request(app, target, raw, chunks=4)
        assert status == 400
        for kind in ("", "application/vnd.api+json", "Application/JSON; charset=utf-8"):
            # No type (FastAPI before strict_content_type parses such a body), or a JSON one.
            status, problem, _ = await request(app, target, raw, headers={"content-type": kind})
            assert status == 400, kind
        assert inner.seen == []  # FastAPI never saw them

    run(tmp_path, body)


#: What Python's JSON parser takes besides UTF-8 (``json.detect_encoding``): with a byte order
#: mark, and without one (told by the zero bytes of the first characters).
OTHER_ENCODINGS = ("utf-16-le", "utf-16-be", "utf-16", "utf-32-le", "utf-32-be", "utf-32")
#: A 3,000-deep array behind a string whose character U+2200 encodes, in UTF-16 and UTF-32, to
#: a byte that reads as a quote: a scan of the bytes saw one string to the end and no bracket.
HIDDEN_DEPTH = '{"context": "\u2200", "eligible": ' + "[" * 3000 + "]" * 3000 + "}"


@pytest.mark.parametrize("encoding", OTHER_ENCODINGS)
def test_json_that_is_not_utf8_is_refused_before_any_parser(tmp_path: Path, encoding: str) -> None:
    raw = HIDDEN_DEPTH.encode(encoding)
    assert json_refusal(raw) == (
        415,
        f"body: JSON must be encoded as UTF-8 (RFC 8259), not {json.detect_encoding(raw).upper()}",
    )
    valid = b'{"context": "tech"}'.decode().encode(encoding)
    refused = json_refusal(valid)  # a valid request too: the encoding alone is refused
    assert refused is not None and refused[0] == 415

    async def body(app: FastPath, inner: Inner) -> None:
        for path in (DECISIONS, FEEDBACK, "/v1/routers/{name}/experts", "/v1/routers/nope/x"):
            target = path.format(name="llm", decision_id="d-1")
            for chunks in (1, 3):
                status, problem, _ = await request(app, target, raw, chunks=chunks)
                assert status == 415 and "UTF-8" in problem["detail"], (path, chunks)
        assert inner.seen == []

    run(tmp_path, body)


def test_a_utf8_byte_order_mark_is_taken_and_scanned(tmp_path: Path) -> None:
    assert json_refusal(HIDDEN_DEPTH.encode("utf-8-sig")) == (
        400,
        f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels",
    )

    async def body(app: FastPath, inner: Inner) -> None:
        dec = await _decide(app)
        raw = '{"context": "tech", "decision_id": "bom-1"}'.encode("utf-8-sig")
        status, answer, _ = await request(app, "/v1/routers/llm/decisions", raw)
        assert status == 201 and answer["decision_id"] == "bom-1" and dec
        assert inner.seen == []

    run(tmp_path, body)


def test_hidden_depth_in_utf16_and_utf32_is_a_4xx_over_http(tmp_path: Path) -> None:
    """Over HTTP, on both hot endpoints and a FastAPI one: 415, never 500, nothing applied."""
    with served(tmp_path) as (_, client):
        before = client.get("/v1/routers/llm").json()
        did = client.post("/v1/routers/llm/decisions", json={"context": "tech"}).json()
        for encoding in OTHER_ENCODINGS:
            raw = HIDDEN_DEPTH.encode(encoding)
            for method, path in (
                ("POST", "/v1/routers/llm/decisions"),
                ("POST", f"/v1/routers/llm/decisions/{did['decision_id']}/feedback"),
                ("PATCH", "/v1/routers/llm"),
            ):
                resp = client.request(
                    method, path, content=raw, headers={"Content-Type": "application/json"}
                )
                assert resp.status_code == 415, (encoding, path, resp.text)
                assert "UTF-8" in resp.json()["detail"]
        after = client.get("/v1/routers/llm").json()
        assert after["decisions"] == before["decisions"] + 1 and after["pending"] == 1


def test_a_raw_route_is_matched_alone_unless_a_hot_route_could_take_its_path(
    tmp_path: Path,
) -> None:
    """An extension's hot route is found by its path, but one whose path a hot route's
    template also matches is tried after the hot routes, as the routes are declared."""

    async def endpoint(request: Request) -> JSONResponse:
        return JSONResponse({})

    def route(path: str) -> Route:
        return Route(path, endpoint, methods=["POST"])

    async def handler(body: bytes) -> Any:
        raise AssertionError("not called")

    chat, shadowed = route("/v1/chat/completions"), route("/v1/routers/x/decisions")
    config = write_config(tmp_path / "service.toml", {"llm": ROUTER})
    fast = FastPath(
        endpoint,
        ServedRouters(load_service_config(config, data_dir=tmp_path)),
        BearerToken(TOKEN),
        decide=route(DECISIONS),
        feedback=route(FEEDBACK),
        raw=[(chat, handler), (shadowed, handler)],
    )
    assert fast._raw_by_path == {"/v1/chat/completions": (chat, handler)}
