"""Health and journal failures over HTTP: a router that cannot write is a 503 everywhere.

In process (the ASGI app over started routers, no server): every commit of one router's journal
fails as on a full disk. The decision that needed it is a 503 problem+json naming the disk,
``/healthz`` is 503 naming the router and why, ``/metrics`` flags it and still shows the other
router, nothing was acknowledged; once the disk takes writes again the next call succeeds and
``/healthz`` is 200 again. A flood of probes while a router must be reopened costs one rebuild,
and no answer names a journal's path.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from _service import AUTH, ROUTER, TOKEN, write_config
from msroute.errors import JournalError
from msroute.router import Router
from msroute.router.journal import Journal
from msroute.service import create_app, load_service_config
from msroute.service.owner import PROBE_INTERVAL_S, REOPEN_INTERVAL_S
from msroute.service.problems import PROBLEM_JSON, STATUS_OF, msroute_problem
from msroute.service.routers import ServedRouters

pytestmark = pytest.mark.timeout(120)


def test_a_journal_error_is_503() -> None:
    assert dict(STATUS_OF)[JournalError] == 503
    response = msroute_problem(JournalError("j.db: database or disk is full"), "POST /x")
    assert response.status_code == 503 and response.media_type == PROBLEM_JSON


def test_a_full_disk_is_503_and_unhealthy_until_it_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_service_config(
        write_config(tmp_path / "s.toml", {"llm": ROUTER, "other": ROUTER}), data_dir=tmp_path
    )
    real_commit = Journal.commit
    full = {"disk": False}

    def commit(self: Journal) -> None:  # the disk of router llm's journal fills up
        if full["disk"] and self.path is not None and self.path.name == "llm.db":
            raise sqlite3.OperationalError("database or disk is full")
        real_commit(self)

    monkeypatch.setattr(Journal, "commit", commit)

    async def main() -> dict[str, Any]:
        routers = ServedRouters(config)
        await routers.start()
        app = create_app(config, token=TOKEN, routers=routers)
        out: dict[str, Any] = {}
        transport = httpx.ASGITransport(app=app)
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://test", headers=AUTH
            ) as client:
                decide = "/v1/routers/llm/decisions"
                out["healthy"] = await client.get("/healthz")
                out["before"] = (await client.get("/v1/routers/llm")).json()["decisions"]
                full["disk"] = True
                out["failed"] = await client.post(decide, json={"context": "tech"})
                out["sick"] = await client.get("/healthz")
                await client.post("/v1/routers/other/decisions", json={"context": "tech"})
                out["metrics"] = await client.get("/metrics")
                full["disk"] = False
                out["after"] = (await client.get("/v1/routers/llm")).json()["decisions"]
                out["recovered"] = await client.post(decide, json={"context": "tech"})
                out["healthy_again"] = await client.get("/healthz")
                out["metrics_again"] = await client.get("/metrics")
        finally:
            await routers.stop()
        return out

    out = asyncio.run(main())
    assert out["healthy"].status_code == 200 and out["healthy"].json() == {"status": "ok"}
    failed = out["failed"]
    assert failed.status_code == 503, failed.text
    assert failed.headers["content-type"] == PROBLEM_JSON
    assert "disk is full" in failed.json()["detail"]
    sick = out["sick"]
    assert sick.status_code == 503 and sick.headers["content-type"] == PROBLEM_JSON
    assert set(sick.json()["routers"]) == {"llm"} and "llm" in sick.json()["detail"]
    # /metrics still answers: the failing router is flagged, the other one's state is fresh.
    metrics = out["metrics"]
    assert metrics.status_code == 200, metrics.text[:200]
    assert 'msroute_journal_writable{router="llm"} 0.0' in metrics.text
    assert 'msroute_journal_writable{router="other"} 1.0' in metrics.text
    assert 'msroute_journal_decisions{router="other"} 1.0' in metrics.text
    assert 'msroute_journal_writable{router="llm"} 1.0' in out["metrics_again"].text
    assert out["after"] == out["before"]  # nothing of the failed call was kept
    assert out["recovered"].status_code == 201, out["recovered"].text
    assert out["healthy_again"].status_code == 200


def test_a_healthz_flood_shares_one_rebuild_and_no_answer_names_a_journal_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router whose write failed and whose journal could not be read back must be reopened
    (a full rebuild). Unauthenticated /healthz probes arriving meanwhile share one check, and
    within ``PROBE_INTERVAL_S`` of it are answered from it: a flood costs one rebuild, not one
    per probe. No answer (the 503 of /healthz, the 503 of a call) names the journal's path;
    the router is named instead. Once the disk recovers, a probe after the interval reopens
    the router and /healthz is 200."""
    config = load_service_config(
        write_config(tmp_path / "s.toml", {"llm": ROUTER}), data_dir=tmp_path
    )
    journal = str(config.routers["llm"]["journal"])
    real_commit, real_rebuild = Journal.commit, Router._rebuild
    broken = {"disk": False}
    rebuilds: list[float] = []

    def commit(self: Journal) -> None:
        if broken["disk"]:
            raise sqlite3.OperationalError("disk I/O error")
        real_commit(self)

    def rebuild(self: Router) -> None:
        rebuilds.append(time.monotonic())
        if broken["disk"]:
            raise JournalError(f"{journal}: cannot read the journal: disk I/O error")
        real_rebuild(self)

    monkeypatch.setattr(Journal, "commit", commit)
    monkeypatch.setattr(Router, "_rebuild", rebuild)

    async def main() -> dict[str, Any]:
        routers = ServedRouters(config)
        await routers.start()
        app = create_app(config, token=TOKEN, routers=routers)
        out: dict[str, Any] = {}
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://test"
            ) as client:
                broken["disk"] = True
                out["failed"] = await client.post(
                    "/v1/routers/llm/decisions", json={"context": "tech"}, headers=AUTH
                )
                assert routers.owners["llm"]._router.needs_reopen  # type: ignore[union-attr]
                rebuilds.clear()
                await asyncio.sleep(REOPEN_INTERVAL_S)  # the traffic's reopen interval passed
                flood = await asyncio.gather(*(client.get("/healthz") for _ in range(200)))
                out["flood"] = flood
                out["flood_rebuilds"] = len(rebuilds)
                out["more"] = [await client.get("/healthz") for _ in range(50)]
                out["more_rebuilds"] = len(rebuilds)
                out["call"] = await client.post(
                    "/v1/routers/llm/decisions", json={"context": "tech"}, headers=AUTH
                )
                broken["disk"] = False
                await asyncio.sleep(max(REOPEN_INTERVAL_S, PROBE_INTERVAL_S) + 0.1)
                out["healed"] = await client.get("/healthz")
        finally:
            await routers.stop()
        return out

    out = asyncio.run(main())
    assert out["failed"].status_code == 503
    answers = [out["failed"], *out["flood"], *out["more"], out["call"]]
    assert all(a.status_code == 503 for a in answers)
    for answer in answers:
        assert str(tmp_path) not in answer.text and "llm.db" not in answer.text, answer.text
        assert "router llm" in answer.json()["detail"], answer.text
    assert set(out["flood"][0].json()["routers"]) == {"llm"}
    assert out["flood_rebuilds"] == 1  # 200 concurrent probes, one rebuild
    assert out["more_rebuilds"] == 1  # 50 more within the interval: none
    assert out["healed"].status_code == 200, out["healed"].text
