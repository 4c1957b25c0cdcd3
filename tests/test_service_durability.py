"""Crash safety of the service: SIGKILL under load, SIGTERM, and determinism after a restart.

- A server killed with SIGKILL while concurrent clients route and send feedback is restarted
  on the same journal: every acknowledged decision is there (asking again with its id returns
  the acknowledged answer) and every acknowledged feedback is too (sending it again is a
  duplicate). A control server that never stopped, given the same events in the journal's order,
  has the same state, and both make the same next decisions.
- SIGTERM under load: the server exits 0, the journal is closed cleanly (no WAL or tail left
  behind, integrity check passes) and holds every acknowledged event.

Both run at ``journal_sync = "full"`` and at ``"normal"`` (the journal's tail).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from _server import ServerProcess
from _service import AUTH, ROUTER, TIMEOUT, served

pytestmark = pytest.mark.timeout(240)

CLIENTS = 8
MAX_PAIRS = 4000  # per test, a cap: the kill comes long before
CONTEXTS = ROUTER["contexts"]


def reward_of(decision_id: str) -> float:
    """A reward fixed by the id, so a replay sends the very same value."""
    return (sum(decision_id.encode()) % 97) / 96


class Acked:
    """What the server acknowledged before it was stopped."""

    def __init__(self) -> None:
        self.decisions: dict[str, dict[str, Any]] = {}
        self.feedback: dict[str, str] = {}


async def load(url: str, acked: Acked, stop: asyncio.Event) -> None:
    """CLIENTS concurrent clients: route (own ids, alternating contexts), then send feedback."""

    async def one(c: int) -> None:
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=TIMEOUT) as client:
            for i in range(MAX_PAIRS // CLIENTS):
                if stop.is_set():
                    return
                decision_id = f"c{c}-{i}"
                try:
                    resp = await client.post(
                        "/v1/routers/llm/decisions",
                        json={"decision_id": decision_id, "context": CONTEXTS[i % 2]},
                    )
                    if resp.status_code != 201:
                        return
                    acked.decisions[decision_id] = resp.json()
                    resp = await client.post(
                        f"/v1/routers/llm/decisions/{decision_id}/feedback",
                        json={"reward": reward_of(decision_id)},
                    )
                    if resp.status_code != 200:
                        return
                    acked.feedback[decision_id] = resp.json()["status"]
                except httpx.TransportError:  # the server went away mid-request
                    return

    await asyncio.gather(*(one(c) for c in range(CLIENTS)))


async def load_then_signal(server: ServerProcess, acked: Acked, after: int, how: str) -> int:
    """Run the load; once ``after`` pairs are acknowledged, stop the server with ``how``."""
    stop = asyncio.Event()
    task = asyncio.create_task(load(server.url, acked, stop))
    deadline = time.monotonic() + 120
    while len(acked.feedback) < after and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.01)
    assert len(acked.feedback) >= after, "the load did not get going"
    code = await asyncio.to_thread(server.kill if how == "kill" else server.terminate)
    stop.set()
    await task
    return code


def comparable(decision: dict[str, Any]) -> dict[str, Any]:
    """A decision without its wall-clock deadline."""
    return {k: v for k, v in decision.items() if k != "deadline"}


def context_of(decision_id: str) -> str:
    return CONTEXTS[int(decision_id.rsplit("-", 1)[1]) % 2]


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_sigkill_under_load_loses_no_acknowledged_event(tmp_path: Path, sync: str) -> None:
    """At "normal" the killed server's last events are in the journal's tail (each group one
    frame of it): the restart folds them in."""
    data = tmp_path / "data"
    data.mkdir()
    routers = {"llm": {**ROUTER, "journal_sync": sync}}
    acked = Acked()
    with served(tmp_path, routers, data_dir=data) as (server, _):
        code = asyncio.run(load_then_signal(server, acked, after=300, how="kill"))
    assert code == -9
    assert (data / "llm.db-tail").exists() == (sync == "normal")

    with served(tmp_path, routers, data_dir=data) as (_, client):
        recovered = client.get("/v1/routers/llm").json()
        assert recovered["decisions"] >= len(acked.decisions)
        assert recovered["feedback_applied"] >= len(acked.feedback)
        rows = journal_rows(client)
        # Every acknowledged decision is there: asking again returns the acknowledged answer.
        for decision_id, decision in acked.decisions.items():
            body = {"decision_id": decision_id, "context": context_of(decision_id)}
            assert client.post("/v1/routers/llm/decisions", json=body).json() == decision
        # Every acknowledged feedback is there: sending it again is a duplicate.
        for decision_id in acked.feedback:
            resp = client.post(
                f"/v1/routers/llm/decisions/{decision_id}/feedback",
                json={"reward": reward_of(decision_id)},
            )
            assert resp.json() == {"status": "duplicate"}
        assert client.get("/v1/routers/llm").json() == recovered
        after_restart = next_decisions(client)

    # A server that never stopped, given the same events in the journal's order.
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    with served(control_dir, routers) as (_, control):
        replay(control, rows)
        assert comparable_state(control.get("/v1/routers/llm").json()) == comparable_state(
            recovered
        )
        assert next_decisions(control) == after_restart


def next_decisions(client: httpx.Client) -> list[dict[str, Any]]:
    """Twenty more decisions with fixed ids and contexts, without their wall-clock deadlines."""
    out = []
    for i in range(20):
        body = {"decision_id": f"next-{i}", "context": CONTEXTS[i % 2]}
        out.append(comparable(client.post("/v1/routers/llm/decisions", json=body).json()))
    return out


def journal_rows(client: httpx.Client) -> list[dict[str, Any]]:
    resp = client.get("/v1/routers/llm/decisions", params={"since": 0, "limit": 10_000})
    assert resp.status_code == 200
    return [json.loads(line) for line in resp.text.splitlines()]


def comparable_state(state: dict[str, Any]) -> dict[str, Any]:
    return state


def replay(client: httpx.Client, rows: list[dict[str, Any]]) -> None:
    """Send the journal's events to ``client`` in order: its decisions and its feedback."""
    for row in rows:
        if row["kind"] == "decision":
            body = {"decision_id": row["decision_id"], "context": row["context"]}
            if row["eligible"] is not None:
                body["eligible"] = row["eligible"]
            assert client.post("/v1/routers/llm/decisions", json=body).status_code == 201
        elif row["kind"] == "feedback":
            fb: dict[str, Any] = {"reward": row["reward"]}
            if row["cost"] is not None:
                fb["cost"] = row["cost"]
            url = f"/v1/routers/llm/decisions/{row['decision_id']}/feedback"
            resp = client.post(url, json=fb)
            assert resp.json() == {"status": row["status"]}
        else:  # no expiry (long TTL) and no change of experts in this test
            raise AssertionError(f"unexpected journal event {row['kind']}")


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_sigterm_finishes_and_closes_the_journal(tmp_path: Path, sync: str) -> None:
    acked = Acked()
    with served(tmp_path, {"llm": {**ROUTER, "journal_sync": sync}}) as (server, _):
        code = asyncio.run(load_then_signal(server, acked, after=100, how="term"))
    # uvicorn shuts down gracefully, then re-raises the signal it caught: the process ends by
    # SIGTERM, as a service manager expects; the log shows the orderly shutdown first.
    assert code == -signal.SIGTERM
    journal = tmp_path / "data" / "llm.db"
    assert not Path(f"{journal}-wal").exists() or Path(f"{journal}-wal").stat().st_size == 0
    assert not Path(f"{journal}-tail").exists()  # at "normal": folded into the file, removed
    with contextlib.closing(sqlite3.connect(journal)) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    text = (tmp_path / "server.log").read_text()
    assert "router llm: created journal" in text and "router llm: journal closed" in text
    from msroute.router import Router

    router = Router.open(journal)
    try:
        st = router.state()
        assert st["decisions"] >= len(acked.decisions)
        assert st["feedback_applied"] >= len(acked.feedback)
    finally:
        router.close()
