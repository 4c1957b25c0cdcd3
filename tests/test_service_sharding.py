"""Scale-out by sharding: two independent servers, each on half of one simulated traffic stream.

Each shard keeps its own time-averaged cost in the convex constraint set, so the traffic-weighted
average over shards (the pooled average) is in the set too, without any coordination between the
shards. The test runs the stream through two real servers concurrently (round t goes to shard
t mod 2, immediate feedback with the sum-max reward of the simulated skills) and checks the
pooled time-averaged realized cost against every bound.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from _service import AUTH, TIMEOUT, served
from msroute.core.reward import sum_max_reward
from msroute.envs import StochasticEnv
from msroute.router import Router

pytestmark = pytest.mark.timeout(240)

T = 2000
EXPERTS = {"large": [0.030], "medium": [0.012], "small": [0.004], "tiny": [0.001]}
# The expensive experts are the good ones: the budget binds.
SKILLS_BASE = np.array([[0.9, 0.7, 0.4, 0.2], [0.8, 0.6, 0.5, 0.3], [0.7, 0.5, 0.3, 0.1]])
BUDGET = 0.012
ROUTER: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 0,
    "feedback_ttl_s": 3600,
    "reward_max": float(SKILLS_BASE.shape[0]),  # sum-max over N dimensions of skills in [0, 1]
    "experts": EXPERTS,
    "constraints": {"upper": {"usd": BUDGET}},
}


def serve_shard(url: str, skills: np.ndarray, rounds: range, out: dict[str, Any]) -> None:
    ids = list(EXPERTS)
    costs: list[float] = []
    rewards: list[float] = []
    with httpx.Client(base_url=url, headers=AUTH, timeout=TIMEOUT) as client:
        for t in rounds:
            dec = client.post("/v1/routers/shard/decisions", json={}).json()
            team = [ids.index(e) for e in dec["team"]]
            reward = sum_max_reward(skills[t], team)
            status = client.post(
                f"/v1/routers/shard/decisions/{dec['decision_id']}/feedback",
                json={"reward": reward},
            ).json()["status"]
            assert status == "applied"
            costs.append(dec["cost"]["usd"])
            rewards.append(reward)
        out["state"] = client.get("/v1/routers/shard").json()
    out["costs"] = costs
    out["rewards"] = rewards


def test_two_shards_pooled_cost_meets_every_bound(tmp_path: Path) -> None:
    skills = StochasticEnv(SKILLS_BASE, seed=0).skills(0, T)[:, 0]  # (T, N, K)
    results: list[dict[str, Any]] = [{}, {}]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        served(tmp_path / "a", {"shard": ROUTER}) as (a, _),
        served(tmp_path / "b", {"shard": dict(ROUTER, seed=1)}) as (b, _),
    ):
        threads = [
            threading.Thread(target=serve_shard, args=(s.url, skills, range(i, T, 2), results[i]))
            for i, s in enumerate((a, b))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=200)
    assert all("state" in r for r in results), "a shard did not finish"
    pooled = sum(sum(r["costs"]) for r in results) / T
    assert pooled <= BUDGET + 1e-9
    # The pooled average is the traffic-weighted average of the shards' own averages.
    weights = [r["state"]["decisions"] for r in results]
    assert weights == [T // 2, T // 2]
    shard_avgs = [r["state"]["avg_cost"]["usd"] for r in results]
    for r, avg in zip(results, shard_avgs, strict=True):
        assert avg == pytest.approx(np.mean(r["costs"]), rel=1e-9)
    assert np.average(shard_avgs, weights=weights) == pytest.approx(pooled, rel=1e-9)


def test_the_budget_binds() -> None:
    """Without the constraint the same router, on the same stream, spends far above the budget
    (so the pooled check above is not met by accident)."""
    skills = StochasticEnv(SKILLS_BASE, seed=0).skills(0, T)[:, 0]
    ids = list(EXPERTS)
    router = Router.from_config({**ROUTER, "constraints": {}})
    try:
        spent = 0.0
        for t in range(0, T, 2):
            dec = router.route()
            router.feedback(
                dec.decision_id, sum_max_reward(skills[t], [ids.index(e) for e in dec.team])
            )
            spent += dec.cost["usd"]
    finally:
        router.close()
    assert spent / (T // 2) > 2 * BUDGET
