"""Off-policy evaluation: exact weights, estimates whose intervals cover the known truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import msroute
from msroute.cli import main
from msroute.router import Router, evaluate

#: Fixed skills (N = 2 dimensions, K = 4 experts): a team's reward is sum_n max over the team.
SKILLS = np.array([[0.9, 0.5, 0.3, 0.1], [0.2, 0.8, 0.4, 0.6]])
COSTS = [0.03, 0.01, 0.005, 0.002]
IDS = ["a", "b", "c", "d"]
M = 2
CANDIDATE = {"a": 0.4, "b": 0.4, "c": 0.1, "d": 0.1}
#: Far from what the router logs (it learns to avoid c and d): few effective samples.
FAR = {"a": 0.05, "b": 0.05, "c": 0.45, "d": 0.45}


def reward(team: list[str]) -> float:
    cols = [IDS.index(e) for e in team]
    return float(SKILLS[:, cols].max(axis=1).sum())


def logged_router(tmp_path: Path | None, n: int = 3000) -> Router:
    config = {
        "policy": "omd",
        "m_draws": M,
        "cost_names": ["usd"],
        "seed": 11,
        "experts": {e: [c] for e, c in zip(IDS, COSTS, strict=True)},
        "constraints": {"upper": {"usd": 0.03}},
        # A logging policy that keeps exploring (Algorithm 1's estimator, a fixed floor): the
        # width asserted below is that of its importance weights.
        "params": {"variant": "paper", "eta_mult": 0.1},
    }
    router = Router(config, journal=None if tmp_path is None else tmp_path / "j.db")
    for i in range(n):
        d = router.route(eligible=["a", "b", "c"] if i % 4 == 0 else None)
        if i % 10:  # some rewards never come: those decisions are left out
            router.feedback(d.decision_id, reward(d.team))
    return router


def truth(q: dict[str, float]) -> tuple[float, float]:
    """Exact expected reward (closed form) and distinct-expert cost of M i.i.d. draws from q."""
    qa = np.array([q[e] for e in IDS])
    r = float(msroute.expected_reward(qa, SKILLS, M))
    c = float(np.sum(np.array(COSTS) * (1.0 - (1.0 - qa) ** M)))
    return r, c


def test_estimates_cover_the_exact_truth() -> None:
    router = logged_router(None)
    res = evaluate(router, CANDIDATE)
    # The log masks one expert every fourth decision: the candidate is masked there too, so
    # the target is the average of the masked and unmasked truths.
    masked = {"a": 0.4 / 0.9, "b": 0.4 / 0.9, "c": 0.1 / 0.9, "d": 0.0}
    (r_full, c_full), (r_mask, c_mask) = truth(CANDIDATE), truth(masked)
    used = [i for i in range(3000) if i % 10]
    share = np.mean([i % 4 == 0 for i in used])
    want_r = share * r_mask + (1 - share) * r_full
    want_c = share * c_mask + (1 - share) * c_full
    assert res.n == len(used)
    for est in (res.ips_reward, res.snips_reward):
        assert est.low <= want_r <= est.high, (est, want_r)
        assert est.high - est.low < 0.25  # informative, not vacuous
    for est in (res.ips_cost["usd"], res.snips_cost["usd"]):
        assert est.low <= want_c <= est.high, (est, want_c)
    assert 0 < res.ess <= res.n
    with pytest.raises(msroute.UnsupportedEstimateError, match="effective sample size is"):
        evaluate(router, FAR)  # the log barely supports it: refused by default
    assert evaluate(router, FAR, min_ess=0).ess < res.ess / 5
    # The logging policy's own q' gives weights near 1: a high effective sample size.
    own = router.state()["q"]
    assert evaluate(router, own).ess > res.ess


def test_weights_are_the_exact_ratio_over_the_ordered_draws() -> None:
    log = [
        {
            "seq": 1,
            "kind": "decision",
            "ref": "x",
            "draws": ["a", "b"],
            "probs": [0.5, 0.25],
            "cost": [1.0],
            "eligible": None,
        },
        {"seq": 2, "kind": "feedback", "ref": "x", "reward": 2.0, "cost": None},
    ]
    res = evaluate(log, {"a": 0.25, "b": 0.75}, min_ess=0)  # one decision
    w = (0.25 / 0.5) * (0.75 / 0.25)
    assert res.ips_reward.value == pytest.approx(w * 2.0)
    assert res.snips_reward.value == pytest.approx(2.0)
    assert res.ips_cost["0"].value == pytest.approx(w * 1.0)


def test_bad_inputs() -> None:
    router = logged_router(None, n=20)
    with pytest.raises(ValueError, match="sum to 1"):
        evaluate(router, {"a": 0.5})
    with pytest.raises(ValueError, match=r"candidate_q\['a'\]"):
        evaluate(router, {"a": -0.5, "b": 1.5})
    team = Router(
        {
            "policy": "cucb",
            "m_draws": 2,
            "cost_names": ["usd"],
            "experts": {e: [c] for e, c in zip(IDS, COSTS, strict=True)},
        }
    )
    d = team.route()
    team.feedback(d.decision_id, 1.0)
    with pytest.raises(ValueError, match="no propensities"):
        evaluate(team, CANDIDATE)


def _spoiled(events: list[dict], change: str) -> list[dict]:
    """A copy of a log with one field of its first decision or feedback spoiled."""
    out = [dict(e) for e in events]
    decision = next(e for e in out if e["kind"] == "decision")
    feedback = next(e for e in out if e["kind"] == "feedback")
    if change == "nan reward":
        feedback["reward"] = float("nan")
    elif change == "text reward":
        feedback["reward"] = "0.5"
    elif change == "zero propensity":
        decision["probs"] = [0.0, *decision["probs"][1:]]
    elif change == "negative propensity":
        decision["probs"] = [-0.5, *decision["probs"][1:]]
    elif change == "short probs":
        decision["probs"] = decision["probs"][:1]
    elif change == "cost length":
        decision["cost"] = [*decision["cost"], 1.0]
    elif change == "no kind":
        del out[-1]["kind"]
    elif change == "allowed without its draw":
        decision["allowed"] = [e for e in IDS if e not in decision["draws"]]
    return out


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("nan reward", "reward: must be finite, got nan"),
        ("text reward", "reward: must be a number, got '0.5'"),
        ("zero propensity", "a propensity must be in (0, 1], got 0.0"),
        ("negative propensity", "a propensity must be in (0, 1], got -0.5"),
        ("short probs", "needs as many propensities as draws"),
        ("cost length", "cost must have"),
        ("no kind", "an event without a kind"),
        ("allowed without its draw", "allowed must list the experts the pacer left"),
    ],
)
def test_a_spoiled_log_is_refused_naming_the_event(change: str, named: str) -> None:
    events = logged_router(None, n=40).decisions_since(0, 10**6)
    before = evaluate(events, CANDIDATE, min_ess=0).to_dict()  # 40 decisions
    with pytest.raises(msroute.errors.InvalidValueError) as info:
        evaluate(_spoiled(events, change), CANDIDATE, min_ess=0)
    assert named in str(info.value)
    assert evaluate(events, CANDIDATE, min_ess=0).to_dict() == before  # the log itself is untouched


def test_a_candidate_is_checked_against_the_logs_experts() -> None:
    router = logged_router(None, n=40)
    typo = {"a": 0.5, "bb": 0.5}
    for source in (router, router.decisions_since(0, 10**6), router.export_rows(0, 10**6)):
        with pytest.raises(msroute.errors.InvalidValueError, match=r"\['bb'\] are not experts"):
            evaluate(source, typo)
    as_numpy = {e: np.float64(p) for e, p in CANDIDATE.items()}  # numpy numbers are numbers
    a, b = evaluate(router, as_numpy, min_ess=0), evaluate(router, CANDIDATE, min_ess=0)
    assert a.to_dict() == b.to_dict()
    with pytest.raises(msroute.errors.InvalidValueError, match="level: must be a number"):
        evaluate(router, CANDIDATE, level="0.9")  # type: ignore[arg-type]
    with pytest.raises(msroute.errors.InvalidValueError, match="level: must be a number"):
        evaluate(router, CANDIDATE, level=True)
    for bad in (-1.0, float("nan"), float("inf"), "100", True):
        with pytest.raises(msroute.errors.InvalidValueError, match="min_ess: must be"):
            evaluate(router, CANDIDATE, min_ess=bad)  # type: ignore[arg-type]


def test_cli_evaluate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logged_router(tmp_path, n=500).close()
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps(CANDIDATE))
    assert main(["journal", "evaluate", str(tmp_path / "j.db"), "--q", str(qfile)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 450 and set(out["ips"]) == {"reward", "cost"}
    assert out["ips"]["reward"] == evaluate(tmp_path / "j.db", CANDIDATE).ips_reward.to_dict()
    wide = ["--reward-range", "-1", "3"]
    assert main(["journal", "evaluate", str(tmp_path / "j.db"), "--q", str(qfile), *wide]) == 0
    out = json.loads(capsys.readouterr().out)
    want = evaluate(tmp_path / "j.db", CANDIDATE, reward_range=(-1.0, 3.0)).ips_reward
    assert out["ips"]["reward"] == want.to_dict()
    assert want.low < evaluate(tmp_path / "j.db", CANDIDATE).ips_reward.low
    narrow = ["--reward-range", "0.5", "0.6"]  # the log has rewards outside it: exit 2
    assert main(["journal", "evaluate", str(tmp_path / "j.db"), "--q", str(qfile), *narrow]) == 2
    assert "reward_range" in capsys.readouterr().err


def test_a_cost_reported_with_feedback_replaces_the_realized_one() -> None:
    """The same log with every feedback reporting twice the realized cost: the cost estimates
    double exactly (a factor of two is exact in floating point), the reward's do not move."""
    router = logged_router(None, n=400)
    log = router.decisions_since(0, 10_000)
    realized = {e["ref"]: e["cost"] for e in log if e["kind"] == "decision"}
    reported = [
        {**e, "cost": [2.0 * c for c in realized[e["ref"]]]} if e["kind"] == "feedback" else e
        for e in log
    ]
    plain, doubled = evaluate(log, CANDIDATE), evaluate(reported, CANDIDATE)
    assert plain.ips_cost["0"].value > 0
    for name in ("ips_cost", "snips_cost"):
        a, b = getattr(plain, name)["0"], getattr(doubled, name)["0"]
        assert (b.value, b.low, b.high) == (2 * a.value, 2 * a.low, 2 * a.high)
    assert doubled.ips_reward == plain.ips_reward and doubled.snips_reward == plain.snips_reward


def test_a_candidate_is_played_within_what_the_pacer_left() -> None:
    """Where the pacer narrowed a decision (uniform routing under a budget below its cost: the
    dear experts fit only now and then), the logged propensities put no mass outside its set;
    the candidate is played within the same set, as the router would have, so the estimate
    targets the average over the decisions of the candidate renormalized over each one's
    ``allowed`` experts. Before the log said which experts the pacer left, the candidate's mass
    outside them counted as reward 0 and the estimate fell far below that."""
    skill = {"a": 0.9, "b": 0.6, "c": 0.4, "d": 0.2}
    router = Router(
        {
            "policy": "uniform",
            "m_draws": 1,
            "cost_names": ["usd"],
            "seed": 5,
            "experts": {e: [c] for e, c in zip(IDS, COSTS, strict=True)},
            "constraints": {"upper": {"usd": 0.005}},
        }
    )
    for _ in range(3000):
        d = router.route()
        router.feedback(d.decision_id, skill[d.team[0]])
    events = [e for e in router.decisions_since(0, 10**6) if e["kind"] == "decision"]
    narrowed = [e for e in events if e.get("allowed")]
    assert len(narrowed) > 1000
    assert all(set(e["draws"]) <= set(e["allowed"]) for e in narrowed)
    cand = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}
    sets = [e.get("allowed") or IDS for e in events]
    want = float(
        np.mean([sum(cand[x] * skill[x] for x in s) / sum(cand[x] for x in s) for s in sets])
    )
    res = evaluate(router, cand)
    for est in (res.ips_reward, res.snips_reward):
        assert est.low <= want <= est.high, (est, want)
    unpaced = float(np.mean([sum(cand[x] * skill[x] for x in s) for s in sets]))
    assert unpaced < res.ips_reward.low  # what IPS estimated without the pacer's sets
    rows = router.export_rows(0, 10**6)
    assert [r.get("allowed") for r in rows if r["kind"] == "decision"] == [
        e.get("allowed") for e in events
    ]


def _heavy_tailed_log(seed: int, n: int = 2000) -> list[dict]:
    """A log whose logger plays b with a probability that decays as 0.5 / t^0.8 (a floor that
    decays as the router learns): uniform routing's weights on b reach ~200, most logs never
    show enough of them, and the sample deviation of ``w r`` misses the tail."""
    rng = np.random.default_rng(seed)
    events: list[dict] = []
    for t in range(1, n + 1):
        p_b = 0.5 / t**0.8
        expert = "b" if rng.random() < p_b else "a"
        p = p_b if expert == "b" else 1.0 - p_b
        reward = float(rng.random() < (0.8 if expert == "a" else 0.3))
        events.append(
            {"kind": "decision", "ref": str(t), "draws": [expert], "probs": [p], "cost": [0.0]}
        )
        events.append({"kind": "feedback", "ref": str(t), "reward": reward})
    return events


def test_the_interval_covers_where_heavy_tailed_weights_fool_the_normal_one() -> None:
    """Over 40 such logs the betting interval holds uniform routing's exact value (0.55) at
    least at its level; the normal approximation ``mean ± 1.96 sd / sqrt(n)`` of the same
    weights, the interval ``evaluate`` gave before, holds it far less often."""
    truth, betting, normal = 0.55, 0, 0
    for seed in range(40):
        log = _heavy_tailed_log(seed)
        est = evaluate(log, {"a": 0.5, "b": 0.5}, min_ess=0).ips_reward
        assert est.low <= est.high
        betting += est.low <= truth <= est.high
        w = np.array([0.5 / e["probs"][0] for e in log if e["kind"] == "decision"])
        x = w * np.array([e["reward"] for e in log if e["kind"] == "feedback"])
        half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
        normal += x.mean() - half <= truth <= x.mean() + half
    assert betting >= 38, betting
    assert normal <= 34, normal


def test_reward_range() -> None:
    """The interval lies within the rewards' range; a range the log's rewards leave, or that is
    not two ordered numbers, is refused naming it; a wider range gives a wider interval."""
    log = _heavy_tailed_log(0, n=300)
    tight = evaluate(log, {"a": 0.5, "b": 0.5}, min_ess=0)
    wide = evaluate(log, {"a": 0.5, "b": 0.5}, min_ess=0, reward_range=(-1.0, 2.0))
    assert 0.0 <= tight.ips_reward.low <= tight.ips_reward.high <= 1.0
    assert wide.ips_reward.low < tight.ips_reward.low
    assert wide.ips_reward.high > tight.ips_reward.high
    assert wide.ips_reward.value == tight.ips_reward.value
    for bad, match in (
        ((0.0, 0.5), "outside"),
        ((1.0, 0.0), "above"),
        ((0.0,), "must be"),
        ((0.0, float("nan")), "finite"),
        ("0,1", "must be"),
    ):
        with pytest.raises(msroute.InvalidValueError, match=match):
            evaluate(log, {"a": 0.5, "b": 0.5}, min_ess=0, reward_range=bad)  # type: ignore[arg-type]


def test_a_log_of_one_reward_value_gives_no_interval_unless_the_range_is_given() -> None:
    """Every logged reward is 1: the log's range is one value, which says nothing of what the
    candidate's other draws would bring, so the interval is unbounded (not the point [1, 1]);
    with the range given, a real interval. Costs all 0: the same for the cost."""
    log = [
        {"kind": "decision", "ref": "1", "draws": ["a"], "probs": [0.5], "cost": [0.0]},
        {"kind": "feedback", "ref": "1", "reward": 1.0},
        {"kind": "decision", "ref": "2", "draws": ["a"], "probs": [0.5], "cost": [0.0]},
        {"kind": "feedback", "ref": "2", "reward": 1.0},
        {"kind": "decision", "ref": "3", "draws": ["b"], "probs": [0.5], "cost": [0.0]},
    ]
    res = evaluate(log, {"a": 0.5, "b": 0.5}, min_ess=0)
    assert (res.ips_reward.low, res.ips_reward.high) == (-np.inf, np.inf)
    assert (res.snips_cost["0"].low, res.snips_cost["0"].high) == (-np.inf, np.inf)
    given = evaluate(log, {"a": 0.5, "b": 0.5}, min_ess=0, reward_range=(0.0, 1.0)).ips_reward
    assert 0.0 <= given.low < given.high <= 1.0
