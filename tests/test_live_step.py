"""The live router's compiled feedback step (``msroute.policies.live_step``) learns exactly what
the Python path learns: a run's decisions must not depend on when the background compile
finished, and a journal replays them in Python. The compiled function, its Python source and
the policy's Python path, run for run and bit for bit."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.core.qp import projection_cuts
from msroute.policies import _live_rows, live_step, pacing
from msroute.policies.base import BasePolicy, Decision
from msroute.policies.live import DEFAULT_OMD_PARAMS
from msroute.policies.omd import OMDApproachability
from msroute.policies.registry import make_policy
from msroute.policies.state_walk import state_dict
from msroute.router import Router
from msroute.router.streams import DecisionStreams

K, D = 6, 2
ROUNDS = 300
COSTS = np.random.default_rng(4).uniform(0.05, 1.0, (K, D))


def _steps(kind: str, compiled: types.ModuleType, calls: list[str]) -> types.SimpleNamespace | None:
    """What ``live_step.kernels`` holds: nothing (the Python path), the compiled step, or
    the step's Python source in its place (counting the calls of each function)."""
    if kind == "python-path":
        return None
    module = compiled if kind == "compiled" else _live_rows

    def counted(name: str) -> Any:
        fn = getattr(module, name)

        def call(*args: Any) -> Any:
            out = fn(*args)
            calls.append(name if out is not False else name + " declined")
            return out

        return call

    names = (
        "clear_one",
        "select_one",
        "feedback_one",
        "qp_one",
        "settle_one",
        "measure_rows",
        "aggregate_one",
    )
    return types.SimpleNamespace(**{name: counted(name) for name in names})


def _policy(n_contexts: int, params: dict[str, Any], tight: bool = True) -> OMDApproachability:
    """A paced live OMD: bounds the pacer often narrows (tight), or seldom."""
    if tight:
        budget = float(COSTS[:, 0].min() + COSTS[:, 0].mean()) / 2
        bounds = Constraints(upper=[budget, None], lower=[None, float(COSTS[:, 1].mean())])
    else:
        bounds = Constraints(upper=[0.95 * float(COSTS[:, 0].max()), None], lower=[None, 0.1])
    kwargs = {**DEFAULT_OMD_PARAMS, **params}
    policy = OMDApproachability(
        Problem(COSTS, 1, bounds), horizon=ROUNDS, n_runs=1, seed=5, n_contexts=n_contexts, **kwargs
    )
    policy.streams = DecisionStreams(5, policy.streams.uniforms.block)  # as a router's
    return policy.pace()


def _run(policy: BasePolicy, seed: int, reports: bool = False) -> list[Decision]:
    """Decisions with masks, feedback late, out of order or never, real costs off the table;
    with ``reports``, half the feedbacks come after a cost report (``settle`` with the
    decision, as a router books a call's realized cost; the decision is booked at it then)."""
    rng = np.random.default_rng(seed)
    pending: list[Decision] = []
    made = []
    for t in range(ROUNDS):
        context = rng.integers(0, policy.n_contexts, 1) if policy.n_contexts > 1 else None
        mask = rng.random((1, policy.n_experts)) < 0.6
        mask[0, rng.integers(0, policy.n_experts)] = True
        eligible = mask if t % 4 == 1 and not mask.all() else None
        if isinstance(policy.streams, DecisionStreams):  # a router's: one stream a decision
            policy.streams.start(t)
        decision = policy.select_trusted(context, eligible)
        pending.append(decision)
        made.append(decision)
        while pending and rng.random() < 0.6:
            d = pending.pop(int(rng.integers(0, len(pending))))
            booked = d.cost
            assert booked is not None
            scale = 1.0 if rng.random() < 0.3 else rng.uniform(0.7, 1.4)  # some as booked
            if reports and rng.random() < 0.5:
                reported = booked * (1.0 if rng.random() < 0.3 else rng.uniform(0.5, 1.6))
                policy.settle(booked, reported, was_open=False, decision=d)
                d = dataclasses.replace(d, cost=reported)
                booked = reported
            policy.update_trusted(d, rng.uniform(0.0, 1.0, 1), booked * scale)
    return made


CONFIGS: list[dict[str, Any]] = [
    {},
    {"budget_margin": 0.0},
    {"cost_estimate": "table", "eta_schedule": "fixed", "batch": 3},
    {"cost_estimate": "draws", "variant": "model", "floor": "fixed"},
]


@pytest.mark.parametrize("tight", [True, False], ids=["tight", "loose"])
@pytest.mark.parametrize("kind", ["compiled", "source"])
@pytest.mark.parametrize("n_contexts", [1, 3])
@pytest.mark.parametrize("params", CONFIGS, ids=lambda p: "-".join(map(str, p.values())) or "live")
def test_the_feedback_step_learns_what_the_python_path_learns(
    compiled: types.ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    n_contexts: int,
    params: dict[str, Any],
    tight: bool,
) -> None:
    runs = {}
    calls: list[str] = []
    for name in ("python-path", kind):
        monkeypatch.setattr(live_step, "_loaded", _steps(name, compiled, calls))
        monkeypatch.setattr(projection_cuts, "_rows_loaded", name == "compiled")
        policy = _policy(n_contexts, params, tight)
        runs[name] = (policy, _run(policy, seed=9))
    (base, base_made), (other, other_made) = runs["python-path"], runs[kind]
    _assert_same(base, base_made, other, other_made)
    assert calls.count("feedback_one") == base._n_feedback  # every feedback took the step
    # A decision takes the step where the pacer leaves it alone (no mask): tight bounds
    # narrow many, loose ones few.
    assert calls.count("select_one") == calls.count("clear_one")
    if tight:
        assert calls.count("clear_one declined") > 0  # the pacer narrowed: Python decided
    else:
        assert calls.count("select_one") > ROUNDS // 3  # a quarter of them masked
    assert int(base._steps.sum()) > 10  # the QP steps ran, most in the step
    if not params.get("dual") and not params.get("surrogate"):
        steps = int(base._steps.sum())  # a tight bound's cuts are often out of reach
        assert calls.count("qp_one") > (0 if tight else steps // 2)
    assert float(base.pacer.n_reports[0]) > 10  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["compiled", "source"])
@pytest.mark.parametrize("n_contexts", [1, 3])
def test_a_cost_report_settles_the_pacer_as_the_python_path(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch, kind: str, n_contexts: int
) -> None:
    """A cost reported before the reward (a gateway's booking of what a call billed) settles
    the pacer in one call of ``settle_one``: the same decisions and state bit for bit."""
    runs = {}
    calls: list[str] = []
    for name in ("python-path", kind):
        steps = _steps(name, compiled, calls)
        monkeypatch.setattr(live_step, "_loaded", steps)
        monkeypatch.setattr(projection_cuts, "_rows_loaded", name == "compiled")
        monkeypatch.setattr(pacing, "settle_kernel", None if steps is None else steps.settle_one)
        policy = _policy(n_contexts, {})
        runs[name] = (policy, _run(policy, seed=11, reports=True))
    (base, base_made), (other, other_made) = runs["python-path"], runs[kind]
    _assert_same(base, base_made, other, other_made)
    # Each report in one call (a feedback's settle runs inside feedback_one).
    assert calls.count("settle_one") > 20
    assert float(base.pacer.n_reports[0]) > 10  # type: ignore[union-attr]


def _assert_same(
    base: BasePolicy, base_made: list[Decision], other: BasePolicy, other_made: list[Decision]
) -> None:
    """Two runs made the same decisions and hold the same state, bit for bit."""
    for a, b in zip(base_made, other_made, strict=True):
        assert a.round == b.round
        assert (a.context is None) == (b.context is None)
        assert a.context is None or a.context.tobytes() == b.context.tobytes()  # type: ignore[union-attr]
        assert (a.allowed is None) == (b.allowed is None)
        assert a.cost is not None and b.cost is not None
        assert a.cost.tobytes() == b.cost.tobytes()
        assert a.draws.tobytes() == b.draws.tobytes()
        assert a.probs is not None and b.probs is not None
        assert a.probs.tobytes() == b.probs.tobytes()
    base_state, other_state = state_dict(base), state_dict(other)
    assert base_state.keys() == other_state.keys()
    for key, value in base_state.items():
        if isinstance(value, np.ndarray):
            other_value = other_state[key]
            assert isinstance(other_value, np.ndarray)
            assert value.tobytes() == np.ascontiguousarray(other_value).tobytes(), key
        else:
            assert value == other_state[key], key


def test_the_step_leaves_what_it_does_not_cover_to_python(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy the step does not cover (no pacer, M = 2) learns in Python, and a state the
    signature does not take (a non-contiguous array) falls back before anything changes."""
    monkeypatch.setattr(live_step, "_loaded", compiled)
    bounds = Constraints(upper=[10.0, None])
    policy = OMDApproachability(Problem(COSTS, 1, bounds), horizon=50, n_runs=1, seed=1)
    d = policy.select_trusted(None, None)
    assert not live_step.learn_one(policy, d, np.array([0.5]), np.ones((1, D)))
    paced = _policy(1, {})
    d = paced.select_trusted(None, None)
    paced._grad = np.asfortranarray(np.zeros((1, 2, K)))[:, :1]  # not C-contiguous
    before = state_dict(paced)
    assert not live_step.learn_one(paced, d, np.array([0.5]), np.ones((1, D)))
    after = state_dict(paced)
    assert all(np.array_equal(before[key], after[key]) for key in before)  # type: ignore[arg-type]


def _config() -> dict[str, Any]:
    return {
        "policy": "omd",
        "m_draws": 1,
        "cost_names": ["usd"],
        "seed": 3,
        "experts": {f"m{i}": [float(c)] for i, c in enumerate(COSTS[:, 0])},
        "constraints": {"upper": {"usd": 0.95 * float(COSTS[:, 0].max())}},
        "contexts": ["a", "b"],
    }


def _drive(router: Router, rounds: int, seed: int) -> list[tuple[list[str], str]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        d = router.route(context=["a", "b"][int(rng.integers(0, 2))])
        out.append((d.team, router.feedback(d.decision_id, float(rng.random()))))
    return out


def test_the_counters_uniform_is_a_fresh_decisions_only(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled step takes a decision's first uniform from its counter only while its
    stream has drawn nothing: a second decision without a new start decides in Python, from
    the stream as it goes on."""
    monkeypatch.setattr(live_step, "_loaded", compiled)
    policy = _policy(1, {}, tight=False)
    streams = policy.streams
    assert isinstance(streams, DecisionStreams)
    taken = 0
    for n in range(ROUNDS):
        streams.start(n)
        decision = live_step.route_one(policy, None, None)
        if decision is not None:
            taken += 1
            assert not streams.fresh
            assert live_step.route_one(policy, None, None) is None  # declined: nothing changed
        else:  # the pacer left it to Python (the first decisions: no room yet)
            decision = policy.select_trusted(None, None)
        assert decision.cost is not None
        policy.update_trusted(decision, np.array([0.5]), decision.cost)
    assert taken > ROUNDS // 2


def test_a_journal_of_the_compiled_step_replays_in_python(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A router learning in the compiled step decides what one learning in Python decides, and
    its journal (re-derived in Python on reopening, which refuses any decision that differs)
    reopens into the same state."""
    monkeypatch.setattr(live_step, "_loaded", None)
    monkeypatch.setattr(projection_cuts, "_rows_loaded", False)
    python_router = Router(_config())
    python_run = _drive(python_router, 400, 2)
    monkeypatch.setattr(live_step, "_loaded", compiled)
    monkeypatch.setattr(projection_cuts, "_rows_loaded", True)
    router = Router(_config(), journal=tmp_path / "j.sqlite")
    assert _drive(router, 400, 2) == python_run
    python_state = state_dict(python_router.policy)
    for key, value in state_dict(router.policy).items():
        assert np.array_equal(value, python_state[key]), key  # type: ignore[arg-type]
    expected = state_dict(router.policy)
    router.close()
    monkeypatch.setattr(live_step, "_loaded", None)
    monkeypatch.setattr(projection_cuts, "_rows_loaded", False)
    reopened = Router.open(tmp_path / "j.sqlite")
    for key, value in state_dict(reopened.policy).items():
        assert np.array_equal(value, expected[key]), key  # type: ignore[arg-type]
    reopened.close()


def test_npmax_is_numpys_maximum_of_two_floats() -> None:
    values = [0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan]
    for a in values:
        for b in values:
            got = _live_rows._npmax(a, b)
            want = float(np.maximum(np.array([a]), np.array([b]))[0])
            assert np.array([got]).tobytes() == np.array([want]).tobytes(), (a, b)


@pytest.mark.parametrize("covering", [False, True], ids=["upper", "both"])
@pytest.mark.parametrize("kind", ["compiled", "source"])
@pytest.mark.parametrize("name", ["uniform", "cbwk", "omd"])
def test_the_pacers_narrowing_is_the_python_one(
    compiled: types.ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    name: str,
    covering: bool,
) -> None:
    """The pacer's narrowing of one run at M = 1 (``_live_rows.restrict_one``) leaves the
    eligible sets, draws and state of the Python path: under bounds that bind (a uniform
    router overspends, so most decisions are narrowed), with masks and a covering bound that
    leaves no expert at times (the one nearest the box, in Python)."""
    costs = np.random.default_rng(8).uniform(0.1, 1.0, (K, D))  # a wide range of prices
    lower = float(costs[:, 1].mean()) if covering else None
    bounds = Constraints(upper=[0.7 * float(costs[:, 0].mean()), None], lower=[None, lower])
    codes: list[int] = []
    kernel = compiled.restrict_one if kind == "compiled" else _live_rows.restrict_one

    def counted(*args: Any) -> int:
        codes.append(int(kernel(*args)))
        return codes[-1]

    runs = {}
    for which in ("python-path", kind):
        monkeypatch.setattr(pacing, "restrict_kernel", None if which == "python-path" else counted)
        problem = Problem(costs, 1, bounds)
        policy = make_policy(name, problem, horizon=ROUNDS, n_runs=1, seed=2, pacing=True)
        runs[which] = (policy, _run(policy, seed=4))
    (base, base_made), (other, other_made) = runs["python-path"], runs[kind]
    for a, b in zip(base_made, other_made, strict=True):
        assert a.draws.tobytes() == b.draws.tobytes()
        assert (a.allowed is None) == (b.allowed is None)
        assert a.allowed is None or a.allowed.tobytes() == b.allowed.tobytes()  # type: ignore[union-attr]
    base_state, other_state = state_dict(base), state_dict(other)
    for key, value in base_state.items():
        assert np.array_equal(value, other_state[key]), key  # type: ignore[arg-type]
    assert codes.count(1) > (0 if covering else ROUNDS // 10)  # narrowed in the step
    if covering and name == "uniform":
        assert codes.count(2) > 0  # no expert fitted: the one nearest the box, in Python


@pytest.mark.parametrize("seed", range(6))
def test_random_instances_decide_the_same_compiled_and_in_python(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Random instances (K, d, prices over orders of magnitude, upper and lower bounds,
    contexts) through the live default OMD: every step compiled, and all in Python, give the
    same decisions and state bit for bit."""
    rng = np.random.default_rng(100 + seed)
    k, d = int(rng.integers(2, 12)), int(rng.integers(1, 4))
    costs = rng.uniform(0.05, 1.0, (k, d)) * 10.0 ** rng.integers(-4, 5, d)
    upper = [float(costs[:, j].mean()) if rng.random() < 0.7 else None for j in range(d)]
    lower = [
        float(costs[:, j].min() * 1.2) if upper[j] is None and rng.random() < 0.5 else None
        for j in range(d)
    ]
    if all(u is None for u in upper + lower):
        upper[0] = float(costs[:, 0].max())
    problem = Problem(costs, 1, Constraints(upper=upper, lower=lower))
    n_contexts = int(rng.integers(1, 4))
    states, made = [], []
    calls: list[str] = []
    for step in (None, _steps("compiled", compiled, calls)):
        monkeypatch.setattr(live_step, "_loaded", step)
        monkeypatch.setattr(projection_cuts, "_rows_loaded", step is not None)
        monkeypatch.setattr(
            pacing, "restrict_kernel", None if step is None else compiled.restrict_one
        )
        policy = OMDApproachability(
            problem,
            horizon=ROUNDS,
            n_runs=1,
            seed=seed,
            n_contexts=n_contexts,
            **DEFAULT_OMD_PARAMS,
        ).pace()
        rows = np.random.default_rng(seed)
        decisions = []
        for _ in range(ROUNDS):
            context = rows.integers(0, n_contexts, 1) if n_contexts > 1 else None
            decision = policy.select_trusted(context, None)
            decisions.append(decision.draws.tobytes() + decision.probs.tobytes())  # type: ignore[union-attr]
            assert decision.cost is not None
            scale = 1.0 if rows.random() < 0.5 else float(rows.uniform(0.5, 2.0))
            policy.update_trusted(decision, rows.uniform(0.0, 1.0, 1), decision.cost * scale)
        states.append(state_dict(policy))
        made.append(decisions)
    assert made[0] == made[1]
    assert calls.count("feedback_one") == ROUNDS  # every feedback compiled
    steps = int(policy._steps.sum())  # the compiled run's QP steps, each offered to the step
    assert calls.count("qp_one") + calls.count("qp_one declined") == steps > 0
    for key, value in states[0].items():
        other = states[1][key]
        if isinstance(value, np.ndarray):
            assert value.tobytes() == np.ascontiguousarray(other).tobytes(), key
        else:
            assert value == other, key
