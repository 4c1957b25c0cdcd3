"""msroute.integrations.litellm: a LiteLLM Router whose deployments an msroute router picks,
each call's response_cost booked on its decision; in process and over HTTP, against a stub
upstream on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _gateway import expert, gateway_process
from _server import ServerProcess, free_port
from _service import TOKEN
from _upstream import StubUpstream
from msroute.errors import InvalidValueError
from msroute.router import Router

litellm = pytest.importorskip("litellm", reason="the litellm extra is not installed")
from msroute.integrations.litellm import (  # noqa: E402 (after the skip)
    DECISION_KEY,
    STRATEGY_KEY,
    GatewayClient,
    MSRouteCostLogger,
    route_with_msroute,
)

#: LiteLLM runs its callbacks on event loops of its own that it never closes (their self-pipe
#: sockets are collected unclosed); those warnings are LiteLLM's, not msroute's.
LITELLM_LEAKS = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
pytestmark = [pytest.mark.timeout(180), *LITELLM_LEAKS]

PRICES = {"a": (1e-6, 2e-6), "b": (3e-6, 4e-6)}  # dollars per prompt, completion token
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def stub() -> Iterator[StubUpstream]:
    with StubUpstream(free_port()) as upstream:
        yield upstream


def deployments(stub: StubUpstream, behaviour: str = "prompt=100&completion=10") -> list[Any]:
    return [
        {
            "model_name": "chat",
            "model_info": {"id": e},
            "litellm_params": {
                "model": f"openai/stub-{e}?{behaviour}",
                "api_base": stub.base_url,
                "api_key": "none",
                "input_cost_per_token": PRICES[e][0],
                "output_cost_per_token": PRICES[e][1],
            },
        }
        for e in PRICES
    ]


def msroute_router(**changes: Any) -> Router:
    config = {
        "policy": "omd",
        "m_draws": 1,
        "cost_names": ["usd"],
        "seed": 0,
        "experts": {"a": [0.0001], "b": [0.0002]},
        **changes,
    }
    return Router(config)


@pytest.fixture(autouse=True)
def no_callbacks() -> Iterator[None]:
    before = list(litellm.callbacks)
    yield
    litellm.callbacks = before


def wait_for(check: Any, timeout_s: float = 30.0) -> None:
    """LiteLLM logs a call (the callback) a moment after it returns, on its own thread."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the callback did not run"
        time.sleep(0.02)


def costs(router: Router) -> dict[str, float]:
    return {r["decision_id"]: r["cost"]["usd"] for r in router.export_rows() if r["kind"] == "cost"}


def test_each_call_is_routed_and_booked_at_its_response_cost(stub: StubUpstream) -> None:
    router = msroute_router()
    llm = litellm.Router(model_list=deployments(stub), num_retries=0)
    strategy = route_with_msroute(llm, router)
    replies = {}
    for i in range(6):
        did = f"sync-{i}"
        replies[did] = llm.completion(
            model="chat", messages=HI, metadata={"msroute_decision_id": did}
        )

    async def calls() -> None:
        for i in range(6):
            did = f"async-{i}"
            replies[did] = await llm.acompletion(
                model="chat", messages=HI, metadata={"msroute_decision_id": did}
            )
        deadline = time.monotonic() + 30  # the async callback runs on this loop: let it
        while len(costs(router)) < 12 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    asyncio.run(calls())
    wait_for(lambda: len(costs(router)) == 12)
    decided = {
        r["decision_id"]: r["team"][0] for r in router.export_rows() if r["kind"] == "decision"
    }
    for did, reply in replies.items():
        member = decided[did]
        assert reply.choices[0].message.content.startswith(f"answer of stub-{member}")
        prompt, completion = PRICES[member]
        assert costs(router)[did] == pytest.approx(100 * prompt + 10 * completion)
        assert reply._hidden_params["response_cost"] == pytest.approx(costs(router)[did])
    assert strategy.feedback("sync-0", 1.0) == "applied"


def test_a_failed_call_is_booked_at_what_it_billed(stub: StubUpstream) -> None:
    router = msroute_router()
    llm = litellm.Router(model_list=deployments(stub, "status=500"), num_retries=0)
    route_with_msroute(llm, router)
    with pytest.raises(Exception, match=r"500|stub error"):
        llm.completion(model="chat", messages=HI, metadata={"msroute_decision_id": "f-1"})
    wait_for(lambda: "f-1" in costs(router))
    assert costs(router)["f-1"] == 0.0  # an error answer without a usage: nothing billed


def test_a_response_cost_no_router_books_is_logged_and_keeps_the_expected_cost(
    stub: StubUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    router = msroute_router()
    strategy = route_with_msroute(litellm.Router(model_list=deployments(stub)), router)
    (logger,) = [c for c in litellm.callbacks if isinstance(c, MSRouteCostLogger)]

    def logged(cost: object) -> dict[str, Any]:
        did = router.route().decision_id
        metadata = {STRATEGY_KEY: strategy.key, DECISION_KEY: did}
        return {"litellm_params": {"metadata": metadata}, "response_cost": cost}

    bad = [math.inf, math.nan, -1.0, 2e12, "0.1"]
    with caplog.at_level(logging.WARNING, logger="msroute.integrations"):
        for cost in bad:
            logger.log_success_event(logged(cost), None, 0, 0)
            failed = {**logged(cost), "exception": RuntimeError("upstream 500")}
            logger.log_failure_event(failed, None, 0, 0)
    assert costs(router) == {}  # none booked: each decision keeps its expected cost
    assert caplog.text.count("is not a cost in [0, 1e+12]") == 2 * len(bad)
    ok = logged(0.25)
    logger.log_success_event(ok, None, 0, 0)
    assert costs(router) == {ok["litellm_params"]["metadata"][DECISION_KEY]: 0.25}


def test_the_context_comes_from_the_metadata_and_teams_are_refused(stub: StubUpstream) -> None:
    router = msroute_router(contexts=["code", "chat"])
    llm = litellm.Router(model_list=deployments(stub), num_retries=0)
    route_with_msroute(llm, router)
    llm.completion(model="chat", messages=HI, metadata={"msroute_context": "code"})
    assert router.export_rows()[0]["context"] == "code"
    with pytest.raises(InvalidValueError, match=r"m_draws = 1"):
        route_with_msroute(llm, msroute_router(m_draws=2))


def test_a_router_of_a_gateway_over_http(stub: StubUpstream, tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
[routers.lt]
policy = "omd"
m_draws = 1
expected_tokens = {{ input = 50, output = 10 }}
[routers.lt.experts.a]
{expert(stub.base_url, "", 1.0, 2.0)}
[routers.lt.experts.b]
{expert(stub.base_url, "", 3.0, 4.0)}
"""
    )
    server = gateway_process(config, tmp_path / "data")
    with server:
        client = GatewayClient(server.url, "lt", TOKEN)
        llm = litellm.Router(model_list=deployments(stub), num_retries=0)
        strategy = route_with_msroute(llm, client)
        reply = llm.completion(model="chat", messages=HI, metadata={"msroute_decision_id": "h-1"})
        cost = reply._hidden_params["response_cost"]

        def booked() -> bool:
            rows = server_rows(server)
            return any(
                r["kind"] == "cost" and r["cost"]["usd"] == pytest.approx(cost) for r in rows
            )

        wait_for(booked)
        assert strategy.feedback("h-1", 0.5) == "applied"
        client.close()


def server_rows(server: ServerProcess) -> list[dict[str, Any]]:
    import json

    import httpx

    answer = httpx.get(
        f"{server.url}/v1/routers/lt/decisions", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    return [json.loads(line) for line in answer.text.splitlines()]
