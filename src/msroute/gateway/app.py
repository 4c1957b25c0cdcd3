"""The gateway: ``msroute serve``'s app (same auth, limits, metrics, journals) plus its endpoints.

``Gateway`` is the service's ``AppExtension``: it declares

- ``POST /v1/chat/completions`` (``msroute.gateway.chat``) and ``GET /v1/models``;
- ``POST /v1/feedback {decision_id, reward}`` and Langfuse's ``POST /api/public/scores
  {traceId, name, value}``: a gateway decision's id names its router (``<router>:<hex>``);
- ``GET /v1/routers/{name}/budget``: a budget's period, dollars spent in it and the per-query
  bound it gives;

and runs each budgeted router's ``BudgetPlan`` (``msroute.gateway.budget``), looking at its
counts every ``TICK_S`` seconds and setting its bound when due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi import Path as PathParam
from fastapi.params import Depends as DependsParam
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp

from msroute.errors import (
    InfeasibleConstraintsError,
    InvalidFeedbackError,
    MSRouteError,
    UnknownDecisionError,
)
from msroute.gateway.budget import TICK_S, BudgetPlan
from msroute.gateway.chat import MODEL_PREFIX, ChatHandler, TextContext
from msroute.gateway.config import USD, GatewayConfig, GatewayRouter
from msroute.gateway.metrics import GatewayMetrics
from msroute.gateway.models import ChatRequest, GatewayFeedback, Score
from msroute.gateway.upstream import Upstreams
from msroute.service.app import create_app
from msroute.service.fastpath import RawHandler
from msroute.service.models import FeedbackRequest, FeedbackResponse, Problem
from msroute.service.problems import PROBLEM_JSON
from msroute.service.routers import ServedRouters

__all__ = ["Gateway", "create_gateway_app"]

_log = logging.getLogger("msroute.gateway")
RouterName = Annotated[str, PathParam(description="A router of the gateway config.")]
_BODY_ERRORS = (400, 413, 415, 422)


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": Problem, "content": {PROBLEM_JSON: {}}} for s in (401, *statuses)}


class Gateway:
    """The gateway's endpoints and budgets on a service app (``create_gateway_app``).

    Parameters
    ----------
    config : GatewayConfig
    text_context : callable, optional
        ``(router, prompt text) -> context name or None``: the context of a request that
        gives none, for routers with contexts (a text featurizer). Without it (or when it
        gives None) a router with ``contexts_from`` is given the prompt's text, which its own
        context model assigns (``msroute.router.text``).
    environ : mapping, optional
        Where the upstreams' keys are read at start (default: the process's environment).
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        text_context: TextContext | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.text_context = text_context
        self.environ = os.environ if environ is None else environ
        self.plans: dict[str, BudgetPlan] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._handler: ChatHandler | None = None
        self._upstreams: Upstreams | None = None

    # ------------------------------------------------------------------ AppExtension
    def install(
        self, app: FastAPI, auth: DependsParam, service: ServedRouters
    ) -> dict[str, RawHandler]:
        """Declare the gateway's routes on the service's app; chat completions is hot (the
        service's fast path answers it in the ordinary case, with the same function)."""
        guarded = [auth]
        self._metrics = GatewayMetrics(service.metrics.registry)

        @app.post(
            "/v1/chat/completions",
            tags=["gateway"],
            dependencies=guarded,
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ChatRequest.model_json_schema()}},
                }
            },
            responses={
                200: {"description": "The OpenAI chat completion (or its server-sent events)."},
                **_problems(),
                **{s: {"description": "An error in the OpenAI format."} for s in (400, 404)},
                502: {"description": "An upstream failed (OpenAI error format)."},
                503: {"description": "The journal cannot be written (OpenAI error format)."},
                504: {"description": "An upstream timed out (OpenAI error format)."},
            },
        )
        async def chat_completions(request: Request) -> Response:
            """An OpenAI chat completion whose model ``msroute/<router>`` picks the router:
            the team's answer, its decision id and team in ``x-msroute-decision-id`` and
            ``x-msroute-team``; each upstream's usage times its prices booked on the decision."""
            return await self._chat(await request.body())

        @app.get("/v1/models", tags=["gateway"], dependencies=guarded, responses=_problems())
        async def models() -> dict[str, Any]:
            """The routers as OpenAI models, ``msroute/<router>``."""
            data = [
                {"id": MODEL_PREFIX + n, "object": "model", "created": 0, "owned_by": "msroute"}
                for n, gw in sorted(self.config.routers.items())
                if gw.upstreams
            ]
            return {"object": "list", "data": data}

        @app.post(
            "/v1/feedback",
            response_model=FeedbackResponse,
            tags=["gateway"],
            dependencies=guarded,
            responses=_problems(*_BODY_ERRORS, 404, 409, 503),
        )
        async def feedback(body: GatewayFeedback) -> JSONResponse:
            """The reward of a gateway decision (its id names its router)."""
            status = await self._feedback(service, body.decision_id, body.reward, body.cost)
            return JSONResponse({"status": status})

        @app.post(
            "/api/public/scores",
            tags=["gateway"],
            dependencies=guarded,
            responses=_problems(*_BODY_ERRORS, 404, 409, 503),
        )
        async def scores(body: Score) -> JSONResponse:
            """Langfuse's score body: ``traceId`` is the decision id, ``value`` the reward
            (scores of another ``name`` than the router's ``score_name`` are ignored)."""
            name = self._router_of(body.traceId)
            wanted = self.config.routers[name].score_name
            if wanted is not None and body.name != wanted:
                return JSONResponse({"id": body.traceId, "status": "ignored"})
            if isinstance(body.value, str):
                raise InvalidFeedbackError(
                    f"value: score {body.name!r} is the reward of router {name!r}: it must be a "
                    "number (a NUMERIC or BOOLEAN score), not a categorical one's text"
                )
            status = await self._feedback(service, body.traceId, body.value, None)
            return JSONResponse({"id": body.traceId, "status": status})

        @app.get(
            "/v1/routers/{name}/budget",
            tags=["gateway"],
            dependencies=guarded,
            responses=_problems(404),
        )
        async def budget(name: RouterName) -> dict[str, Any]:
            """A budgeted router's periods (dollars, spent so far, expected queries), its
            per-query bound, and the router's dollars spent since it started."""
            service.owner(name)  # 404 for a router not served
            plan = self.plans.get(name)
            state = await service.call(name, lambda r: r.state())
            return {
                "spent_usd": state["spent"].get(USD),
                "bound_usd": state["bounds"]["upper"].get(USD),
                "budget": None if plan is None else plan.report,
            }

        return {"/v1/chat/completions": self._chat}

    async def _chat(self, body: bytes) -> Response:
        handler = self._handler
        assert handler is not None  # started with the app
        return await handler.answer(body)

    async def start(self, service: ServedRouters) -> None:
        """Open the upstreams' client, and start each budget's plan (its first bound now)."""
        keys = {
            u.api_key_env: self.environ.get(u.api_key_env, "")
            for gw in self.config.routers.values()
            for u in gw.upstreams.values()
            if u.api_key_env is not None
        }
        self._upstreams = Upstreams(keys)
        self._handler = ChatHandler(
            service, self.config.routers, self._upstreams, self._metrics, self.text_context
        )
        for name, gw in self.config.routers.items():
            if gw.budget is None:
                continue
            floor = min(self._handler.booked[name].values())
            # Just above the cheapest expert: below it no routing meets the bound.
            plan = BudgetPlan(gw.budget, gw.usd_bound, floor * (1 + 1e-6) + 1e-12, _plan_path(gw))
            self.plans[name] = plan
            await self._tick(service, name, plan)
            self._tasks.append(asyncio.ensure_future(self._run_plan(service, name, plan)))

    async def stop(self) -> None:
        """Stop the budgets, finish the bookings under way, close the upstreams' client."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._handler is not None and self._handler.tasks:
            await asyncio.gather(*list(self._handler.tasks), return_exceptions=True)
        if self._upstreams is not None:
            await self._upstreams.close()

    # ------------------------------------------------------------------ helpers
    def _router_of(self, decision_id: str) -> str:
        name, sep, _ = decision_id.partition(":")
        if not sep or name not in self.config.routers:
            raise UnknownDecisionError(
                f"decision_id: unknown decision {decision_id!r} (a gateway decision's id is "
                "<router>:<hex>; feed back other routers' decisions at "
                "/v1/routers/{name}/decisions/{id}/feedback)"
            )
        return name

    async def _feedback(
        self,
        service: ServedRouters,
        decision_id: str,
        reward: float,
        cost: Mapping[str, float] | None,
    ) -> str:
        name = self._router_of(decision_id)
        request = FeedbackRequest(reward=reward, cost=None if cost is None else dict(cost))
        return await service.feedback(name, decision_id, request)

    async def _run_plan(self, service: ServedRouters, name: str, plan: BudgetPlan) -> None:
        while True:
            await asyncio.sleep(min(TICK_S, plan.config.update_s))
            try:
                await self._tick(service, name, plan)
            except MSRouteError as exc:  # a journal that cannot be written: tried again
                _log.error("router %s: budget: %s", name, service.redact(str(exc)))

    async def _tick(self, service: ServedRouters, name: str, plan: BudgetPlan) -> None:
        state = await service.call(name, lambda r: r.state())
        bound = plan.observe(time.time(), int(state["decisions"]), float(state["spent"][USD]))
        if bound is not None:
            try:
                await service.call(name, lambda r: r.set_bounds(upper={USD: bound}))
            except InfeasibleConstraintsError as exc:
                _log.warning("router %s: budget: cannot set $%.6g per query: %s", name, bound, exc)
            else:
                plan.applied(bound)
                _log.info("router %s: budget: $%.6g per query from now on", name, bound)
        self._metrics.set_budget(name, plan.report)


def _plan_path(gw: GatewayRouter) -> Path:
    """Where a router's budget plan is kept: beside its journal."""
    return Path(gw.journal + ".budget.json")


def create_gateway_app(
    config: GatewayConfig,
    *,
    token: str | None,
    text_context: TextContext | None = None,
    environ: Mapping[str, str] | None = None,
) -> ASGIApp:
    """The ASGI app of ``msroute gateway``: the service's app over ``config.service`` with the
    gateway's endpoints (see ``Gateway``); its lifespan opens the journals and the upstreams."""
    gateway = Gateway(config, text_context=text_context, environ=environ)
    return create_app(config.service, token=token, extension=gateway)
