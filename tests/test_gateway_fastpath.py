"""The service's fast path answers the gateway's chat completions exactly as its FastAPI route.

The gateway's app runs in process (its lifespan too) over the stub upstream (a child process,
tests/_upstream.py, killed by pid). Each request is sent twice: through the app's own fast path,
and through a fast path without the gateway's hot route, which hands it to FastAPI. The two
answers (status, headers, body: whole or server-sent events) must be the same but for the
decision id, and the two decisions booked at the same cost in the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from prometheus_client import generate_latest

from _gateway import KEY_ENV, UPSTREAM_KEY, write_config
from _server import free_port
from _service import TOKEN
from _upstream import StubUpstream
from msroute.gateway import create_gateway_app, load_gateway_config
from msroute.service.fastpath import DECISIONS, FEEDBACK, FastPath

pytestmark = pytest.mark.timeout(120)

Message = dict[str, Any]
HI = [{"role": "user", "content": "hello"}]


def chat(router: str = "chat", **extra: Any) -> bytes:
    return json.dumps({"model": f"msroute/{router}", "messages": HI, **extra}).encode()


#: (case, status, body): every kind of answer of the route.
CASES: list[tuple[str, int, bytes]] = [
    ("a team of one", 200, chat(msroute={"eligible": ["a"]})),
    ("another upstream", 200, chat(msroute={"eligible": ["b"]}, temperature=0.5)),
    ("a stream", 200, chat(msroute={"eligible": ["b"]}, stream=True)),
    (
        "a stream with its usage",
        200,
        chat(msroute={"eligible": ["a"]}, stream=True, stream_options={"include_usage": True}),
    ),
    ("a team of two", 200, chat("team", msroute={"eligible": ["x", "y"]})),
    ("a team of two streaming", 200, chat("team", stream=True)),
    ("an upstream error", 502, chat(msroute={"eligible": ["broken"]})),
    ("an upstream timeout", 504, chat(msroute={"eligible": ["slow"]})),
    ("a streamed upstream error", 502, chat(msroute={"eligible": ["broken"]}, stream=True)),
    ("no usage", 200, chat(msroute={"eligible": ["nousage"]})),
    ("an unknown model", 404, json.dumps({"model": "gpt-4o", "messages": HI}).encode()),
    ("no context", 400, chat("ctx")),
    ("a context", 200, chat("ctx", msroute={"context": "code"})),
    ("an unknown expert", 400, chat(msroute={"eligible": ["zzz"]})),
    ("no messages", 400, json.dumps({"model": "msroute/chat"}).encode()),
    ("not JSON", 400, b'{"model": '),
    ("NaN", 400, chat(msroute={"eligible": ["a"]}, temperature=float("nan"))),
    # The upstream would get "yes" as sent while the gateway read it as a stream.
    ("a stream flag not a boolean", 400, chat(msroute={"eligible": ["b"]}, stream="yes")),
    ("a stream flag of 1", 400, chat(msroute={"eligible": ["b"]}, stream=1)),
    ("a list", 400, b"[1, 2]"),
    ("a lone surrogate", 400, chat(msroute={"eligible": ["a"]}, user="\ud800")),
    (
        "a number out of range",
        400,
        chat(msroute={"eligible": ["a"]}).replace(b"}", b',"n":1e400}', 1),
    ),
    # Refused before either parses it (json_refusal): the same problem both ways.
    ("UTF-16", 415, chat(msroute={"eligible": ["a"]}).decode().encode("utf-16")),
    ("too deep", 400, b'{"model": "msroute/chat", "messages": [' + b"[" * 40 + b"]" * 40 + b"]}"),
]

#: The cases refused before any route (the body's encoding and depth are checked first).
REFUSED_FIRST = {"UTF-16", "too deep"}


def _inside(app: Any, kind: type) -> Any:
    """The ``kind`` layer of the app's middleware stack (each layer's ``app`` is the next)."""
    while not isinstance(app, kind):
        app = app.app
    return app


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    task = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task


async def post(
    app: Any, body: bytes, on_start: Callable[[Message], None] | None = None
) -> tuple[int, dict[str, str], bytes, Message]:
    """POST ``body`` to chat completions through ``app``: status, headers, body, scope
    (``on_start``: called with the response's start as it is sent)."""
    scope: Message = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        if on_start is not None and message["type"] == "http.response.start":
            on_start(message)
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    content = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], headers, content, scope


def _normal(headers: dict[str, str], content: bytes) -> tuple[dict[str, str], bytes]:
    """Headers and body with the decision id replaced by a placeholder."""
    did = headers.get("x-msroute-decision-id")
    if did is None:
        return headers, content
    return {**headers, "x-msroute-decision-id": "D"}, content.replace(did.encode(), b"D")


async def _cost(app: FastPath, did: str) -> tuple[str, float]:
    """The decision's booking in the journal: its last row of kind decision or cost."""
    router = did.partition(":")[0]
    rows = await app.routers.call(router, lambda r: r.export_rows(0, 100_000))
    booked = [
        (r["kind"], r["cost"]["usd"])
        for r in rows
        if r.get("decision_id") == did and r["kind"] in ("decision", "cost")
    ]
    return booked[-1]


@pytest.fixture(scope="module")
def stub() -> Any:
    with StubUpstream(free_port()) as upstream:
        yield upstream


def _gateway_app(tmp_path: Path, stub: StubUpstream, sync: str | None = None) -> Any:
    """A gateway app on the stub upstream, its journal under ``tmp_path`` (``sync``: router
    ``chat``'s ``journal_sync``, else the default)."""
    environ = {KEY_ENV: UPSTREAM_KEY}
    path = write_config(tmp_path / "gateway.toml", stub.base_url)
    if sync is not None:
        text = path.read_text().replace(
            "[routers.chat]\n", f'[routers.chat]\njournal_sync = "{sync}"\n'
        )
        path.write_text(text)
    config = load_gateway_config(path, data_dir=tmp_path, environ=environ)
    return create_gateway_app(config, token=TOKEN, environ=environ)


def test_the_fast_path_answers_as_the_fastapi_route(tmp_path: Path, stub: StubUpstream) -> None:
    app = _gateway_app(tmp_path, stub)

    async def main() -> None:
        async with lifespan(app):
            fast = _inside(app, FastPath)
            api = _inside(app, FastAPI)
            routes = {r.path: r for r in api.routes if isinstance(r, APIRoute)}
            plain = FastPath(
                api,
                fast.routers,
                fast.auth,
                decide=routes[DECISIONS],
                feedback=routes[FEEDBACK],
            )
            for case, expected, body in CASES:
                for _ in range(50):  # the same team both ways (a team is drawn at random)
                    fast_answer = await post(fast, body)
                    assert "endpoint" not in fast_answer[3], case  # FastAPI did not see it
                    api_answer = await post(plain, body)
                    # FastAPI answered it (but a body refused before any route).
                    assert ("endpoint" in api_answer[3]) is (case not in REFUSED_FIRST), case
                    team = api_answer[1].get("x-msroute-team")
                    if team == fast_answer[1].get("x-msroute-team"):
                        break
                status, headers, content, _ = fast_answer
                assert status == expected, (case, content)
                assert (status, *_normal(headers, content)) == (
                    api_answer[0],
                    *_normal(api_answer[1], api_answer[2]),
                ), case
                if "x-msroute-decision-id" in headers:
                    await asyncio.sleep(0.05)  # a stream is booked as it ends
                    booked = [
                        await _cost(fast, answer[1]["x-msroute-decision-id"])
                        for answer in (fast_answer, api_answer)
                    ]
                    assert booked[0] == booked[1], case

    asyncio.run(main())


def test_settled_gives_each_result_or_exception_as_gather_does() -> None:
    from msroute.gateway.chat import _settled

    async def task() -> asyncio.Task[Any] | None:
        await asyncio.sleep(0)
        return asyncio.current_task()

    async def failing() -> None:
        raise ValueError("upstream")

    async def main() -> None:
        here = asyncio.current_task()
        assert await _settled([task()]) == [here]  # a lone call runs in this task
        [error] = await _settled([failing()])
        assert isinstance(error, ValueError)
        first, second = await _settled([task(), failing()])
        assert first not in (None, here) and isinstance(second, ValueError)

    asyncio.run(main())


def test_a_body_no_upstream_could_be_sent_is_refused_before_any_decision(
    tmp_path: Path, stub: StubUpstream
) -> None:
    """A string with a lone surrogate (no UTF-8 carries it) or a number out of a double's range
    (read as infinite) cannot be sent on: 400, and the router journals nothing."""
    app = _gateway_app(tmp_path, stub)
    refused = [
        body
        for case, _, body in CASES
        if case in ("a lone surrogate", "a number out of range", "a stream flag of 1")
    ]

    async def main() -> None:
        async with lifespan(app):
            fast = _inside(app, FastPath)
            for body in refused:
                status, _, content, _ = await post(fast, body)
                assert status == 400, content
                assert json.loads(content)["error"]["type"] == "invalid_request_error"
            rows = await fast.routers.call("chat", lambda r: r.export_rows(0, 1000))
            assert [r for r in rows if r["kind"] in ("decision", "cost")] == []

    asyncio.run(main())


def test_a_team_of_one_answers_the_upstreams_bytes_as_they_came(
    tmp_path: Path, stub: StubUpstream
) -> None:
    app = _gateway_app(tmp_path, stub)

    async def main() -> None:
        async with lifespan(app):
            status, headers, content, _ = await post(app, chat(msroute={"eligible": ["b"]}))
            assert status == 200
            # The stub writes Python's default JSON (a space after each separator): kept as is.
            assert content == json.dumps(json.loads(content)).encode()
            assert headers["content-length"] == str(len(content))

    asyncio.run(main())


def test_a_call_goes_on_and_is_booked_when_its_request_is_cancelled(
    tmp_path: Path, stub: StubUpstream
) -> None:
    """A request cancelled mid-call (a server's shutdown cancels its requests) leaves the call
    running: the upstream's timeout comes and the call is booked at its configured cost."""
    app = _gateway_app(tmp_path, stub)

    async def main() -> None:
        async with lifespan(app):
            fast = _inside(app, FastPath)
            request = asyncio.ensure_future(post(fast, chat(msroute={"eligible": ["slow"]})))
            await asyncio.sleep(0.2)  # decided, the upstream call under way (it hangs)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            await asyncio.sleep(0.8)  # past the upstream's 0.5 s timeout
            # Counted and booked (at its configured cost: the decision's booking stands).
            metrics = generate_latest(fast.routers.metrics.registry).decode()
            assert 'calls_total{expert="slow",outcome="timeout",router="chat"} 1.0' in metrics
            assert 'upstream_usd_total{expert="slow",router="chat"}' in metrics

    asyncio.run(main())


def test_hand_over_gives_the_work_s_result_or_error_and_survives_its_awaiter() -> None:
    from msroute.gateway.chat import _hand_over

    async def work(value: object, wait: float = 0.0) -> object:
        await asyncio.sleep(wait)
        if isinstance(value, Exception):
            raise value
        return value

    async def main() -> None:
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[object] = loop.create_future()
        await _hand_over(work("ok"), answered)
        assert answered.result() == "ok"
        failed: asyncio.Future[object] = loop.create_future()
        await _hand_over(work(ValueError("bug")), failed)
        with pytest.raises(ValueError, match="bug"):
            failed.result()
        left: asyncio.Future[object] = loop.create_future()
        task = asyncio.ensure_future(_hand_over(work("late", 0.05), left))
        left.cancel()  # the request went away
        await task  # the work ran to its end
        assert task.done() and not task.cancelled()

    asyncio.run(main())


def _journaled(
    fast: FastPath, monkeypatch: pytest.MonkeyPatch, refuse: str | None = None
) -> list[Any]:
    """The events router ``chat`` commits to its journal from now on, in order, each added
    once its transaction has committed; with ``refuse``, a transaction holding an event of
    that kind fails to commit, as on a full disk."""
    owner = fast.routers.owners["chat"]
    assert owner._router is not None
    journal = owner._router._journal
    store, commit, rollback = journal._store, journal.commit, journal.rollback  # type: ignore[union-attr]
    pending: list[Any] = []
    committed: list[Any] = []

    def stored(event: Any, probs_seq: int | None) -> None:
        store(event, probs_seq)
        pending.append(event)

    def committing() -> None:
        if refuse is not None and any(event[1] == refuse for event in pending):
            raise OSError(errno.ENOSPC, "No space left on device")
        commit()
        committed.extend(pending)
        pending.clear()

    def rolled_back() -> None:
        rollback()
        pending.clear()

    monkeypatch.setattr(journal, "_store", stored)
    monkeypatch.setattr(journal, "commit", committing)
    monkeypatch.setattr(journal, "rollback", rolled_back)
    return committed


@pytest.mark.parametrize("sync", ["normal", "full"])
def test_concurrent_calls_share_journal_writes_and_answer_once_journaled(
    tmp_path: Path, stub: StubUpstream, monkeypatch: pytest.MonkeyPatch, sync: str
) -> None:
    """The decisions and bookings of concurrent requests are submitted to the router's owner
    (``RouterOwner.submit``), which commits those of one turn of the event loop in one
    transaction (one frame of the journal's tail at ``"normal"``, one fsync at ``"full"``);
    each answer is sent only once its decision and its booking are committed."""
    app = _gateway_app(tmp_path, stub, sync)

    async def main() -> None:
        async with lifespan(app):
            fast = _inside(app, FastPath)
            owner = fast.routers.owners["chat"]
            rows = _journaled(fast, monkeypatch)
            groups, calls = owner.groups, owner.calls
            answered: list[str] = []

            def journaled_first(start: Message) -> None:
                did = dict(start["headers"])[b"x-msroute-decision-id"].decode()
                kinds = [row[1] for row in rows if row[2] == did]
                assert kinds == ["decision", "cost"], did
                answered.append(did)

            body = chat(msroute={"eligible": ["a", "b"]})
            answers = await asyncio.gather(*(post(fast, body, journaled_first) for _ in range(20)))
            assert [a[0] for a in answers] == [200] * 20 and len(set(answered)) == 20
            assert owner.calls - calls == 40
            # The 20 decisions were submitted in one turn: one group; the bookings as the
            # answers came.
            assert owner.groups - groups <= 21

    asyncio.run(main())


def test_a_journal_that_refuses_the_decision_or_the_booking_answers_503(
    tmp_path: Path,
    stub: StubUpstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A decision the journal refuses is answered 503 before any upstream is called; a booking
    it refuses, 503 with the decision's headers (the call was made), logged."""
    app = _gateway_app(tmp_path, stub)

    async def main() -> None:
        async with lifespan(app):
            fast = _inside(app, FastPath)
            body = chat(msroute={"eligible": ["b"]})
            with monkeypatch.context() as patch:
                _journaled(fast, patch, refuse="decision")
                status, headers, content, _ = await post(fast, body)
            assert status == 503 and "x-msroute-decision-id" not in headers
            error = json.loads(content)["error"]
            assert error["type"] == "service_unavailable" and "No space left" in error["message"]
            metrics = generate_latest(fast.routers.metrics.registry).decode()
            assert 'expert="b"' not in metrics  # no upstream was called
            with monkeypatch.context() as patch:
                rows = _journaled(fast, patch, refuse="cost")
                with caplog.at_level(logging.ERROR, logger="msroute.gateway"):
                    status, headers, content, _ = await post(fast, body)
            assert status == 503, content
            did = headers["x-msroute-decision-id"]
            assert headers["x-msroute-team"] == "b"
            assert "could not be journaled" in json.loads(content)["error"]["message"]
            assert [row[1] for row in rows if row[2] == did] == ["decision"]
            assert f"cannot book decision {did}" in caplog.text
            metrics = generate_latest(fast.routers.metrics.registry).decode()
            assert 'calls_total{expert="b",outcome="ok",router="chat"} 1.0' in metrics
            # The disk is back: the next call is decided, booked and answered.
            assert (await post(fast, body))[0] == 200

    asyncio.run(main())


def test_a_decision_id_the_gateway_mints_is_one_a_request_may_carry() -> None:
    """The gateway does not check the ids its routers mint (``<router>:<32 hex digits>``): the
    longest router name and every character a name may hold give a valid one."""
    from msroute.router.ids import RandomHex
    from msroute.service.config import ROUTER_NAME
    from msroute.service.models import DecisionRequest

    for name in ("a" * 64, "_" + "Az09_.-" * 9):
        assert ROUTER_NAME.fullmatch(name)
        decision_id = f"{name}:{RandomHex()()}"
        request = DecisionRequest(context=None, prompt=None, eligible=None, decision_id=decision_id)
        assert request.decision_id == decision_id
