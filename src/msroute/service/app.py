"""The FastAPI application: :func:`create_app` builds one app over the routers of a config.

There is no module-level app: each call builds a fresh one with its own metrics registry, and
its lifespan opens every router's journal (recovering its state) on start and closes them on
shutdown. Every router call goes through the router's :class:`RouterOwner`, which serializes
calls and acknowledges each only after the journal transaction holding it has committed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import Depends, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.params import Depends as DependsParam
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from msroute._version import __version__
from msroute.errors import UnknownRouterError
from msroute.router import Router
from msroute.service.auth import BearerToken
from msroute.service.config import ServiceConfig
from msroute.service.metrics import DelayClock, ServiceMetrics
from msroute.service.middleware import BodyLimit, RequestTimer
from msroute.service.models import (
    DecisionRequest,
    DecisionResponse,
    ExpertRequest,
    ExpertResponse,
    FeedbackRequest,
    FeedbackResponse,
    Health,
    Problem,
    RouterList,
)
from msroute.service.owner import RouterOwner
from msroute.service.problems import PROBLEM_JSON, install_problem_handlers

__all__ = ["create_app", "open_router"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
_log = logging.getLogger("msroute.service")

NDJSON = "application/x-ndjson"
RouterName = Annotated[str, PathParam(description="A router of the service config.")]
IdParam = Annotated[str, PathParam(pattern=r"^[A-Za-z0-9_.:@-]{1,128}$")]
#: Seconds a decision's time is kept to measure its feedback delay.
_DELAY_HORIZON_S = 86400.0


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": Problem, "content": {PROBLEM_JSON: {}}} for s in statuses}


def open_router(config: dict[str, Any]) -> Router:
    """Recover the router from its journal if the file exists, else create it from ``config``."""
    journal = Path(config["journal"])
    if journal.exists():
        return Router.open(journal)
    journal.parent.mkdir(parents=True, exist_ok=True)
    return Router.from_config(config)


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


class _Service:
    """What the endpoints share: the owners of the routers, the metrics, the delay clocks."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.owners: dict[str, RouterOwner] = {}
        self.clocks: dict[str, DelayClock] = {}

    def owner(self, name: str) -> RouterOwner:
        try:
            return self.owners[name]
        except KeyError:
            raise UnknownRouterError(
                f"router {name!r} is not served here; known: {', '.join(sorted(self.owners))}"
            ) from None

    async def call(self, name: str, fn: Callable[[Router], T]) -> T:
        return await self.owner(name).call(fn)

    async def start(self) -> None:
        for name, cfg in self.config.routers.items():
            existed = Path(cfg["journal"]).exists()
            owner = RouterOwner(name, partial(open_router, dict(cfg)))
            router = await owner.start()
            self.owners[name] = owner
            self.clocks[name] = DelayClock(_DELAY_HORIZON_S)
            state = await owner.call(lambda r: r.state())
            _log.info(
                "router %s: %s journal %s; %d experts, %d decisions, %d pending, policy version %d",
                name,
                "recovered from" if existed else "created",
                cfg["journal"],
                len(router.expert_ids),
                state["decisions"],
                state["pending"],
                state["policy_version"],
            )

    async def stop(self) -> None:
        for name, owner in list(self.owners.items()):
            await owner.stop()
            _log.info("router %s: journal closed", name)
        self.owners.clear()


def create_app(config: ServiceConfig, *, token: str | None) -> FastAPI:
    """Build the HTTP app serving the routers of ``config``.

    Parameters
    ----------
    config : ServiceConfig
        The routers (with their journals) and the HTTP limits.
    token : str or None
        Every endpoint but ``/healthz`` requires ``Authorization: Bearer <token>``; ``None``
        disables authentication (see :func:`msroute.service.auth.check_start` for when that is
        allowed).

    Returns
    -------
    FastAPI
        The app; its lifespan opens the journals on start and closes them on shutdown.
    """
    service = _Service(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await service.start()
            yield
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
    app.state.service = service
    install_problem_handlers(app)
    # The two hot endpoints return their JSON directly: the response models document them (and
    # the schema tests check the answers against them) without a second validation per request.
    # Routes are registered on the app itself (an included APIRouter costs a second dispatch
    # per request); every route but /healthz carries the token dependency.
    api = _Protected(app, Depends(BearerToken(token)))

    @app.get("/healthz", response_model=Health, tags=["operations"])
    async def healthz() -> dict[str, str]:
        """Liveness probe; needs no token."""
        return {"status": "ok"}

    @api.get("/openapi.json", include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @api.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        """Prometheus metrics (text exposition format)."""
        for name, owner in service.owners.items():
            state = await owner.call(lambda r: r.state())
            service.metrics.set_state(name, state, owner.groups, owner.calls)
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @api.get("/v1/routers", response_model=RouterList, tags=["routers"])
    async def list_routers() -> dict[str, list[str]]:
        """The names of the routers this process serves."""
        return {"routers": sorted(service.owners)}

    @api.get("/v1/routers/{name}", tags=["routers"], responses=_problems(404))
    async def router_state(name: RouterName) -> dict[str, Any]:
        """The router's state: counts, time-averaged cost, bounds, routing distribution."""
        return await service.call(name, lambda r: r.state())

    @api.post(
        "/v1/routers/{name}/decisions",
        status_code=201,
        response_model=DecisionResponse,
        tags=["decisions"],
        responses=_problems(404, 422, 413, 503),
    )
    async def decide(name: RouterName, body: DecisionRequest) -> JSONResponse:
        """Route one query: the team to send it to (durably journaled before the answer)."""
        decision = await service.call(
            name,
            lambda r: r.route(
                context=body.context, eligible=body.eligible, decision_id=body.decision_id
            ),
        )
        service.metrics.hot(name).decisions.inc()
        service.clocks[name].start(decision.decision_id)
        return JSONResponse(decision.to_dict(), status_code=201)

    @api.post(
        "/v1/routers/{name}/decisions/{decision_id}/feedback",
        response_model=FeedbackResponse,
        tags=["decisions"],
        responses=_problems(404, 422, 413, 503),
    )
    async def feedback(
        name: RouterName, decision_id: IdParam, body: FeedbackRequest
    ) -> JSONResponse:
        """Report the outcome of a decision (durably journaled before the answer)."""
        status = await service.call(
            name, lambda r: r.feedback(decision_id, body.reward, cost=body.cost)
        )
        hot = service.metrics.hot(name)
        hot.feedback[status].inc()
        if status != "duplicate":
            delay = service.clocks[name].stop(decision_id)
            if delay is not None:
                hot.feedback_delay.observe(delay)
        return JSONResponse({"status": status})

    @api.get(
        "/v1/routers/{name}/decisions",
        tags=["decisions"],
        response_class=Response,
        responses={
            200: {
                "description": "Journal rows, one JSON object per line, in sequence order.",
                "content": {NDJSON: {"schema": {"type": "string"}}},
            },
            **_problems(404, 422),
        },
    )
    async def journal_rows(
        name: RouterName,
        since: Annotated[int, Query(ge=0, description="Rows after this sequence number.")] = 0,
        limit: int = Query(
            min(1000, config.max_rows),
            ge=1,
            le=config.max_rows,
            description="At most this many rows.",
        ),
    ) -> Response:
        """Journal rows as JSON lines (decisions, feedback), for off-policy evaluation, audits."""
        rows = await service.call(name, lambda r: r.decisions_since(since, limit))
        text = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)
        return Response(text, media_type=NDJSON)

    @api.post(
        "/v1/routers/{name}/experts",
        status_code=201,
        response_model=ExpertResponse,
        tags=["experts"],
        responses=_problems(404, 409, 422, 413, 503),
    )
    async def add_expert(name: RouterName, body: ExpertRequest) -> dict[str, list[str]]:
        """Add an expert; 409 if the constraints would become infeasible (nothing changes)."""

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
        """Remove an expert; 409 if the constraints would become infeasible (nothing changes)."""

        def apply(r: Router) -> list[str]:
            r.remove_expert(expert_id)
            return list(r.expert_ids)

        return {"experts": await service.call(name, apply)}

    app.add_middleware(RequestTimer, histogram=service.metrics.latency)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    return app
