"""The HTTP API on a real server: endpoints, auth, every error class, no state change on error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

import msroute
from _server import ServerProcess
from _service import ROUTER, TIMEOUT, TOKEN, DeclaredStatuses, served
from msroute.router.rows import row_schema

pytestmark = pytest.mark.timeout(180)

CTX = {"context": "billing"}  # the test router has contexts: every decision names one


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    tmp = tmp_path_factory.mktemp("api")
    with served(tmp, {"llm": ROUTER}, service={"max_body_bytes": 4096}) as pair:
        yield pair


def problem(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = resp.json()
    assert body["status"] == status and body["title"] and body["type"] == "about:blank"
    return body


def state(client: httpx.Client) -> dict[str, Any]:
    resp = client.get("/v1/routers/llm")
    assert resp.status_code == 200
    out: dict[str, Any] = resp.json()
    return out


# --- auth -------------------------------------------------------------------------------------


def test_healthz_needs_no_token(api: tuple[ServerProcess, httpx.Client]) -> None:
    server, _ = api
    resp = httpx.get(server.url + "/healthz", timeout=TIMEOUT)
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/routers"),
        ("GET", "/v1/routers/llm"),
        ("POST", "/v1/routers/llm/decisions"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("DELETE", "/v1/routers/llm/experts/large"),
    ],
)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ],
)
def test_every_endpoint_but_healthz_needs_the_token(
    api: tuple[ServerProcess, httpx.Client], method: str, path: str, headers: dict[str, str]
) -> None:
    server, client = api
    before = state(client)
    resp = httpx.request(method, server.url + path, headers=headers, json={}, timeout=TIMEOUT)
    DeclaredStatuses(server.url)(resp)
    body = problem(resp, 401)
    assert "Authorization" in body["detail"] and TOKEN not in resp.text
    assert resp.headers["www-authenticate"].startswith("Bearer")
    assert state(client) == before


# --- endpoints --------------------------------------------------------------------------------


def test_route_and_feedback(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    before = state(client)
    resp = client.post("/v1/routers/llm/decisions", json={"context": "billing"})
    assert resp.status_code == 201, resp.text
    dec = resp.json()
    assert set(dec) == {
        "decision_id", "team", "draws", "propensities", "policy_version", "cost", "deadline"
    }  # fmt: skip
    assert len(dec["draws"]) == ROUTER["m_draws"]
    assert dec["team"] == list(dict.fromkeys(dec["draws"]))
    assert set(dec["team"]) <= set(ROUTER["experts"])
    assert dec["cost"]["usd"] == pytest.approx(sum(ROUTER["experts"][e][0] for e in dec["team"]))
    url = f"/v1/routers/llm/decisions/{dec['decision_id']}/feedback"
    assert client.post(url, json={"reward": 1.0}).json() == {"status": "applied"}
    assert client.post(url, json={"reward": 1.0}).json() == {"status": "duplicate"}
    after = state(client)
    assert after["decisions"] == before["decisions"] + 1
    assert after["feedback_applied"] == before["feedback_applied"] + 1


def test_a_cost_known_before_the_reward_is_booked(api: tuple[ServerProcess, httpx.Client]) -> None:
    """``POST .../decisions/{id}/cost`` (``Router.report_cost``) is served by ``msroute serve``
    too: the LiteLLM cost callback sends it to a ``GatewayClient`` of either server."""
    _, client = api
    dec = client.post("/v1/routers/llm/decisions", json=CTX).json()
    url = f"/v1/routers/llm/decisions/{dec['decision_id']}/cost"
    assert client.post(url, json={"cost": {"usd": 0.0042}}).json() == {"status": "applied"}
    assert client.post(url, json={"cost": {"usd": 0.0042}}).json() == {"status": "unchanged"}
    rows = client.get("/v1/routers/llm/decisions?limit=10000").text.splitlines()
    booked = [json.loads(r) for r in rows if dec["decision_id"] in r]
    assert [(r["kind"], r["cost"]) for r in booked][-1] == ("cost", {"usd": 0.0042})
    before = state(client)
    problem(client.post(url, json={"cost": {"usd": -1.0}}), 422)
    problem(client.post("/v1/routers/llm/decisions/nope/cost", json={"cost": {"usd": 1.0}}), 404)
    assert state(client) == before


def test_same_decision_id_returns_the_same_decision(
    api: tuple[ServerProcess, httpx.Client],
) -> None:
    _, client = api
    body = {"decision_id": "idem-1", "context": "tech"}
    first = client.post("/v1/routers/llm/decisions", json=body)
    before = state(client)
    again = client.post("/v1/routers/llm/decisions", json=body)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert state(client) == before


def test_eligible_experts_only(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    for _ in range(20):
        body = {"eligible": ["small", "tiny"], "context": "tech"}
        dec = client.post("/v1/routers/llm/decisions", json=body).json()
        assert set(dec["draws"]) <= {"small", "tiny"}


def test_list_routers_and_state(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    assert client.get("/v1/routers").json() == {"routers": ["llm"]}
    st = state(client)
    for key in (
        "decisions",
        "feedback_applied",
        "pending",
        "expired",
        "policy_version",
        "avg_cost",
    ):
        assert key in st
    assert set(st["avg_cost"]) == {"usd"}


def test_journal_rows_as_json_lines(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    ids = [
        client.post("/v1/routers/llm/decisions", json=CTX).json()["decision_id"] for _ in range(3)
    ]
    resp = client.get("/v1/routers/llm/decisions", params={"since": 0, "limit": 10_000})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-ndjson"
    rows = [json.loads(line) for line in resp.text.splitlines()]
    text = resp.text
    assert all(i in text for i in ids)
    assert len(rows) <= 10_000
    limited = client.get("/v1/routers/llm/decisions", params={"since": 0, "limit": 2})
    assert len(limited.text.splitlines()) == 2
    # The rows of `msroute journal export`: the API's names, valid against their schema.
    validator = jsonschema.Draft202012Validator(row_schema())
    for row in rows:
        validator.validate(row)
    mine = [r for r in rows if r["kind"] == "decision" and r["decision_id"] in ids]
    assert len(mine) == 3 and all(set(r["cost"]) == {"usd"} for r in mine)
    since = rows[-2]["seq"]
    tail = client.get("/v1/routers/llm/decisions", params={"since": since}).text.splitlines()
    assert [json.loads(line) for line in tail] == rows[-1:]


def test_journal_rows_over_http_evaluate_as_the_journal_does(tmp_path: Path) -> None:
    candidate = {"small": 0.5, "tiny": 0.5}
    data = tmp_path / "data"
    with served(tmp_path, data_dir=data) as (server, client):
        for i in range(40):
            dec = client.post("/v1/routers/llm/decisions", json=CTX).json()
            url = f"/v1/routers/llm/decisions/{dec['decision_id']}/feedback"
            body: dict[str, Any] = {"reward": (i % 5) / 4}
            if i % 3 == 0:
                body["cost"] = {"usd": 0.001 * i}
            assert client.post(url, json=body).status_code == 200
        text = client.get("/v1/routers/llm/decisions", params={"limit": 10_000}).text
        assert server.terminate() == -15
    rows = [json.loads(line) for line in text.splitlines()]
    # 40 decisions are too few for an estimate evaluate stands behind (min_ess): the two
    # sources must still give the same one.
    over_http = msroute.evaluate(rows, candidate, min_ess=0).to_dict()
    assert over_http == msroute.evaluate(data / "llm.db", candidate, min_ess=0).to_dict()


def test_add_and_remove_expert(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    resp = client.post("/v1/routers/llm/experts", json={"id": "mini", "cost": {"usd": 0.004}})
    assert resp.status_code == 201, resp.text
    assert "mini" in resp.json()["experts"]
    resp = client.delete("/v1/routers/llm/experts/mini")
    assert resp.status_code == 200, resp.text
    assert "mini" not in resp.json()["experts"]


def test_metrics(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    dec = client.post("/v1/routers/llm/decisions", json=CTX).json()
    client.post(f"/v1/routers/llm/decisions/{dec['decision_id']}/feedback", json={"reward": 0.5})
    resp = client.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    st = state(client)
    for family in (
        "msroute_decisions_total",
        'msroute_feedback_total{router="llm",status="applied"}',
        "msroute_feedback_delay_seconds_bucket",
        'msroute_pending_decisions{router="llm"}',
        'msroute_expired_decisions{router="llm"}',
        'msroute_policy_version{router="llm"}',
        'msroute_avg_cost{cost="usd",router="llm"}',
        'msroute_cost_bound{cost="usd",router="llm",side="upper"} 0.02',
        "msroute_request_duration_seconds_bucket",
        'msroute_feedback_reward_count{router="llm"}',
        'msroute_feedback_reward_sum{router="llm"}',
    ):
        assert family in text, family
    line = next(x for x in text.splitlines() if x.startswith("msroute_journal_decisions{"))
    assert float(line.split()[-1]) >= st["decisions"] - 1


def _reward_metrics(client: httpx.Client) -> tuple[float, float]:
    text = client.get("/metrics").text
    values = {
        line.split("{")[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("msroute_feedback_reward_") and 'router="llm"' in line
    }
    return values["msroute_feedback_reward_sum"], values["msroute_feedback_reward_count"]


def test_reward_metrics_give_the_mean_reward(api: tuple[ServerProcess, httpx.Client]) -> None:
    """The first feedback of each decision adds its reward to the router's reward sum and
    count (a repeat, answered duplicate, does not), so a window's mean reward is their rates'
    ratio."""
    _, client = api
    total, count = _reward_metrics(client)
    for reward in (0.25, 1.0):
        dec = client.post("/v1/routers/llm/decisions", json=CTX).json()
        url = f"/v1/routers/llm/decisions/{dec['decision_id']}/feedback"
        assert client.post(url, json={"reward": reward}).json() == {"status": "applied"}
    assert client.post(url, json={"reward": 1.0}).json() == {"status": "duplicate"}
    after_total, after_count = _reward_metrics(client)
    assert (after_total - total, after_count - count) == (1.25, 2.0)


# --- errors -----------------------------------------------------------------------------------

BAD_REQUESTS: list[tuple[str, str, Any, int, str]] = [
    # method, path, JSON body (or raw bytes), status, text the detail must contain
    ("POST", "/v1/routers/nope/decisions", {}, 404, "nope"),
    ("GET", "/v1/routers/nope", None, 404, "nope"),
    ("POST", "/v1/routers/llm/decisions/no-such-id/feedback", {"reward": 1.0}, 404, "no-such-id"),
    ("POST", "/v1/routers/llm/decisions", {"context": "weather"}, 422, "context"),
    ("POST", "/v1/routers/llm/decisions", {}, 422, "context"),
    ("POST", "/v1/routers/llm/decisions", {**CTX, "eligible": ["gpt-9"]}, 422, "gpt-9"),
    ("POST", "/v1/routers/llm/decisions", {**CTX, "eligible": []}, 422, "eligible"),
    ("POST", "/v1/routers/llm/decisions", {"contxt": "billing"}, 422, "contxt"),
    ("POST", "/v1/routers/llm/decisions", {"decision_id": "a/b"}, 422, "decision_id"),
    ("POST", "/v1/routers/llm/decisions", b"{not json", 400, "JSON"),
    ("POST", "/v1/routers/llm/decisions", b'{"context": "' + b"x" * 5000 + b'"}', 413, "limit"),
    ("POST", "/v1/routers/llm/experts", b'{"id": "x", "cost": {"usd": NaN}}', 422, "cost"),
    ("POST", "/v1/routers/llm/experts", {"id": "x", "cost": {"eur": 0.01}}, 422, "eur"),
    ("POST", "/v1/routers/llm/experts", {"id": "x", "cost": {"usd": -1.0}}, 422, "cost"),
    ("POST", "/v1/routers/llm/experts", {"id": "x", "cost": {"usd": 1e300}}, 422, "cost.usd"),
    ("DELETE", "/v1/routers/llm/experts/gpt-9", None, 422, "gpt-9"),
    ("POST", "/v1/routers/llm/experts", {"id": "large", "cost": {"usd": 0.01}}, 422, "large"),
    ("GET", "/v1/routers/llm/decisions?since=-1", None, 422, "since"),
    ("GET", "/v1/routers/llm/decisions?limit=0", None, 422, "limit"),
    ("GET", "/v1/routers/llm/decisions?limit=10001", None, 422, "limit"),
    # Integers beyond what a journal can hold are refused before they reach SQLite.
    ("GET", f"/v1/routers/llm/decisions?since={2**63}", None, 422, "since"),
    ("GET", "/v1/routers/llm/decisions?since=" + "9" * 40, None, 422, "since"),
    ("GET", "/v1/routers/llm/decisions?limit=" + "9" * 40, None, 422, "limit"),
    # Strict types: a string, a boolean or a number where the schema says otherwise is refused.
    ("POST", "/v1/routers/llm/decisions", {"context": 5}, 422, "context"),
    ("POST", "/v1/routers/llm/decisions", {"context": True}, 422, "context"),
    ("POST", "/v1/routers/llm/decisions", {**CTX, "eligible": ["small", 3]}, 422, "eligible"),
    ("POST", "/v1/routers/llm/decisions", {**CTX, "eligible": "small"}, 422, "eligible"),
    ("POST", "/v1/routers/llm/decisions", {**CTX, "decision_id": 17}, 422, "decision_id"),
    ("POST", "/v1/routers/llm/experts", {"id": "x", "cost": {"usd": "0.01"}}, 422, "cost"),
    ("POST", "/v1/routers/llm/experts", {"id": "x", "cost": {"usd": True}}, 422, "cost"),
    ("POST", "/v1/routers/llm/experts", {"id": 7, "cost": {"usd": 0.01}}, 422, "id"),
    # A lone surrogate is not a string pydantic accepts; the answer names the field.
    ("POST", "/v1/routers/llm/decisions", b'{"context": "\\ud800"}', 422, "context"),
    # Nesting is bounded before any parser sees the body.
    ("POST", "/v1/routers/llm/decisions", b"[" * 1500 + b"]" * 1500, 400, "nested"),
    (
        "POST",
        "/v1/routers/llm/experts",
        b'{"id": "x", "cost": ' + b"[" * 1500 + b"]" * 1500 + b"}",
        400,
        "nested",
    ),
    ("POST", "/v1/routers/llm/decisions", b'{"context": 1' + b"0" * 5000 + b"}", 413, "limit"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "named"), BAD_REQUESTS)
def test_error_classes_change_nothing(
    api: tuple[ServerProcess, httpx.Client],
    method: str,
    path: str,
    body: Any,
    status: int,
    named: str,
) -> None:
    _, client = api
    before = state(client)
    if isinstance(body, bytes):
        headers = {"Content-Type": "application/json"}
        resp = client.request(method, path, content=body, headers=headers)
    elif body is None:
        resp = client.request(method, path)
    else:
        resp = client.request(method, path, json=body)
    detail = problem(resp, status)["detail"]
    assert named in detail
    assert state(client) == before


def test_feedback_errors_name_the_field(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    dec = client.post("/v1/routers/llm/decisions", json=CTX).json()
    url = f"/v1/routers/llm/decisions/{dec['decision_id']}/feedback"
    before = state(client)
    cases: list[tuple[bytes, int, str]] = [
        (b'{"reward": NaN}', 422, "reward"),
        (b'{"reward": Infinity}', 422, "reward"),
        (b'{"reward": "high"}', 422, "reward"),
        (b'{"reward": "0.8"}', 422, "reward"),
        (b'{"reward": " 1e0 "}', 422, "reward"),
        (b'{"reward": true}', 422, "reward"),
        (b'{"reward": null}', 422, "reward"),
        (b'{"reward": [0.8]}', 422, "reward"),
        (b'{"reward": 1.0, "cost": {"usd": "0.01"}}', 422, "cost"),
        (b'{"reward": 1.0, "cost": {"usd": false}}', 422, "cost"),
        (b'{"reward": ' + b"[" * 100 + b"]" * 100 + b"}", 400, "nested"),
        (b"{}", 422, "reward"),
        (b'{"reward": 1e9}', 422, "reward"),
        (b'{"reward": 1.0, "cost": {"eur": 0.1}}', 422, "eur"),
        (b'{"reward": 1.0, "cost": {"usd": -0.1}}', 422, "cost"),
        (b'{"reward": 1.0, "cost": {"usd": 1e300}}', 422, "cost.usd"),
        (b'{"reward": 1.0, "rewrd": 2}', 422, "rewrd"),
    ]
    for raw, status, named in cases:
        resp = client.post(url, content=raw, headers={"Content-Type": "application/json"})
        assert named in problem(resp, status)["detail"], raw
    assert state(client) == before
    assert client.post(url, json={"reward": 1.0}).json() == {"status": "applied"}


def test_a_repeated_feedback_is_validated_and_compared_with_the_first(
    api: tuple[ServerProcess, httpx.Client],
) -> None:
    _, client = api
    dec = client.post("/v1/routers/llm/decisions", json=CTX).json()
    url = f"/v1/routers/llm/decisions/{dec['decision_id']}/feedback"
    first = {"reward": 0.75, "cost": {"usd": 0.004}}
    assert client.post(url, json=first).json() == {"status": "applied"}
    before = state(client)
    rows = len(client.get("/v1/routers/llm/decisions", params={"limit": 10_000}).text.splitlines())
    # A bad value is refused as it would be the first time, not answered "duplicate".
    for bad, named in (
        ({"reward": 0.75, "cost": {"eur": 0.004}}, "eur"),
        ({"reward": 0.75, "cost": {"usd": -0.004}}, "cost"),
        ({"reward": 7.5}, "reward"),
    ):
        assert named in problem(client.post(url, json=bad), 422)["detail"]
    # Another outcome for the same decision is a conflict: the first one stands.
    for other in (
        {"reward": 0.5, "cost": {"usd": 0.004}},
        {"reward": 0.75},
        {**first, "cost": {"usd": 0.005}},
    ):
        detail = problem(client.post(url, json=other), 409)["detail"]
        assert dec["decision_id"] in detail and "0.75" in detail
    # The same request again is a retry.
    assert client.post(url, json=first).json() == {"status": "duplicate"}
    assert state(client) == before
    after = client.get("/v1/routers/llm/decisions", params={"limit": 10_000}).text.splitlines()
    assert len(after) == rows  # nothing journaled


def test_bounds_change_at_runtime(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    url = "/v1/routers/llm"
    resp = client.patch(url, json={"upper": {"usd": 0.025}})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"upper": {"usd": 0.025}, "lower": {}}
    assert state(client)["bounds"]["upper"] == {"usd": 0.025}
    assert (
        'msroute_cost_bound{cost="usd",router="llm",side="upper"} 0.025'
        in client.get("/metrics").text
    )
    before = state(client)
    for body, status, named in (
        ({"upper": {"usd": 0.0001}}, 409, "usd"),  # no routing of the experts meets it
        ({"upper": {"eur": 0.02}}, 422, "eur"),
        ({"upper": {"usd": "0.02"}}, 422, "upper"),
        ({"upper": {"usd": True}}, 422, "upper"),
        ({"upper": {"usd": 0.02}, "lower": {"usd": 0.03}}, 422, "usd"),
        ({"budget": {"usd": 0.02}}, 422, "budget"),
        # The range of costs and bounds, |x| <= 1e12 (1e308 answered 500)
        ({"upper": {"usd": 1e308}}, 422, "upper.usd"),
        ({"upper": {"usd": 1.0000001e12}}, 422, "upper.usd"),
        ({"lower": {"usd": -1e13}}, 422, "lower.usd"),
    ):
        assert named in problem(client.patch(url, json=body), status)["detail"], body
    assert state(client) == before
    assert client.patch(url, json={"upper": {"usd": None}}).json()["upper"] == {}
    assert 'side="upper"' not in client.get("/metrics").text  # a removed bound leaves the gauge
    assert client.patch(url, json={"upper": {"usd": ROUTER["constraints"]["upper"]["usd"]}})
    assert 'msroute_cost_bound{cost="usd",router="llm",side="upper"} 0.02' in (
        client.get("/metrics").text
    )
    assert state(client)["bounds"]["upper"] == ROUTER["constraints"]["upper"]


def test_runtime_changes_last_over_a_restart_and_the_files_later_edits_win(
    tmp_path: Path,
) -> None:
    """A bound lowered, an expert added and an expert repriced over HTTP are journaled and
    kept at a restart with the same config file (the OpenAPI text says so). A file edited
    afterwards wins where it changed something: its bound, and the price of the expert added
    over HTTP once the file lists it (which it may: the id was never removed)."""
    data = tmp_path / "data"
    with served(tmp_path, data_dir=data) as (server, client):
        assert client.patch("/v1/routers/llm", json={"upper": {"usd": 0.018}}).status_code == 200
        added = {"id": "mini", "cost": {"usd": 0.004}}
        assert client.post("/v1/routers/llm/experts", json=added).status_code == 201
        resp = client.patch("/v1/routers/llm/experts/small", json={"cost": {"usd": 0.0015}})
        assert resp.status_code == 200 and resp.json() == {"id": "small", "cost": {"usd": 0.0015}}
        client.post("/v1/routers/llm/decisions", json=CTX)
        doc = client.get("/openapi.json").json()["paths"]
        assert "restart keeps" in doc["/v1/routers/{name}"]["patch"]["description"]
        assert "restart keeps" in doc["/v1/routers/{name}/experts"]["post"]["description"]
        kept = state(client)
        assert server.terminate() == -15
    with served(tmp_path, data_dir=data) as (server, client):  # the same file
        assert state(client) == kept
        assert kept["bounds"]["upper"] == {"usd": 0.018}
        assert kept["expert_costs"]["mini"] == {"usd": 0.004}
        assert kept["expert_costs"]["small"] == {"usd": 0.0015}
        assert server.terminate() == -15
    edited = {
        **ROUTER,
        "experts": {**ROUTER["experts"], "mini": [0.005]},
        "constraints": {"upper": {"usd": 0.019}},
    }
    with served(tmp_path, {"llm": edited}, data_dir=data) as (_, client):
        now = state(client)
        assert now["bounds"]["upper"] == {"usd": 0.019}  # the file's edit
        assert now["expert_costs"]["mini"] == {"usd": 0.005}  # listed and priced by the file
        assert now["expert_costs"]["small"] == {"usd": 0.0015}  # the file left it: runtime's
    assert "configuration change applied" in (tmp_path / "server.log").read_text()


def test_an_experts_price_changes_at_runtime(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    url = "/v1/routers/llm/experts/medium"
    resp = client.patch(url, json={"cost": {"usd": 0.011}})
    assert resp.status_code == 200 and resp.json() == {"id": "medium", "cost": {"usd": 0.011}}
    assert state(client)["expert_costs"]["medium"] == {"usd": 0.011}
    dec = client.post("/v1/routers/llm/decisions", json={**CTX, "eligible": ["medium"]}).json()
    assert dec["cost"] == {"usd": 0.011}
    rows = client.get("/v1/routers/llm/decisions", params={"limit": 10_000}).text.splitlines()
    assert any(json.loads(r)["kind"] == "set_cost" for r in rows)
    before = state(client)
    for path, body, status, named in (
        ("/v1/routers/llm/experts/gpt-9", {"cost": {"usd": 0.01}}, 422, "gpt-9"),
        (url, {"cost": {"eur": 0.01}}, 422, "eur"),
        (url, {"cost": {"usd": -0.01}}, 422, "cost"),
        (url, {"cost": {"usd": "0.01"}}, 422, "cost"),
        (url, {"price": {"usd": 0.01}}, 422, "price"),
    ):
        assert named in problem(client.patch(path, json=body), status)["detail"], body
    assert state(client) == before
    # The two cheapest experts priced up: at the second, no routing meets the budget.
    assert client.patch("/v1/routers/llm/experts/tiny", json={"cost": {"usd": 1.0}}).is_success
    before = state(client)
    expensive = client.patch("/v1/routers/llm/experts/small", json={"cost": {"usd": 1.0}})
    assert "usd" in problem(expensive, 409)["detail"]
    assert state(client) == before
    assert client.patch("/v1/routers/llm/experts/tiny", json={"cost": {"usd": 0.001}}).is_success
    assert client.patch(url, json={"cost": {"usd": 0.012}}).status_code == 200  # as configured


def test_a_lone_surrogate_in_a_name_is_422_naming_it(
    api: tuple[ServerProcess, httpx.Client],
) -> None:
    """A JSON escape can spell a lone surrogate, which UTF-8 cannot encode: a cost name made of
    one is refused (422, naming the field; quoted escaped in an ASCII problem document), never
    500, and changes nothing; a value made of one is refused by the schema."""
    _, client = api
    before = state(client)
    did = client.post("/v1/routers/llm/decisions", json=CTX).json()["decision_id"]
    lone = '"\\ud800"'
    for method, path, raw, named in (
        ("PATCH", "/v1/routers/llm", '{"upper": {%s: 0.1}}', "upper."),
        ("PATCH", "/v1/routers/llm", '{"lower": {%s: null}}', "lower."),
        ("POST", "/v1/routers/llm/experts", '{"id": "new", "cost": {%s: 0.1}}', "cost"),
        (
            "POST",
            f"/v1/routers/llm/decisions/{did}/feedback",
            '{"reward": 0.5, "cost": {%s: 1}}',
            "cost",
        ),
        ("POST", "/v1/routers/llm/decisions", '{"context": %s}', "context"),
    ):
        resp = client.request(
            method,
            path,
            content=(raw % lone).encode(),
            headers={"Content-Type": "application/json"},
        )
        if method == "PATCH":  # the name quoted, escaped, as sent
            assert b"\\ud800" in resp.content, resp.content
        assert named in problem(resp, 422)["detail"], raw
    after = state(client)
    assert after["decisions"] == before["decisions"] + 1 and after["bounds"] == before["bounds"]
    assert after["pending"] == before["pending"] + 1  # the feedback was not applied


def test_infeasible_removal_is_409(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    # Without the two cheap experts the budget of 0.02 per decision cannot be met.
    assert client.delete("/v1/routers/llm/experts/tiny").status_code == 200
    before = state(client)
    body = problem(client.delete("/v1/routers/llm/experts/small"), 409)
    assert "usd" in body["detail"]
    assert state(client) == before
    assert client.post("/v1/routers/llm/experts", json={"id": "tiny2", "cost": {"usd": 0.001}})


def test_a_retried_decision_id_returns_its_decision_and_another_request_is_409(
    api: tuple[ServerProcess, httpx.Client],
) -> None:
    _, client = api
    url = "/v1/routers/llm/decisions"
    first = client.post(url, json={**CTX, "eligible": ["large", "small"], "decision_id": "retry-1"})
    assert first.status_code == 201
    before = state(client)
    again = client.post(url, json={**CTX, "eligible": ["small", "large"], "decision_id": "retry-1"})
    assert again.status_code == 201 and again.json() == first.json()
    for other in ({"context": "tech"}, {**CTX, "eligible": ["large"]}):
        body = problem(client.post(url, json={**other, "decision_id": "retry-1"}), 409)
        assert "retry-1" in body["detail"]
    assert state(client) == before


def test_non_json_body_is_refused(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    before = state(client)
    for kind in ("text/plain", "text/json", "application/x-json", "application/jsonx"):
        resp = client.post(
            "/v1/routers/llm/decisions", content=b"{}", headers={"Content-Type": kind}
        )
        assert "Content-Type" in problem(resp, 415)["detail"], kind
    assert state(client) == before
    resp = client.post(  # JSON by FastAPI's rule: application/<anything>+json
        "/v1/routers/llm/decisions",
        content=json.dumps(CTX).encode(),
        headers={"Content-Type": "application/x+json"},
    )
    assert resp.status_code == 201, resp.text


def test_chunked_body_over_the_limit_is_413(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    before = state(client)

    def chunks() -> Iterator[bytes]:
        yield b'{"context": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    resp = client.post(
        "/v1/routers/llm/decisions", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert "limit" in problem(resp, 413)["detail"]
    assert state(client) == before


def test_unknown_path_is_a_problem(api: tuple[ServerProcess, httpx.Client]) -> None:
    _, client = api
    problem(client.get("/v2/anything"), 404)
    problem(client.put("/v1/routers/llm"), 405)


def test_no_auth_server_on_loopback(tmp_path: Path) -> None:
    with served(tmp_path, token=None) as (server, _):
        resp = httpx.post(server.url + "/v1/routers/llm/decisions", json=CTX, timeout=TIMEOUT)
        assert resp.status_code == 201
