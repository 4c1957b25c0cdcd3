"""``POST /v1/chat/completions``: route the query, call the team's upstreams, book what it cost.

One request is one decision of the router its model names (``msroute/<router>``), journaled
before any upstream is called. Every member of the team gets the request (with its own model);
a team of one answers with its upstream's answer as it came (a stream passes through as
server-sent events), a team of several with one choice per member, in draw order (a stream
merges the members' events, each choice's ``index`` moved to the member's place).

Each member's cost is its ``usage`` times its prices (``msroute.gateway.prices``); the team's
is their sum (a team pays every member), booked on the decision with ``Router.report_cost``
before the answer is sent (a stream: as soon as it ends), so the router's bounds hold on what
calls really cost. A member that timed out is booked at its configured cost (its usage never
came; it may have been billed), one that answered an error at the usage that error reports (else
nothing), one that answered without a usage at its configured cost. An upstream failure answers
502 (504 for a timeout) in the OpenAI error format, after the booking; with the router's
``upstream_error_reward`` set, the booking is a feedback with that reward instead. The call and
its booking run on even if the client goes away, so what was billed is booked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from msroute._validation import COST_MAX
from msroute.errors import InvalidFeedbackError, MSRouteError
from msroute.gateway.config import USD, GatewayRouter, Upstream
from msroute.gateway.metrics import GatewayMetrics
from msroute.gateway.models import ChatRequest
from msroute.gateway.prices import Usage
from msroute.gateway.upstream import (
    Answer,
    Stream,
    UpstreamFailure,
    Upstreams,
    parse_json,
    request_body,
)
from msroute.router import RoutedDecision
from msroute.service.fastpath import json_bytes
from msroute.service.models import DecisionRequest, FeedbackRequest
from msroute.service.routers import ServedRouters

__all__ = ["MODEL_PREFIX", "ChatHandler", "TextContext", "openai_error", "prompt_text"]

_log = logging.getLogger("msroute.gateway")
T = TypeVar("T")

#: The model names that pick a router: ``msroute/<router>``.
MODEL_PREFIX = "msroute/"
#: A text featurizer: (router name, the prompt's text) -> a context name, or None.
TextContext = Callable[[str, str], str | None]
_ERROR_TYPE = {400: "invalid_request_error", 404: "invalid_request_error", 502: "upstream_error"}
_ERROR_TYPE |= {503: "service_unavailable", 504: "timeout"}


def openai_error(
    status: int, message: str, *, code: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """An error in the OpenAI format, ``{"error": {"message", "type", "param", "code"}}``."""
    kind = _ERROR_TYPE.get(status, "api_error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last user message (its text parts joined), what a text featurizer reads."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [p.get("text") for p in content if isinstance(p, Mapping)]
            return "\n".join(p for p in parts if isinstance(p, str))
    return ""


class JSONBytes(Response):
    """A JSON body already encoded (an upstream's answer as it came), with the decision's
    headers: what ``JSONResponse`` sends, the same headers in the same order, without
    rendering anything again."""

    media_type = "application/json"

    def __init__(self, body: bytes, headers: Mapping[str, str]) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        self.raw_headers = [
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()),
            (b"content-length", b"%d" % len(body)),
            (b"content-type", b"application/json"),
        ]


def decision_headers(decision_id: str, team: Sequence[str]) -> dict[str, str]:
    """The headers naming a decision and its team (expert ids percent-encoded where needed)."""
    members = ",".join(_header_id(e) for e in team)
    return {"x-msroute-decision-id": decision_id, "x-msroute-team": members}


@functools.lru_cache(maxsize=4096)
def _header_id(expert: str) -> str:
    """An expert id as ``x-msroute-team`` names it (the ids are a config's: a few, repeated)."""
    return quote(expert, safe="-._~:@!$&'()*+;=")


class ChatHandler:
    """The chat completion endpoint of a gateway (see the module docstring)."""

    def __init__(
        self,
        service: ServedRouters,
        routers: Mapping[str, GatewayRouter],
        upstreams: Upstreams,
        metrics: GatewayMetrics,
        text_context: TextContext | None,
    ) -> None:
        self.service = service
        self.routers = routers
        self.upstreams = upstreams
        self.metrics = metrics
        self.text_context = text_context
        #: Bookings of streams that ended (awaited when the gateway stops).
        self.tasks: set[asyncio.Task[Any]] = set()
        #: Each router's booking of each expert, in dollars.
        self.booked = {
            name: {e: float(c[USD]) for e, c in service.config.routers[name]["experts"].items()}
            for name, gw in routers.items()
            if gw.upstreams
        }

    async def answer(self, raw: bytes) -> Response:
        """The response to the request's body ``raw`` (the FastAPI route and the service's fast
        path both answer with it)."""
        try:
            data = parse_json(raw)
            chat = ChatRequest.model_validate(data)
        except ValueError as exc:  # not JSON, or not a chat request (ValidationError)
            return openai_error(400, _invalid(exc))
        name = chat.model.removeprefix(MODEL_PREFIX)
        gw = self.routers.get(name) if chat.model.startswith(MODEL_PREFIX) else None
        if gw is None or not gw.upstreams:
            known = sorted(MODEL_PREFIX + n for n, g in self.routers.items() if g.upstreams)
            return openai_error(
                404,
                f"model {chat.model!r}: not a router of this gateway; known: {known}",
                code="model_not_found",
            )
        try:
            payload = request_body(data, chat.stream)  # refused before any decision is made
        except ValueError:
            return openai_error(400, "body: a number out of the range of JSON's numbers")
        try:
            routed = self._route(name, chat)
        except ValidationError as exc:
            return openai_error(400, _invalid(exc))
        except MSRouteError as exc:  # a context the router needs and the request lacks
            return self._refusal(exc)
        work = (
            self._stream(name, gw, routed, data, payload)
            if chat.stream
            else self._complete(name, gw, routed, payload)
        )
        # The calls and the booking go on if the client leaves: what was billed is booked.
        # The work's task is scheduled after the router's owner, which commits the decision
        # first (``RouterOwner.submit``): the task finds it done.
        answered: asyncio.Future[_Done] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(_hand_over(work, answered))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        done = await answered
        if done.booking is None:
            return done.response
        # The booking was submitted before ``answered`` was set: it is committed by now.
        refused = await self._booked(done.booking, done.headers)
        return done.response if refused is None else refused

    def _route(self, name: str, chat: ChatRequest) -> asyncio.Future[RoutedDecision]:
        """The query's decision, submitted to the router's owner: the future of the decision,
        done once it is journaled. Its id is one the router mints, ``<router>:<hex digits>``
        (``Router.route(id_prefix=...)``: new by construction, never looked up), by which
        a feedback finds its router."""
        options = chat.msroute
        context = None if options is None else options.context
        if context is None and self.text_context is not None:
            context = self.text_context(name, prompt_text(chat.messages))
        config = self.service.config.routers[name]
        by_text = context is None and config.get("contexts_from") is not None
        if context is None and config.get("contexts") and not by_text:
            raise InvalidFeedbackError(
                f"router {name!r} routes by context: give extra_body={{'msroute': {{'context': "
                f"...}}}} with one of {list(config['contexts'])}"
            )
        eligible = None if options is None else options.eligible
        # The id the router mints is an id a request may carry: a router's name is at most
        # 64 letters, digits, "_", "-" and "." (ROUTER_NAME), and 32 hex digits follow.
        if context is not None or eligible is not None or by_text:
            request = DecisionRequest(
                context=context,
                prompt=prompt_text(chat.messages) if by_text else None,
                eligible=eligible,
                decision_id=None,
            )
            context, eligible, prompt = request.context, request.eligible, request.prompt
        else:
            prompt = None
        prefix = f"{name}:"
        return self.service.submit(
            name,
            lambda r: r.route(context=context, eligible=eligible, prompt=prompt, id_prefix=prefix),
        )

    async def _decided(
        self, name: str, routed: asyncio.Future[RoutedDecision]
    ) -> RoutedDecision | JSONResponse:
        """The journaled decision, counted; or the error to answer when the router refused it."""
        try:
            decision = await routed
        except MSRouteError as exc:
            return self._refusal(exc)
        self.service.decided(name, decision)
        return decision

    async def _team(
        self, name: str, gw: GatewayRouter, routed: asyncio.Future[RoutedDecision]
    ) -> _Team | JSONResponse:
        """The journaled decision's id, team, headers and members' upstreams (``_decided``);
        or the error to answer when the router refused it."""
        decision = await self._decided(name, routed)
        if not isinstance(decision, RoutedDecision):
            return decision
        did, team = decision.decision_id, list(decision.team)
        return _Team(did, team, decision_headers(did, team), [gw.upstreams[e] for e in team])

    def _refusal(self, exc: MSRouteError) -> JSONResponse:
        """A value the router refuses (400), or a journal it cannot write (503)."""
        status = 400 if isinstance(exc, ValueError) else 503
        return openai_error(status, self.service.redact(str(exc)))

    # ------------------------------------------------------------------ whole answers
    async def _complete(
        self,
        name: str,
        gw: GatewayRouter,
        routed: asyncio.Future[RoutedDecision],
        payload: bytes,
    ) -> _Done:
        routed_team = await self._team(name, gw, routed)
        if not isinstance(routed_team, _Team):
            return _Done(routed_team)
        did, team, headers, ups = routed_team
        results = await _settled([self.upstreams.complete(u, payload) for u in ups])
        booking, failure = self._book_calls(name, gw, did, team, results)
        if failure is not None:
            return _Done(_failed(failure, headers), booking, headers)
        answers = [r for r in results if isinstance(r, Answer)]
        if len(answers) == 1:
            return _Done(JSONBytes(answers[0].raw, headers), booking, headers)
        return _Done(
            JSONBytes(json_bytes(_team_answer(name, did, answers)), headers), booking, headers
        )

    def _book_calls(
        self,
        name: str,
        gw: GatewayRouter,
        did: str,
        team: list[str],
        results: Sequence[object],
    ) -> tuple[asyncio.Future[Any], BaseException | None]:
        """Book the dollars of the team's calls (``results``: each member's answer, opened
        stream or exception) on the decision: the booking (``_submit_booking``), and the
        first call's failure, if one failed."""
        usd = sum(self._member_cost(name, e, r) for e, r in zip(team, results, strict=True))
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        return self._submit_booking(name, gw, did, usd, failure is not None), failure

    def _member_cost(self, name: str, expert: str, result: object) -> float:
        """The dollars one member's call is booked at (module docstring), counted in the metrics."""
        booked = self.booked[name][expert]
        upstream = self.routers[name].upstreams[expert]
        if isinstance(result, Answer):
            self.metrics.observe_seconds(name, expert, result.seconds)
            outcome = "ok" if result.usage is not None else "no_usage"
            return self.count(name, upstream, outcome, result.usage, booked)
        if isinstance(result, UpstreamFailure):
            outcome, fallback = ("timeout", booked) if result.timed_out else ("error", 0.0)
            return self.count(name, upstream, outcome, result.usage, fallback)
        return self.count(name, upstream, "error", None, booked)

    def count(
        self, name: str, upstream: Upstream, outcome: str, usage: Usage | None, fallback: float
    ) -> float:
        usd = fallback if usage is None else upstream.prices.usd(usage)
        if usd > COST_MAX:  # a usage no call bills, which no router books: read as none
            _log.warning(
                "router %s: %s reported a usage of $%.6g, above $%g: booked at $%.6g",
                name,
                upstream.expert,
                usd,
                COST_MAX,
                fallback,
            )
            usd, usage = fallback, None
        self.metrics.call(name, upstream.expert, outcome, usd, usage)
        return usd

    def _submit_booking(
        self, name: str, gw: GatewayRouter, did: str, usd: float, failed: bool
    ) -> asyncio.Future[Any]:
        """Book the team's dollars on the decision (a feedback with the configured reward for
        a failed call), submitted now: durable once the future is done. A refusal is logged."""
        booking: asyncio.Future[Any]
        if failed and gw.upstream_error_reward is not None:
            request = FeedbackRequest(reward=gw.upstream_error_reward, cost={USD: usd})
            booking = asyncio.ensure_future(self.service.feedback(name, did, request))
            self.tasks.add(booking)
            booking.add_done_callback(self.tasks.discard)
        else:
            booking = self.service.submit(name, lambda r: r.report_cost(did, {USD: usd}))
        booking.add_done_callback(functools.partial(_log_refusal, name, did, usd))
        return booking

    async def _booked(
        self, booking: asyncio.Future[Any], headers: Mapping[str, str] | None
    ) -> Response | None:
        """Wait until the booking is durable; the error to answer if the journal refused it."""
        try:
            await booking
        except MSRouteError as exc:
            return openai_error(
                503,
                f"the call's cost could not be journaled: {self.service.redact(str(exc))}",
                headers=headers,
            )
        return None

    async def book(self, name: str, gw: GatewayRouter, did: str, usd: float, failed: bool) -> None:
        """Book the team's dollars on the decision and wait until that is durable (a refusal
        is logged)."""
        with contextlib.suppress(MSRouteError):
            await self._submit_booking(name, gw, did, usd, failed)

    # ------------------------------------------------------------------ streams
    async def _stream(
        self,
        name: str,
        gw: GatewayRouter,
        routed: asyncio.Future[RoutedDecision],
        body: Mapping[str, Any],
        payload: bytes,
    ) -> _Done:
        routed_team = await self._team(name, gw, routed)
        if not isinstance(routed_team, _Team):
            return _Done(routed_team)
        did, team, headers, ups = routed_team
        opened = await _settled([self.upstreams.stream(u, payload) for u in ups])
        if any(isinstance(r, BaseException) for r in opened):
            for r in opened:
                if isinstance(r, Stream):
                    await r.close()
            booking, failure = self._book_calls(name, gw, did, team, opened)
            assert failure is not None  # a call failed
            return _Done(_failed(failure, headers), booking, headers)
        streams = [r for r in opened if isinstance(r, Stream)]
        options = body.get("stream_options")
        wants_usage = isinstance(options, Mapping) and options.get("include_usage") is True
        n = body.get("n")
        per_member = n if isinstance(n, int) and n > 1 else 1
        relay = _Relay(self, name, gw, did, streams, wants_usage, per_member)
        response = StreamingResponse(
            relay.events(), media_type="text/event-stream", headers=headers
        )
        return _Done(response)


class _Team(NamedTuple):
    """A decision's id, its team (ids in draw order), its response headers and its
    upstreams."""

    did: str
    team: list[str]
    headers: dict[str, str]
    ups: list[Upstream]


class _Done(NamedTuple):
    """What a call's work hands its request: the response, and the booking that must be
    durable before it is sent (None: nothing to wait for) with the decision's headers."""

    response: Response
    booking: asyncio.Future[Any] | None = None
    headers: Mapping[str, str] | None = None


def _failed(failure: BaseException, headers: Mapping[str, str]) -> JSONResponse:
    """The error answering an upstream's failure; an exception that is not one (a bug) is
    raised (its call was booked: the server logs it)."""
    if not isinstance(failure, UpstreamFailure):
        raise failure
    return openai_error(failure.status, failure.message, headers=headers)


def _log_refusal(name: str, did: str, usd: float, booking: asyncio.Future[Any]) -> None:
    """Log a booking the router refused (a done callback: whether or not a request is left
    to answer)."""
    if booking.cancelled():
        return
    exc = booking.exception()
    if isinstance(exc, MSRouteError):
        _log.error("router %s: cannot book decision %s at $%.6g: %s", name, did, usd, exc)
    elif exc is not None:
        _log.error("router %s: booking decision %s failed", name, did, exc_info=exc)


class _Relay:
    """The server-sent events of a streamed answer, and its booking when it ends."""

    def __init__(
        self,
        handler: ChatHandler,
        name: str,
        gw: GatewayRouter,
        did: str,
        streams: list[Stream],
        wants_usage: bool,
        n: int,
    ) -> None:
        self.handler, self.name, self.gw, self.did = handler, name, gw, did
        self.streams, self.wants_usage, self.n = streams, wants_usage, n
        self.failure: UpstreamFailure | None = None
        self.finished = [False] * len(streams)

    async def events(self) -> AsyncIterator[bytes]:
        try:
            source = self._one() if len(self.streams) == 1 else self._merged()
            async for event in source:
                yield b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
            if self.failure is None:
                if self.wants_usage and len(self.streams) > 1:
                    yield b"data: " + json.dumps(self._usage_chunk()).encode() + b"\n\n"
                yield b"data: [DONE]\n\n"
            else:
                error = {"error": {"message": self.failure.message, "type": "upstream_error"}}
                yield b"data: " + json.dumps(error).encode() + b"\n\n"
        finally:
            # Booked in a task of its own: this generator may be closed by a client that left.
            task = asyncio.ensure_future(self._settle())
            self.handler.tasks.add(task)
            task.add_done_callback(self.handler.tasks.discard)

    async def _one(self) -> AsyncIterator[dict[str, Any]]:
        stream = self.streams[0]
        try:
            async for event in stream.events():
                if event is None:
                    self.finished[0] = True
                    return
                if event.get("choices") == [] and event.get("usage") and not self.wants_usage:
                    continue  # the usage chunk the gateway asked for, not the client
                yield event
            self.finished[0] = True
        except UpstreamFailure as exc:
            self.failure = exc

    async def _merged(self) -> AsyncIterator[dict[str, Any]]:
        queue: asyncio.Queue[tuple[int, dict[str, Any] | UpstreamFailure | None]] = asyncio.Queue()

        async def pump(i: int, stream: Stream) -> None:
            try:
                async for event in stream.events():
                    await queue.put((i, event))
                    if event is None:
                        return
                await queue.put((i, None))
            except UpstreamFailure as exc:
                await queue.put((i, exc))

        pumps = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(self.streams)]
        try:
            left = len(self.streams)
            while left:
                i, event = await queue.get()
                if isinstance(event, UpstreamFailure):
                    self.failure = event
                    return
                if event is None:
                    self.finished[i] = True
                    left -= 1
                    continue
                choices = event.get("choices")
                if not choices:
                    continue  # a member's usage chunk: the team's comes at the end
                for choice in choices:  # objects with integer indices (Stream.events)
                    choice["index"] = i * self.n + choice.get("index", 0)
                    choice["msroute_expert"] = self.streams[i].expert
                yield event
        finally:
            for pump_task in pumps:
                pump_task.cancel()

    def _usage_chunk(self) -> dict[str, Any]:
        total = Usage(0, 0)
        for stream in self.streams:
            if stream.usage is not None:
                total = total + stream.usage
        return {
            "id": self.did,
            "object": "chat.completion.chunk",
            "model": MODEL_PREFIX + self.name,
            "choices": [],
            "usage": total.to_openai(),
        }

    async def _settle(self) -> None:
        """Close the streams, then book each member: its usage, else (a stream cut short,
        or one that reported none) its configured cost."""
        for stream in self.streams:
            await stream.close()
        usd = 0.0
        for done, stream in zip(self.finished, self.streams, strict=True):
            upstream = self.gw.upstreams[stream.expert]
            booked = self.handler.booked[self.name][stream.expert]
            if stream.usage is not None:
                outcome = "ok" if done else "error"
            else:
                outcome = "no_usage" if done else "error"
            usd += self.handler.count(self.name, upstream, outcome, stream.usage, booked)
        await self.handler.book(self.name, self.gw, self.did, usd, self.failure is not None)


async def _hand_over(work: Awaitable[T], answered: asyncio.Future[T]) -> None:
    """Await ``work`` (in a task of its own) and hand its result or error to ``answered``,
    which the request awaits: a request cancelled (a server's shutdown) cancels that future
    only, never the work, as ``asyncio.shield`` would, and the answer reaches the request
    without the extra turn of the event loop the shield's callbacks take. An error no request
    is left to answer is logged."""
    try:
        result = await work
    except asyncio.CancelledError:
        answered.cancel()
        raise
    except Exception as exc:
        if not answered.done():
            answered.set_exception(exc)
        else:
            _log.error("a call whose request went away failed", exc_info=exc)
    else:
        if not answered.done():
            answered.set_result(result)


async def _settled(calls: list[Coroutine[Any, Any, T]]) -> list[T | BaseException]:
    """Each call's result or exception, as ``asyncio.gather(..., return_exceptions=True)``
    gives them; a lone call (a team of one) is awaited in this task rather than in one of its
    own, which under load waited its turn on the event loop twice."""
    if len(calls) == 1:
        try:
            return [await calls[0]]
        except Exception as exc:
            return [exc]
    return await asyncio.gather(*calls, return_exceptions=True)


def _team_answer(name: str, did: str, answers: list[Answer]) -> dict[str, Any]:
    """One chat completion with each member's choices, in draw order, and the team's usage."""
    choices: list[dict[str, Any]] = []
    total = Usage(0, 0)
    for answer in answers:
        for choice in answer.body.get("choices", []):
            if isinstance(choice, dict):
                choices.append({**choice, "index": len(choices), "msroute_expert": answer.expert})
        if answer.usage is not None:
            total = total + answer.usage
    created = next((a.body.get("created") for a in answers if "created" in a.body), 0)
    return {
        "id": did,
        "object": "chat.completion",
        "created": created,
        "model": MODEL_PREFIX + name,
        "choices": choices,
        "usage": total.to_openai(),
    }


def _invalid(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        return "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg', '')}"
            for e in errors
        )
    return f"body: not valid JSON ({exc})"
