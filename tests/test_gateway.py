"""msroute gateway end to end: the official openai client against the gateway, over a stub
upstream on 127.0.0.1 (tests/_upstream.py), both child processes stopped by pid."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from _gateway import KEY_ENV, UPSTREAM_KEY, gateway_process, write_config
from _server import ServerProcess, free_port
from _service import TOKEN
from _upstream import StubUpstream

pytestmark = pytest.mark.timeout(300)

H = {"Authorization": f"Bearer {TOKEN}"}
HI = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("gateway")
    with StubUpstream(free_port()) as stub:
        config = write_config(tmp / "gateway.toml", stub.base_url)
        server = gateway_process(config, tmp / "data", tmp / "gateway.log")
        with server:
            yield server


@pytest.fixture(scope="module")
def client(gateway: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key=TOKEN, max_retries=0, timeout=30) as c:
        yield c


def rows(gateway: ServerProcess, router: str) -> list[dict[str, Any]]:
    text = httpx.get(f"{gateway.url}/v1/routers/{router}/decisions?limit=10000", headers=H).text
    return [json.loads(line) for line in text.splitlines()]


def cost_of(gateway: ServerProcess, router: str, did: str) -> float:
    """The decision's current dollars, from its journal rows (a cost report replaces the
    decision's booking)."""
    usd = None
    for row in rows(gateway, router):
        if row.get("decision_id") == did and row["kind"] in ("decision", "cost"):
            usd = row["cost"]["usd"]
    assert usd is not None
    return float(usd)


def ask(client: openai.OpenAI, router: str, **msroute: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=f"msroute/{router}", messages=HI, extra_body={"msroute": msroute}
    )


def test_a_team_of_one_answers_and_books_its_usage(
    gateway: ServerProcess, client: openai.OpenAI
) -> None:
    raw = ask(client, "chat", eligible=["a"])
    completion = raw.parse()
    did = raw.headers["x-msroute-decision-id"]
    # The router minted the id (Router.route(id_prefix=...)): the router's name, 32 hex digits.
    assert raw.headers["x-msroute-team"] == "a" and re.fullmatch("chat:[0-9a-f]{32}", did)
    assert completion.choices[0].message.content.startswith("answer of stub?prompt=100")
    assert completion.usage is not None and completion.usage.prompt_tokens == 100
    # The upstream got its own key, never the gateway's token.
    assert completion.system_fingerprint == f"Bearer {UPSTREAM_KEY}"
    # 60 prompt tokens at $2, 40 cached at $0.5, 50 completion at $8 per million.
    assert cost_of(gateway, "chat", did) == pytest.approx((60 * 2 + 40 * 0.5 + 50 * 8) / 1e6)


def test_a_stream_passes_through_and_is_booked(
    gateway: ServerProcess, client: openai.OpenAI
) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="msroute/chat", messages=HI, stream=True, extra_body={"msroute": {"eligible": ["b"]}}
    ) as response:
        did = response.headers["x-msroute-decision-id"]
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "answer of stub?prompt=300&completion=10"
    assert all(c.usage is None for c in chunks)  # the client did not ask for the usage
    expected = (300 * 0.5 + 10 * 1.5) / 1e6
    for _ in range(100):  # booked as the stream ends, just after the last event
        if cost_of(gateway, "chat", did) == pytest.approx(expected):
            break
    assert cost_of(gateway, "chat", did) == pytest.approx(expected)
    stream = client.chat.completions.create(
        model="msroute/chat",
        messages=HI,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"msroute": {"eligible": ["b"]}},
    )
    usage = [c.usage for c in stream if c.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens == 300


def test_a_team_of_several_answers_one_choice_per_member(
    gateway: ServerProcess, client: openai.OpenAI
) -> None:
    for _ in range(40):  # two draws over two experts: a team of two half the time
        raw = ask(client, "team")
        if raw.headers["x-msroute-team"].count(",") == 1:
            break
    team = raw.headers["x-msroute-team"].split(",")
    assert len(team) == 2
    completion = raw.parse()
    assert [c.index for c in completion.choices] == [0, 1]
    assert [c.model_extra["msroute_expert"] for c in completion.choices] == team
    assert completion.usage is not None and completion.usage.prompt_tokens == 30
    did = raw.headers["x-msroute-decision-id"]
    assert cost_of(gateway, "team", did) == pytest.approx((30 + 10) / 1e6)  # both members
    with client.chat.completions.with_streaming_response.create(
        model="msroute/team", messages=HI, stream=True, stream_options={"include_usage": True}
    ) as response:
        members = response.headers["x-msroute-team"].split(",")
        chunks = list(response.parse())
    texts: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert sorted(texts) == list(range(len(members)))
    assert chunks[-1].usage is not None and not chunks[-1].choices


@pytest.mark.parametrize(
    ("member", "status", "usd"),
    [
        ("broken", 502, 7 * 1.0 / 1e6),  # what its error reported it billed
        ("slow", 504, (100 + 50) / 1e6),  # its configured cost: the usage never came
    ],
)
def test_an_upstream_failure_is_an_openai_error_and_books_what_was_billed(
    gateway: ServerProcess, client: openai.OpenAI, member: str, status: int, usd: float
) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        ask(client, "chat", eligible=[member])
    error = caught.value
    assert error.status_code == status
    body = error.response.json()["error"]
    assert member in body["message"] and UPSTREAM_KEY not in error.response.text
    did = error.response.headers["x-msroute-decision-id"]
    assert cost_of(gateway, "chat", did) == pytest.approx(usd)


def test_an_answer_without_usage_keeps_its_configured_cost(
    gateway: ServerProcess, client: openai.OpenAI
) -> None:
    raw = ask(client, "chat", eligible=["nousage"])
    did = raw.headers["x-msroute-decision-id"]
    assert cost_of(gateway, "chat", did) == pytest.approx((100 + 50) * 3.0 / 1e6)
    metrics = httpx.get(gateway.url + "/metrics", headers=H).text
    assert 'msroute_upstream_calls_total{expert="nousage",outcome="no_usage",router="chat"}' in (
        metrics
    )
    assert 'msroute_spent{cost="usd",router="chat"}' in metrics


def test_feedback_and_langfuse_scores(gateway: ServerProcess, client: openai.OpenAI) -> None:
    first = ask(client, "chat", eligible=["a"]).headers["x-msroute-decision-id"]
    second = ask(client, "chat", eligible=["a"]).headers["x-msroute-decision-id"]
    url = gateway.url
    answer = httpx.post(f"{url}/v1/feedback", headers=H, json={"decision_id": first, "reward": 1})
    assert answer.json() == {"status": "applied"}
    score = {"traceId": second, "name": "quality", "value": 0.5, "comment": "ok"}
    answer = httpx.post(f"{url}/api/public/scores", headers=H, json=score)
    assert answer.json() == {"id": second, "status": "applied"}
    assert httpx.post(f"{url}/api/public/scores", headers=H, json=score).json()["status"] == (
        "duplicate"
    )
    unknown = httpx.post(f"{url}/v1/feedback", headers=H, json={"decision_id": "x:1", "reward": 1})
    assert unknown.status_code == 404 and "unknown decision" in unknown.json()["detail"]
    wrong = httpx.post(f"{url}/api/public/scores", headers=H, json={**score, "value": "good"})
    assert wrong.status_code == 422


def test_langfuse_scores_of_another_name_are_ignored_whatever_their_type(
    gateway: ServerProcess, client: openai.OpenAI
) -> None:
    """A router with ``score_name`` ignores scores of other names, categorical (a string
    value) and boolean ones included: Langfuse sends them to the same endpoint."""
    did = ask(client, "team").headers["x-msroute-decision-id"]
    url = f"{gateway.url}/api/public/scores"
    before = len(rows(gateway, "team"))
    for name, value, kind in [
        ("sentiment", "positive", "CATEGORICAL"),
        ("helpful", 1, "BOOLEAN"),
        ("latency", 1234.5, "NUMERIC"),
    ]:
        score = {"traceId": did, "name": name, "value": value, "dataType": kind}
        answer = httpx.post(url, headers=H, json=score)
        assert answer.json() == {"id": did, "status": "ignored"}, answer.text
    assert len(rows(gateway, "team")) == before
    # A score of the router's name must be a number, and is then the reward.
    wrong = httpx.post(url, headers=H, json={"traceId": did, "name": "quality", "value": "good"})
    assert wrong.status_code == 422 and "value" in wrong.json()["detail"]
    score = {"traceId": did, "name": "quality", "value": 0.5}
    assert httpx.post(url, headers=H, json=score).json() == {"id": did, "status": "applied"}


def test_requests_the_gateway_refuses(gateway: ServerProcess, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="msroute/chat"):
        client.chat.completions.create(model="gpt-4o", messages=HI)
    with pytest.raises(openai.BadRequestError, match=r"routes by context.*'code', 'chat'"):
        ask(client, "ctx")
    raw = ask(client, "ctx", context="code")
    assert raw.headers["x-msroute-team"] in ("a", "b")
    with pytest.raises(openai.BadRequestError, match="unknown expert id 'zzz'"):
        ask(client, "chat", eligible=["zzz"])
    # Closed on the way out: a client left to the collector closes its socket in whichever test
    # runs next, as a ResourceWarning there.
    wrong = openai.OpenAI(base_url=gateway.url + "/v1", api_key="wrong", max_retries=0)
    with wrong, pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert sorted(m.id for m in client.models.list()) == [
        "msroute/chat",
        "msroute/ctx",
        "msroute/daily",
        "msroute/dear",
        "msroute/team",
    ]


def test_the_budget_holds_when_calls_cost_more_than_configured(
    gateway: ServerProcess, client: openai.OpenAI
) -> None:
    """Every call of router dear bills twice its configured tokens: booked as it returns,
    the spend per query stays within the router's bound."""
    for _ in range(150):
        ask(client, "dear")
    state = httpx.get(f"{gateway.url}/v1/routers/dear", headers=H).json()
    bound = state["bounds"]["upper"]["usd"]
    spent = state["spent"]["usd"]
    assert state["decisions"] == 150
    assert spent / 150 <= bound
    # The calls did cost twice their configured price (the bookings learn it): the bound held
    # on the real dollars.
    price = {e: c["usd"] for e, c in state["expert_costs"].items()}
    teams = [r["team"] for r in rows(gateway, "dear") if r["kind"] == "decision"]
    assert spent == pytest.approx(2 * sum(price[e] for team in teams for e in team))


def test_a_daily_budget_sets_the_bound_and_is_reported(gateway: ServerProcess) -> None:
    budget = httpx.get(f"{gateway.url}/v1/routers/daily/budget", headers=H).json()
    day = budget["budget"]["periods"]["day"]
    assert day["usd"] == 5.0 and day["spent_usd"] == 0.0
    assert budget["bound_usd"] == budget["budget"]["query_bound"]
    assert any(r["kind"] == "set_bounds" for r in rows(gateway, "daily"))
    metrics = httpx.get(gateway.url + "/metrics", headers=H).text
    assert 'msroute_budget_usd{period="day",router="daily"} 5.0' in metrics


def test_a_call_journals_its_decision_cost_and_feedback(
    gateway: ServerProcess, client: openai.OpenAI
) -> None:
    did = ask(client, "chat", eligible=["a"]).headers["x-msroute-decision-id"]
    body = {"decision_id": did, "reward": 0.25}
    assert httpx.post(f"{gateway.url}/v1/feedback", headers=H, json=body).status_code == 200
    kinds = [r["kind"] for r in rows(gateway, "chat") if r.get("decision_id") == did]
    assert kinds == ["decision", "cost", "feedback"]


def test_the_config_is_checked_before_serving(tmp_path: Path) -> None:
    from msroute.errors import ConfigError
    from msroute.gateway import load_gateway_config

    config = write_config(tmp_path / "g.toml", "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=f"environment variable {KEY_ENV} is not set"):
        load_gateway_config(config, data_dir=tmp_path, environ={})
    # A key is sent as a header's value: a line break would end the header (and start another).
    with pytest.raises(ConfigError, match=f"variable {KEY_ENV} holds characters a key cannot"):
        load_gateway_config(config, data_dir=tmp_path, environ={KEY_ENV: "sk-1\r\nx-more: 1"})
    loaded = load_gateway_config(config, data_dir=tmp_path, environ={KEY_ENV: "sk-secret-9f3"})
    assert loaded.service.routers["chat"]["experts"]["a"] == {"usd": (100 * 2 + 50 * 8) / 1e6}
    assert "sk-secret-9f3" not in repr(loaded)  # the key stays in the environment


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("upstream_error_reward = nan", "must be a finite number"),
        ("upstream_error_reward = inf", "must be a finite number"),
        ("upstream_error_reward = -0.5", r"outside \[reward_min, reward_max\] = \[0, inf\]"),
        ("upstream_error_reward = 2.0\nreward_max = 1.0", r"= \[0, 1\]"),
        ("upstream_error_reward = 0.0\nreward_min = 0.5", r"= \[0.5, inf\]"),
    ],
)
def test_an_upstream_error_reward_the_router_would_refuse_stops_the_start(
    tmp_path: Path, extra: str, named: str
) -> None:
    """``upstream_error_reward`` is fed back as a reward at each failed call: one the router
    refuses (NaN: a 500 at every failure; out of its reward range: a 503) is a config error,
    as the router's own ``on_missing`` default reward is."""
    from msroute.errors import ConfigError
    from msroute.gateway import load_gateway_config

    config = write_config(tmp_path / "g.toml", "http://127.0.0.1:9/v1")
    text = config.read_text().replace("[routers.chat]\n", f"[routers.chat]\n{extra}\n", 1)
    config.write_text(text)
    match = f"routers.chat.upstream_error_reward: .*{named}"
    with pytest.raises(ConfigError, match=match):
        load_gateway_config(config, data_dir=tmp_path, environ={KEY_ENV: UPSTREAM_KEY})


def test_the_metrics_count_each_call_in_its_series() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from msroute.gateway.metrics import GatewayMetrics
    from msroute.gateway.prices import Usage

    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    for _ in range(2):
        metrics.call("r", "a", "ok", 0.25, Usage(10, 5, 0))
        metrics.observe_seconds("r", "a", 0.2)
    metrics.call("r", "b", "timeout", 0.0, None)
    text = generate_latest(registry).decode()
    assert 'msroute_upstream_calls_total{expert="a",outcome="ok",router="r"} 2.0' in text
    assert 'msroute_upstream_calls_total{expert="b",outcome="timeout",router="r"} 1.0' in text
    assert 'msroute_upstream_usd_total{expert="a",router="r"} 0.5' in text
    assert 'msroute_upstream_tokens_total{expert="a",kind="prompt",router="r"} 20.0' in text
    assert 'msroute_upstream_tokens_total{expert="a",kind="completion",router="r"} 10.0' in text
    assert 'msroute_upstream_seconds_count{expert="a",router="r"} 2.0' in text
    # Only what was counted has a series: no cached tokens, no dollars of b, no other outcome.
    assert 'kind="cached"' not in text and 'usd_total{expert="b"' not in text
    assert 'outcome="error"' not in text


def test_a_usage_no_call_bills_is_booked_at_the_calls_fallback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest

    from msroute.gateway.chat import ChatHandler
    from msroute.gateway.config import Upstream
    from msroute.gateway.metrics import GatewayMetrics
    from msroute.gateway.prices import Prices, Usage

    registry = CollectorRegistry()
    handler = SimpleNamespace(metrics=GatewayMetrics(registry))  # all that count() reads
    upstream = Upstream(
        expert="a",
        base_url="http://127.0.0.1:9",
        model="m",
        api_key_env=None,
        timeout_s=1.0,
        prices=Prices(200.0, 200.0),
    )
    huge = Usage(2**53, 2**53, 0)  # $3.6e12 at these prices: above what a router books
    with caplog.at_level("WARNING", logger="msroute.gateway"):
        usd = ChatHandler.count(handler, "r", upstream, "ok", huge, 0.004)  # type: ignore[arg-type]
    assert usd == 0.004 and "reported a usage of $3.60288e+12" in caplog.text
    assert ChatHandler.count(handler, "r", upstream, "ok", Usage(1000, 0, 0), 0.004) == 0.2  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'msroute_upstream_usd_total{expert="a",router="r"} 0.204' in text
    assert 'kind="prompt",router="r"} 1000.0' in text  # the absurd usage is not counted
