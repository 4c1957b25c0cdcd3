"""msroute inside a LiteLLM Router: a routing strategy and a cost callback (extra ``[litellm]``).

``MSRouteStrategy`` is a LiteLLM ``CustomRoutingStrategyBase``: for each call to a model group
it asks an msroute Router (in this process, or a ``msroute serve``/``msroute gateway`` over HTTP)
for the deployment, among the group's deployments whose ``model_info.id`` is an expert of the
router, and puts the decision id in the call's ``metadata["msroute_decision_id"]`` (a client id
given there is used as the decision id). ``MSRouteCostLogger`` is a LiteLLM ``CustomLogger``:
when the call returns it books LiteLLM's ``response_cost`` on the decision as its realized cost
(``Router.report_cost``), so the router's dollar bounds hold on what calls really cost; a
failed call is booked at the cost it reports, else at nothing, but a timeout keeps its
booking (it may have been billed). A reward comes back with the strategy's
``feedback(decision_id, reward)``, or from its ``scorer(kwargs, response)``.

One logger serves every strategy of the process: LiteLLM keeps one callback of a class, so the
strategy that routed a call is named in its metadata (``msroute_strategy``) and found in a
registry of the process's strategies.

A LiteLLM call goes to one deployment: the router must draw one expert per query
(``m_draws = 1``). ``route_with_msroute(litellm_router, router)`` installs both.

LiteLLM fetches its price map over the network when imported, unless the environment sets
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (it then uses the map in its wheel): set it where no
network is wanted.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from litellm.integrations.custom_logger import CustomLogger
from litellm.types.router import CustomRoutingStrategyBase

from msroute._validation import COST_MAX
from msroute.errors import InvalidValueError
from msroute.router import Router

__all__ = [
    "DECISION_KEY",
    "GatewayClient",
    "MSRouteCostLogger",
    "MSRouteStrategy",
    "route_with_msroute",
]

_log = logging.getLogger("msroute.integrations")

#: The metadata key that carries a call's decision id.
DECISION_KEY = "msroute_decision_id"
#: The metadata key that carries a call's context (routers with contexts).
CONTEXT_KEY = "msroute_context"
#: The metadata key naming the strategy that routed a call.
STRATEGY_KEY = "msroute_strategy"
#: The cost name LiteLLM's ``response_cost`` is booked under.
USD = "usd"
Scorer = Callable[[Mapping[str, Any], Any], float | None]


class GatewayClient:
    """A router of a ``msroute serve`` / ``msroute gateway`` process, over HTTP.

    Parameters
    ----------
    url : str
        The server's base URL (``http://127.0.0.1:8080``).
    router : str
        The router's name in the server's config.
    token : str or None
        The server's bearer token (``MSROUTE_TOKEN``).
    timeout_s : float
        Seconds a call to the server may take.
    """

    def __init__(
        self, url: str, router: str, token: str | None = None, timeout_s: float = 10.0
    ) -> None:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._base = f"{url.rstrip('/')}/v1/routers/{router}/decisions"
        self._sync = httpx.Client(headers=headers, timeout=timeout_s, trust_env=False)
        self._async = httpx.AsyncClient(headers=headers, timeout=timeout_s, trust_env=False)

    @staticmethod
    def _body(context: str | None, eligible: Sequence[str], did: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"eligible": list(eligible)}
        if context is not None:
            body["context"] = context
        if did is not None:
            body["decision_id"] = did
        return body

    def route(self, context: str | None, eligible: Sequence[str], did: str | None) -> Any:
        """``POST .../decisions``: the decision (``decision_id``, ``team``)."""
        return _ok(self._sync.post(self._base, json=self._body(context, eligible, did)))

    async def aroute(self, context: str | None, eligible: Sequence[str], did: str | None) -> Any:
        """``route``, awaited."""
        answer = await self._async.post(self._base, json=self._body(context, eligible, did))
        return _ok(answer)

    def report_cost(self, did: str, usd: float) -> str:
        """``POST .../decisions/{id}/cost`` (the gateway's endpoint)."""
        answer = self._sync.post(f"{self._base}/{did}/cost", json={"cost": {USD: usd}})
        return str(_ok(answer)["status"])

    async def areport_cost(self, did: str, usd: float) -> str:
        """``report_cost``, awaited."""
        answer = await self._async.post(f"{self._base}/{did}/cost", json={"cost": {USD: usd}})
        return str(_ok(answer)["status"])

    def feedback(self, did: str, reward: float) -> str:
        """``POST .../decisions/{id}/feedback``."""
        answer = self._sync.post(f"{self._base}/{did}/feedback", json={"reward": reward})
        return str(_ok(answer)["status"])

    async def afeedback(self, did: str, reward: float) -> str:
        """``feedback``, awaited."""
        answer = await self._async.post(f"{self._base}/{did}/feedback", json={"reward": reward})
        return str(_ok(answer)["status"])

    def close(self) -> None:
        """Close the connections (the async client's at its next use of the loop)."""
        self._sync.close()


def _ok(answer: httpx.Response) -> Any:
    if answer.status_code >= 400:
        try:
            detail = answer.json().get("detail", answer.text)
        except ValueError:
            detail = answer.text
        raise InvalidValueError(f"msroute answered {answer.status_code}: {detail}")
    return answer.json()


class _Backend:
    """One router's calls, in this process (serialized by a lock: LiteLLM calls from its
    event loop and from threads) or over HTTP."""

    def __init__(self, router: Router | GatewayClient) -> None:
        self.router = router
        self._lock = threading.Lock()
        if isinstance(router, Router) and router.config.m_draws != 1:
            raise InvalidValueError(
                f"router m_draws == {router.config.m_draws}: a LiteLLM call goes to one "
                "deployment, so the router must draw one expert per query (m_draws = 1)"
            )

    def experts(self) -> set[str] | None:
        return set(self.router.expert_ids) if isinstance(self.router, Router) else None

    def route(self, context: str | None, eligible: Sequence[str], did: str | None) -> Any:
        if isinstance(self.router, GatewayClient):
            return self.router.route(context, eligible, did)
        with self._lock:
            return self.router.route(context, eligible, did).to_dict()

    async def aroute(self, context: str | None, eligible: Sequence[str], did: str | None) -> Any:
        if isinstance(self.router, GatewayClient):
            return await self.router.aroute(context, eligible, did)
        return self.route(context, eligible, did)

    def report_cost(self, did: str, usd: float) -> str:
        if isinstance(self.router, GatewayClient):
            return self.router.report_cost(did, usd)
        with self._lock:
            return self.router.report_cost(did, {USD: usd})

    async def areport_cost(self, did: str, usd: float) -> str:
        if isinstance(self.router, GatewayClient):
            return await self.router.areport_cost(did, usd)
        return self.report_cost(did, usd)

    def feedback(self, did: str, reward: float) -> str:
        if isinstance(self.router, GatewayClient):
            return self.router.feedback(did, reward)
        with self._lock:
            return self.router.feedback(did, reward)

    async def afeedback(self, did: str, reward: float) -> str:
        if isinstance(self.router, GatewayClient):
            return await self.router.afeedback(did, reward)
        return self.feedback(did, reward)


def _deployments(litellm_router: Any, model: str) -> list[dict[str, Any]]:
    """The deployments of a model group (LiteLLM's registry where it has one)."""
    registry = getattr(litellm_router, "registry", None)
    if callable(registry):
        return list(registry().deployments(model))
    return [d for d in litellm_router.model_list if d.get("model_name") == model]


class MSRouteStrategy(CustomRoutingStrategyBase):
    """LiteLLM's custom routing strategy, answered by an msroute router (module docstring).

    Parameters
    ----------
    litellm_router : litellm.Router
        The router whose deployments are the experts (each one's ``model_info.id``).
    router : msroute.Router or GatewayClient
        The msroute router deciding, in process or over HTTP.
    scorer : callable, optional
        ``(kwargs, response) -> reward or None``: a reward known when a call returns (a check
        of the answer), fed back as the call is logged.
    """

    def __init__(
        self, litellm_router: Any, router: Router | GatewayClient, scorer: Scorer | None = None
    ) -> None:
        self.litellm_router = litellm_router
        self.backend = _Backend(router)
        self.scorer = scorer
        self.key = secrets.token_hex(8)
        _STRATEGIES[self.key] = self

    def _candidates(self, model: str) -> dict[str, dict[str, Any]]:
        known = self.backend.experts()
        found = {
            str(d.get("model_info", {}).get("id")): d
            for d in _deployments(self.litellm_router, model)
        }
        candidates = {i: d for i, d in found.items() if known is None or i in known}
        if not candidates:
            raise InvalidValueError(
                f"model group {model!r}: no deployment whose model_info.id is an expert of the "
                f"msroute router (deployments: {sorted(found)}, experts: {sorted(known or ())})"
            )
        return candidates

    @staticmethod
    def _metadata(request_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        if request_kwargs is None:
            return {}
        metadata = request_kwargs.get("metadata")
        if not isinstance(metadata, dict):
            metadata = request_kwargs["metadata"] = {}
        return metadata

    def _pick(
        self, candidates: dict[str, dict[str, Any]], metadata: dict[str, Any], decision: Any
    ) -> dict[str, Any]:
        metadata[DECISION_KEY] = decision["decision_id"]
        metadata[STRATEGY_KEY] = self.key
        return candidates[decision["team"][0]]

    async def async_get_available_deployment(  # type: ignore[override]  # LiteLLM says None
        self,
        model: str,
        messages: list[dict[str, str]] | None = None,
        input: str | list[object] | None = None,
        specific_deployment: bool | None = False,
        request_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The deployment of this call: the expert the msroute router routes it to."""
        candidates = self._candidates(model)
        metadata = self._metadata(request_kwargs)
        decision = await self.backend.aroute(
            metadata.get(CONTEXT_KEY), sorted(candidates), metadata.get(DECISION_KEY)
        )
        return self._pick(candidates, metadata, decision)

    def get_available_deployment(  # type: ignore[override]  # LiteLLM says None
        self,
        model: str,
        messages: list[dict[str, str]] | None = None,
        input: str | list[object] | None = None,
        specific_deployment: bool | None = False,
        request_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``async_get_available_deployment`` for LiteLLM's synchronous calls."""
        candidates = self._candidates(model)
        metadata = self._metadata(request_kwargs)
        decision = self.backend.route(
            metadata.get(CONTEXT_KEY), sorted(candidates), metadata.get(DECISION_KEY)
        )
        return self._pick(candidates, metadata, decision)

    def feedback(self, decision_id: str, reward: float) -> str:
        """The reward of a routed call (``Router.feedback``)."""
        return self.backend.feedback(decision_id, reward)


#: The strategies of this process, by key (what the logger finds a call's router by).
_STRATEGIES: dict[str, MSRouteStrategy] = {}


def _routed(kwargs: Mapping[str, Any]) -> tuple[MSRouteStrategy, str] | None:
    """The strategy that routed a logged call, and the call's decision id."""
    params = kwargs.get("litellm_params")
    metadata = params.get("metadata") if isinstance(params, Mapping) else None
    if not isinstance(metadata, Mapping):
        return None
    strategy = _STRATEGIES.get(str(metadata.get(STRATEGY_KEY)))
    did = metadata.get(DECISION_KEY)
    return None if strategy is None or not isinstance(did, str) else (strategy, did)


def _cost(kwargs: Mapping[str, Any]) -> float | None:
    """The call's ``response_cost``; None where it reports none, or one no router books (not a
    number, NaN, infinite, negative or above ``COST_MAX``): that is logged, and the decision
    keeps its expected cost, where the router's refusal inside LiteLLM's callback would have
    gone unseen."""
    cost = kwargs.get("response_cost")
    if cost is None:
        return None
    if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost <= COST_MAX:
        return float(cost)
    _log.warning(
        "litellm: response_cost %.80r is not a cost in [0, %g]: the call keeps its expected cost",
        cost,
        COST_MAX,
    )
    return None


def _failure_cost(kwargs: Mapping[str, Any]) -> float | None:
    """What a failed call is booked at: the cost it reports, else nothing, but a timeout (or a
    reported cost no router books, ``_cost``) keeps its booking (None)."""
    if kwargs.get("response_cost") is not None:
        return _cost(kwargs)
    exception = kwargs.get("exception")
    timed_out = isinstance(exception, TimeoutError | asyncio.TimeoutError | httpx.TimeoutException)
    return None if timed_out or "Timeout" in type(exception).__name__ else 0.0


class MSRouteCostLogger(CustomLogger):
    """LiteLLM's callback booking each routed call's ``response_cost`` on its decision, and
    feeding back its strategy's scorer's reward (module docstring)."""

    def log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        routed = _routed(kwargs)
        if routed is None:
            return
        strategy, did = routed
        cost = _cost(kwargs)
        if cost is not None:
            strategy.backend.report_cost(did, cost)
        reward = None if strategy.scorer is None else strategy.scorer(kwargs, response_obj)
        if reward is not None:
            strategy.backend.feedback(did, reward)

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        routed = _routed(kwargs)
        if routed is None:
            return
        strategy, did = routed
        cost = _cost(kwargs)
        if cost is not None:
            await strategy.backend.areport_cost(did, cost)
        reward = None if strategy.scorer is None else strategy.scorer(kwargs, response_obj)
        if reward is not None:
            await strategy.backend.afeedback(did, reward)

    def log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        routed, cost = _routed(kwargs), _failure_cost(kwargs)
        if routed is not None and cost is not None:
            routed[0].backend.report_cost(routed[1], cost)

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        routed, cost = _routed(kwargs), _failure_cost(kwargs)
        if routed is not None and cost is not None:
            await routed[0].backend.areport_cost(routed[1], cost)


def route_with_msroute(
    litellm_router: Any, router: Router | GatewayClient, scorer: Scorer | None = None
) -> MSRouteStrategy:
    """Route ``litellm_router``'s calls with ``router`` and book their cost: installs an
    ``MSRouteStrategy`` and, once per process, an ``MSRouteCostLogger`` (in
    ``litellm.callbacks``); returns the strategy (its ``feedback`` sends rewards)."""
    import litellm

    strategy = MSRouteStrategy(litellm_router, router, scorer)
    register = getattr(litellm_router, "register_plugin", None)
    if callable(register):
        register(strategy)
    else:
        litellm_router.set_custom_routing_strategy(strategy)
    if not any(isinstance(c, MSRouteCostLogger) for c in litellm.callbacks):
        litellm.callbacks = [*litellm.callbacks, MSRouteCostLogger()]
    return strategy
