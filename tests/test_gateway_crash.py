"""A gateway killed with SIGKILL mid-traffic loses no acknowledged decision: every answer a
client got (its decision id in x-msroute-decision-id) is in the journal, booked at what its
upstream billed, at either ``journal_sync`` level, while concurrent requests share their
journal transactions (the commit groups hold more than one call each on average)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from _gateway import expert, gateway_process
from _server import free_port
from _service import TOKEN
from _upstream import StubUpstream
from msroute.router import Router

pytestmark = pytest.mark.timeout(300)

#: Dollars each expert's call bills: its usage (prompt 120, completion 30) times its prices.
BILLED = {"a": (120 * 1.0 + 30 * 2.0) / 1e6, "b": (120 * 3.0 + 30 * 6.0) / 1e6}


def _commit_counts(url: str) -> tuple[float, float]:
    """Router ``chat``'s commit groups and the calls they held, from the gateway's metrics."""
    metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    counts = {}
    for line in metrics.splitlines():
        for name in ("msroute_commit_groups", "msroute_commit_calls"):
            if line.startswith(name + '{router="chat"}'):
                counts[name] = float(line.split()[-1])
    return counts["msroute_commit_groups"], counts["msroute_commit_calls"]


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_sigkill_mid_traffic_loses_no_acknowledged_decision(tmp_path: Path, sync: str) -> None:
    with StubUpstream(free_port()) as stub:
        behaviour = "prompt=120&completion=30&latency_ms=5"
        config = tmp_path / "gateway.toml"
        config.write_text(
            f"""
[routers.chat]
policy = "omd"
m_draws = 1
journal_sync = "{sync}"
expected_tokens = {{ input = 100, output = 20 }}
[routers.chat.experts.a]
{expert(stub.base_url, behaviour, 1.0, 2.0)}
[routers.chat.experts.b]
{expert(stub.base_url, behaviour, 3.0, 6.0)}
"""
        )
        server = gateway_process(config, tmp_path / "data", tmp_path / "gateway.log")
        acked: dict[str, str] = {}  # decision id -> team
        stop = threading.Event()

        def client() -> None:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            body = {"model": "msroute/chat", "messages": [{"role": "user", "content": "hi"}]}
            with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
                for _ in range(500):  # bounded
                    if stop.is_set():
                        return
                    try:
                        answer = http.post("/v1/chat/completions", json=body)
                    except httpx.HTTPError:
                        return  # the server is gone
                    if answer.status_code == 200:
                        acked[answer.headers["x-msroute-decision-id"]] = answer.headers[
                            "x-msroute-team"
                        ]

        with server:
            threads = [threading.Thread(target=client) for _ in range(12)]
            for thread in threads:
                thread.start()
            try:
                deadline = time.monotonic() + 120
                while len(acked) < 80 and time.monotonic() < deadline:
                    time.sleep(0.02)
                groups, calls = _commit_counts(server.url)
                while len(acked) < 160 and time.monotonic() < deadline:
                    time.sleep(0.02)
                server.kill()  # mid-traffic: requests are in flight
            finally:
                stop.set()
                for thread in threads:
                    thread.join(30)
        assert len(acked) >= 160
        assert calls > 1.2 * groups  # concurrent calls were committed together
    router = Router.open(tmp_path / "data" / "chat.db")
    try:
        rows = router.export_rows(0, 100_000)
    finally:
        router.close()
    decided = {r["decision_id"]: r["team"] for r in rows if r["kind"] == "decision"}
    booked = {r["decision_id"]: r["cost"]["usd"] for r in rows if r["kind"] == "cost"}
    for did, team in acked.items():
        assert decided[did] == [team]
        assert booked[did] == pytest.approx(BILLED[team])
