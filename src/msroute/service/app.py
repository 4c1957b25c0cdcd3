"""The FastAPI application: ``create_app`` builds one app over the routers of a config.

There is no module-level app: each call builds a fresh one with its own metrics registry, and
its lifespan opens every router's journal (recovering its state) on start and closes them on
shutdown. Every router call goes through the router's ``RouterOwner``, which serializes
calls and acknowledges each only after the journal transaction holding it has committed.

The endpoints are declared here, with their schemas, examples and every status they answer
(the OpenAPI document; a test checks each answer of the service tests against it). The two hot
ones are served in the ordinary case by ``FastPath``, in front of FastAPI, with the same models,
the same route objects and the same operations; FastAPI serves them in every other case (and
answers their errors).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.params import Depends as DependsParam
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp

from msroute._version import __version__
from msroute.errors import JournalError
from msroute.router import Router
from msroute.service.auth import BearerToken
from msroute.service.config import ServiceConfig
from msroute.service.fastpath import DECISIONS, FEEDBACK, FastPath, RawHandler
from msroute.service.middleware import BodyLimit, RequestTimer
from msroute.service.models import (
    ID_PATTERN,
    Bounds,
    BoundsRequest,
    CostRequest,
    CostResponse,
    DecisionRequest,
    DecisionResponse,
    ExpertCost,
    ExpertCostRequest,
    ExpertRequest,
    ExpertResponse,
    FeedbackRequest,
    FeedbackResponse,
    Health,
    Problem,
    RouterList,
    RouterSummary,
)
from msroute.service.problems import PROBLEM_JSON, install_problem_handlers, problem_response
from msroute.service.routers import ServedRouters
from msroute.service.transport import ReadDeadline

__all__ = ["AppExtension", "create_app"]

F = TypeVar("F", bound=Callable[..., Any])

NDJSON = "application/x-ndjson"
RouterName = Annotated[str, PathParam(description="A router of the service config.")]
IdParam = Annotated[str, PathParam(pattern=ID_PATTERN)]
#: The largest sequence number a journal can hold (SQLite's INTEGER).
MAX_SEQ = 2**63 - 1

#: The statuses every endpoint with a JSON body can answer besides its own: 400 (not JSON, or
#: nested too deeply), 413 (too long), 415 (not sent as JSON), 422 (does not match the schema).
BODY_ERRORS = (400, 413, 415, 422)


class AppExtension(Protocol):
    """More endpoints on the service's app (``msroute gateway``'s), behind the same auth,
    limits and metrics, started after the routers and stopped before them."""

    def install(
        self, app: FastAPI, auth: DependsParam, service: ServedRouters
    ) -> Mapping[str, RawHandler]:
        """Declare the extension's routes on ``app`` (``auth``: the token dependency); return
        the paths of its hot ``POST`` routes, each with the function its route answers with,
        which ``FastPath`` calls itself in the ordinary case."""

    async def start(self, service: ServedRouters) -> None:
        """Start what the routes need, once the routers are open."""

    async def stop(self) -> None:
        """Stop it, before the routers close."""


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": Problem, "content": {PROBLEM_JSON: {}}} for s in statuses}


class _Protected:
    """``app.get``/``post``/``delete`` with the auth dependency and its 401 documented."""

    def __init__(self, app: FastAPI, auth: DependsParam) -> None:
        self.app = app
        self.auth = auth

    def _kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        responses = {**_problems(401), **kwargs.pop("responses", {})}
        return {"dependencies": [self.auth], "responses": responses, **kwargs}

    def get(self, path: str, **kwargs: Any) -> Callable[[F], F]:
        return self.app.get(path, **self._kwargs(kwargs))

    def post(self, path: str, **kwargs: Any) -> Callable[[F], F]:
        return self.app.post(path, **self._kwargs(kwargs))

    def delete(self, path: str, **kwargs: Any) -> Callable[[F], F]:
        return self.app.delete(path, **self._kwargs(kwargs))

    def patch(self, path: str, **kwargs: Any) -> Callable[[F], F]:
        return self.app.patch(path, **self._kwargs(kwargs))


def create_app(
    config: ServiceConfig,
    *,
    token: str | None,
    routers: ServedRouters | None = None,
    extension: AppExtension | None = None,
) -> ASGIApp:
    """Build the HTTP app serving the routers of ``config``.

    Parameters
    ----------
    config : ServiceConfig
        The routers (with their journals) and the HTTP limits.
    token : str or None
        Every endpoint but ``/healthz`` requires ``Authorization: Bearer <token>``; ``None``
        disables authentication (see ``msroute.service.auth.check_start`` for when that is
        allowed).
    routers : ServedRouters, optional
        The routers of ``config``, already started (``msroute.service.serve`` opens them
        before it binds a port, so that a router that cannot open is an error on the command
        line); by default the app's lifespan starts them.
    extension : AppExtension, optional
        More endpoints, installed after the service's own (``msroute gateway``).

    Returns
    -------
    ASGI app
        The FastAPI app behind the fast path of the two hot endpoints
        (``FastPath``), the body limit, the request timer and the read deadline's hook
        (``msroute.service.transport.ReadDeadline``).
        Its lifespan opens the journals on start (unless ``routers`` are already started) and
        closes them on shutdown.
    """
    service = ServedRouters(config) if routers is None else routers
    auth = BearerToken(token)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            if not service.started:
                await service.start()
            if extension is None:
                yield
            else:
                await extension.start(service)
                try:
                    yield
                finally:
                    await extension.stop()
        finally:
            await service.stop()

    app = FastAPI(
        title="msroute",
        summary="Multinomial Subset Routing as a service: route each query to a team of experts "
        "under long-term cost constraints, learn from delayed feedback.",
        version=__version__,
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    install_problem_handlers(app, service.redact)
    # The two hot endpoints return their JSON directly: the response models document them (and
    # the schema tests check the answers against them) without a second validation per request.
    # Every route but /healthz carries the token dependency.
    api = _Protected(app, Depends(auth))

    @app.get("/healthz", response_model=Health, tags=["operations"], responses=_problems(503))
    async def healthz() -> Response:
        """Health probe; needs no token. 503 while a router cannot write its journal (a full
        disk, an I/O error): the problem's ``routers`` names each such router and why (its
        journal named by the router, never by its path). A router that failed is checked
        first (one small write between groups, or a reopen), so a router whose disk recovered
        is healthy again without waiting for traffic; probes share one check, at most one a
        second per router (``RouterOwner.recover``)."""
        for owner in service.owners.values():
            if not owner.writable:
                await owner.recover()
        failing = service.failures()
        if failing:
            detail = "; ".join(f"router {n}: {why}" for n, why in failing.items())
            return problem_response(
                503, f"cannot write the journal: {detail}", extra={"routers": failing}
            )
        return JSONResponse({"status": "ok"})

    @api.get("/openapi.json", include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @api.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        responses={
            200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}},
            **_problems(503),
        },
    )
    async def metrics() -> Response:
        """Prometheus metrics (text exposition format). A router that cannot write its journal
        hides no other router's metrics: ``msroute_journal_writable`` is 0 for it and its state
        gauges keep the values last read (503 only while the service shuts down)."""
        for name, owner in service.owners.items():
            try:
                state = await owner.call(lambda r: r.state())
            except JournalError:
                pass  # the gauges keep the last values; msroute_journal_writable says why
            else:
                service.metrics.set_state(name, state, owner.groups, owner.calls)
            service.metrics.writable.labels(name).set(owner.writable)
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @api.get("/v1/routers", response_model=RouterList, tags=["routers"])
    async def list_routers() -> dict[str, list[str]]:
        """The names of the routers this process serves."""
        return {"routers": sorted(service.owners)}

    @api.get(
        "/v1/routers/{name}",
        response_model=RouterSummary,
        response_model_exclude_unset=True,
        tags=["routers"],
        responses=_problems(404, 503),
    )
    async def router_state(name: RouterName) -> dict[str, Any]:
        """The router's state: counts, time-averaged cost, bounds, routing distribution."""
        return await service.call(name, lambda r: r.state())

    @api.patch(
        "/v1/routers/{name}",
        response_model=Bounds,
        tags=["routers"],
        responses=_problems(*BODY_ERRORS, 404, 409, 503),
    )
    async def set_bounds(name: RouterName, body: BoundsRequest) -> dict[str, dict[str, float]]:
        """Change the router's bounds at runtime; 409 if no routing of its experts meets them
        (nothing changes). Answers the bounds now enforced. Journaled: a restart keeps them,
        unless the config file was edited to change the same bound since it was applied
        (the file's later edit wins)."""

        def apply(r: Router) -> dict[str, dict[str, float]]:
            r.set_bounds(upper=body.upper, lower=body.lower)
            return {"upper": dict(r.config.upper), "lower": dict(r.config.lower)}

        return await service.call(name, apply)

    @api.post(
        DECISIONS,
        status_code=201,
        response_model=DecisionResponse,
        tags=["decisions"],
        responses=_problems(*BODY_ERRORS, 404, 409, 503),
    )
    async def decide(name: RouterName, body: DecisionRequest) -> JSONResponse:
        """Route one query: the team to send it to (durably journaled before the answer)."""
        return JSONResponse(await service.decide(name, body), status_code=201)

    @api.post(
        FEEDBACK,
        response_model=FeedbackResponse,
        tags=["decisions"],
        responses=_problems(*BODY_ERRORS, 404, 409, 503),
    )
    async def feedback(
        name: RouterName, decision_id: IdParam, body: FeedbackRequest
    ) -> JSONResponse:
        """Report the outcome of a decision (durably journaled before the answer).

        A repeat of an answered feedback is validated like the first and answered
        ``duplicate``; a repeat with another reward or cost is 409 (nothing changes)."""
        return JSONResponse({"status": await service.feedback(name, decision_id, body)})

    @api.post(
        "/v1/routers/{name}/decisions/{decision_id}/cost",
        response_model=CostResponse,
        tags=["decisions"],
        responses=_problems(*BODY_ERRORS, 404, 503),
    )
    async def report_cost(name: RouterName, decision_id: IdParam, body: CostRequest) -> Any:
        """Book a decision's realized cost before its reward (the tokens an LLM call billed,
        ``Router.report_cost``; journaled before the answer): ``applied`` (it replaces the
        decision's cost in the averages and the spend at once), ``late`` (the decision had
        closed: counted, not learned) or ``unchanged`` (it already costs that: nothing is
        written). What the LiteLLM cost callback sends, to ``msroute serve`` as to
        ``msroute gateway``."""
        cost = dict(body.cost)
        return {"status": await service.call(name, lambda r: r.report_cost(decision_id, cost))}

    @api.get(
        "/v1/routers/{name}/decisions",
        tags=["decisions"],
        response_class=Response,
        responses={
            200: {
                "description": "Journal rows, one JSON object per line, in sequence order.",
                "content": {NDJSON: {"schema": {"type": "string"}}},
            },
            **_problems(404, 422, 503),
        },
    )
    async def journal_rows(
        name: RouterName,
        since: Annotated[
            int, Query(ge=0, le=MAX_SEQ, description="Rows after this sequence number.")
        ] = 0,
        limit: int = Query(
            min(1000, config.max_rows),
            ge=1,
            le=config.max_rows,
            description="At most this many rows.",
        ),
    ) -> Response:
        """Journal rows as JSON lines, in sequence order, in the API's names (the rows of
        ``msroute journal export``; their fields are on the HTTP API page), for off-policy
        evaluation (``msroute.evaluate`` takes them) and audits."""
        rows = await service.call(name, lambda r: r.export_rows(since, limit))
        text = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)
        return Response(text, media_type=NDJSON)

    @api.post(
        "/v1/routers/{name}/experts",
        status_code=201,
        response_model=ExpertResponse,
        tags=["experts"],
        responses=_problems(*BODY_ERRORS, 404, 409, 503),
    )
    async def add_expert(name: RouterName, body: ExpertRequest) -> dict[str, list[str]]:
        """Add an expert; 409 if the constraints would become infeasible (nothing changes).
        Journaled: a restart keeps it (a config file that lists the id later prices it)."""

        def apply(r: Router) -> list[str]:
            r.add_expert(body.id, dict(body.cost))
            return list(r.expert_ids)

        return {"experts": await service.call(name, apply)}

    @api.delete(
        "/v1/routers/{name}/experts/{expert_id}",
        response_model=ExpertResponse,
        tags=["experts"],
        responses=_problems(404, 409, 422, 503),
    )
    async def remove_expert(name: RouterName, expert_id: IdParam) -> dict[str, list[str]]:
        """Remove an expert; 409 if the constraints would become infeasible (nothing changes).
        Journaled: a restart keeps it removed (its id is never reused)."""

        def apply(r: Router) -> list[str]:
            r.remove_expert(expert_id)
            return list(r.expert_ids)

        return {"experts": await service.call(name, apply)}

    @api.patch(
        "/v1/routers/{name}/experts/{expert_id}",
        response_model=ExpertCost,
        tags=["experts"],
        responses=_problems(*BODY_ERRORS, 404, 409, 503),
    )
    async def set_expert_cost(
        name: RouterName, expert_id: IdParam, body: ExpertCostRequest
    ) -> dict[str, Any]:
        """Change an expert's price (its cost, by cost name; costs not named keep theirs) from
        the next decision on; 409 if no routing meets the bounds at the new price (nothing
        changes). The policy keeps what it learned about the expert; decisions already routed
        keep their cost. Journaled: a restart keeps it, unless the config file was edited to
        change the same expert's cost since it was applied (the file's later edit wins)."""

        def apply(r: Router) -> dict[str, float]:
            return r.set_expert_cost(expert_id, dict(body.cost))

        return {"id": expert_id, "cost": await service.call(name, apply)}

    raw = {} if extension is None else extension.install(app, Depends(auth), service)

    # Outside FastAPI's own layers, so that the requests the fast path answers are capped and
    # timed too. The fast path recognizes its requests by these routes' own matching.
    hot = FastPath(
        app,
        service,
        auth,
        decide=_route(app, DECISIONS),
        feedback=_route(app, FEEDBACK),
        raw=[(_route(app, path), handler) for path, handler in raw.items()],
    )
    timed = RequestTimer(BodyLimit(hot, config.max_body_bytes), service.metrics.latency)
    return ReadDeadline(timed)


def _route(app: FastAPI, path: str) -> APIRoute:
    """The app's ``POST`` route of ``path``."""
    return next(
        r
        for r in app.routes
        if isinstance(r, APIRoute) and r.path == path and "POST" in (r.methods or ())
    )
