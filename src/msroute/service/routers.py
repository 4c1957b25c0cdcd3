"""What every endpoint shares: the routers' owners, the metrics, the feedback-delay clocks.

``ServedRouters`` opens each router of the config under its ``RouterOwner`` on start
and closes them on stop. Its ``decide`` and ``feedback``
are the two hot operations, called by the FastAPI endpoints and by the fast path alike, so both
count and time requests the same way.

The journals' paths stay on the server: an error message that names a journal file (a
``JournalError`` names it first) is answered with the router's name in its place
(``ServedRouters.redact``); the server log keeps the path.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from msroute.errors import ConfigError, JournalError, MSRouteError, UnknownRouterError
from msroute.router import RoutedDecision, Router
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
    """Recover the router from its journal if the file exists, else create it from ``config``.

    Raises
    ------
    JournalError
        The journal (or, for a new one, its directory) cannot be written: a served router
        journals every call, so it is refused at start rather than at the first request.
    """
    journal = Path(config["journal"])
    if journal.exists():
        if not os.access(journal, os.R_OK | os.W_OK):
            raise JournalError(f"journal {journal}: not readable and writable by this user")
        return Router.open(journal, config=config)  # a changed config: journaled, or refused
    try:
        journal.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JournalError(f"journal {journal}: cannot create its directory: {exc}") from exc
    if not os.access(journal.parent, os.W_OK | os.X_OK):
        raise JournalError(f"journal {journal}: its directory {journal.parent} is not writable")
    return Router.from_config(config)


class ServedRouters:
    """The routers of one service config, each behind its owner, with the service's metrics."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.owners: dict[str, RouterOwner] = {}
        self.clocks: dict[str, DelayClock] = {}
        #: Whether ``start`` has opened the routers (and ``stop`` not yet closed them).
        self.started = False
        # Each journal's path as configured and as resolved (through symlinks), longest first.
        named = {
            form: name
            for name, cfg in config.routers.items()
            for form in (str(cfg["journal"]), str(Path(cfg["journal"]).resolve()))
        }
        self._journals = sorted(named.items(), key=lambda item: -len(item[0]))

    def redact(self, text: str) -> str:
        """``text`` with each journal path in it replaced by the router's name (what an answer
        says; the server log keeps the path)."""
        for path, name in self._journals:
            if path in text:
                text = text.replace(path, f"the journal of router {name}")
        return text

    def failures(self) -> dict[str, str]:
        """Each router that cannot write its journal, and why (empty when all can; journal
        paths redacted)."""
        return {
            name: self.redact(owner.failure or "the last write failed")
            for name, owner in self.owners.items()
            if not owner.writable
        }

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

    def submit(self, name: str, fn: Callable[[Router], T]) -> asyncio.Future[T]:
        """``fn(router)`` submitted to the router's next commit group, at once: the future of
        its result, done once committed (``RouterOwner.submit``)."""
        return self.owner(name).submit(fn)

    async def decide(self, name: str, body: DecisionRequest) -> dict[str, Any]:
        """Route one query; the decision (JSON-ready) once its journal row is committed."""
        decision = await self.call(
            name,
            lambda r: r.route(
                context=body.context,
                eligible=body.eligible,
                decision_id=body.decision_id,
                prompt=body.prompt,
            ),
        )
        self.decided(name, decision)
        return decision.to_dict()

    def decided(self, name: str, decision: RoutedDecision) -> None:
        """Count a committed decision of router ``name`` and start its feedback-delay clock."""
        self.metrics.hot(name).decisions.inc()
        self.clocks[name].start(decision.decision_id)

    async def feedback(self, name: str, decision_id: str, body: FeedbackRequest) -> str:
        """Apply a decision's feedback; its status once its journal row is committed."""
        status = await self.call(
            name, lambda r: r.feedback(decision_id, body.reward, cost=body.cost)
        )
        hot = self.metrics.hot(name)
        hot.feedback[status].inc()
        if status != "duplicate":
            hot.reward.observe(body.reward)
            delay = self.clocks[name].stop(decision_id)
            if delay is not None:
                hot.feedback_delay.observe(delay)
        return status

    async def start(self) -> None:
        """Open every router (recovering its journal) and log one line per router.

        Raises
        ------
        ConfigError
            A router cannot be opened (infeasible constraints, a journal that cannot be
            written or read back); the message names the router. The routers opened before it
            are closed again.
        """
        self.started = True
        try:
            for name, cfg in self.config.routers.items():
                await self._start_one(name, cfg)
        except BaseException:
            await self.stop()
            raise

    async def _start_one(self, name: str, cfg: Any) -> None:
        existed = Path(cfg["journal"]).exists()
        owner = RouterOwner(name, partial(open_router, dict(cfg)))
        try:
            router = await owner.start()
        except (MSRouteError, OSError) as exc:
            await owner.stop()
            raise ConfigError(f"router {name}: {exc}") from exc
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
        """Finish queued calls and close every journal (idempotent)."""
        for name, owner in list(self.owners.items()):
            await owner.stop()
            _log.info("router %s: journal closed", name)
        self.owners.clear()
        self.started = False
