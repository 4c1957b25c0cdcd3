"""What every endpoint shares: the routers' owners, the metrics, the feedback-delay clocks.

``ServedRouters`` opens each router of the config under its ``RouterOwner`` on start
and closes them on stop. Its ``decide`` and ``feedback``
are the two hot operations, called by the FastAPI endpoints and by the fast path alike, so both
count and time requests the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from msroute.errors import UnknownRouterError
from msroute.router import Router
from msroute.service.config import ServiceConfig
from msroute.service.metrics import DelayClock, ServiceMetrics
from msroute.service.models import DecisionRequest, FeedbackRequest
from msroute.service.owner import RouterOwner

__all__ = ["ServedRouters", "open_router"]

T = TypeVar("T")
_log = logging.getLogger("msroute.service")

#: Seconds a decision's time is kept to measure its feedback delay.
_DELAY_HORIZON_S = 86400.0


def open_router(config: dict[str, Any]) -> Router:
    """Recover the router from its journal if the file exists, else create it from ``config``."""
    journal = Path(config["journal"])
    if journal.exists():
        return Router.open(journal)
    journal.parent.mkdir(parents=True, exist_ok=True)
    return Router.from_config(config)


class ServedRouters:
    """The routers of one service config, each behind its owner, with the service's metrics."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.owners: dict[str, RouterOwner] = {}
        self.clocks: dict[str, DelayClock] = {}

    def owner(self, name: str) -> RouterOwner:
        """The owner of router ``name`` (UnknownRouterError naming the known ones)."""
        try:
            return self.owners[name]
        except KeyError:
            raise UnknownRouterError(
                f"router {name!r} is not served here; known: {', '.join(sorted(self.owners))}"
            ) from None

    async def call(self, name: str, fn: Callable[[Router], T]) -> T:
        """``fn(router)`` in the router's next commit group; its result once committed."""
        return await self.owner(name).call(fn)

    async def decide(self, name: str, body: DecisionRequest) -> dict[str, Any]:
        """Route one query; the decision (JSON-ready) once its journal row is committed."""
        decision = await self.call(
            name,
            lambda r: r.route(
                context=body.context, eligible=body.eligible, decision_id=body.decision_id
            ),
        )
        self.metrics.hot(name).decisions.inc()
        self.clocks[name].start(decision.decision_id)
        return decision.to_dict()

    async def feedback(self, name: str, decision_id: str, body: FeedbackRequest) -> str:
        """Apply a decision's feedback; its status once its journal row is committed."""
        status = await self.call(
            name, lambda r: r.feedback(decision_id, body.reward, cost=body.cost)
        )
        hot = self.metrics.hot(name)
        hot.feedback[status].inc()
        if status != "duplicate":
            delay = self.clocks[name].stop(decision_id)
            if delay is not None:
                hot.feedback_delay.observe(delay)
        return status

    async def start(self) -> None:
        """Open every router (recovering its journal) and log one line per router."""
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
        """Finish queued calls and close every journal."""
        for name, owner in list(self.owners.items()):
            await owner.stop()
            _log.info("router %s: journal closed", name)
        self.owners.clear()
