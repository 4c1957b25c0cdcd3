"""The live step's compiled ``C^T q`` (``msroute.policies._live_rows.measure_rows`` and
``aggregate_one``): numpy's floats where the once-per-process check says so, numpy's own
product everywhere else.

- Where ``live_step._sums_as_numpy`` accepts a shape, the compiled sums equal numpy's product
  and the policy's aggregate on fresh random draws (the check's promise).
- The live step's decision (shared read-only draws, no pass over its arrays) is the
  constructor's value.
- A one-cost router (the common case: dollars) decides and learns the same through the
  compiled sums, their Python source and the policy's Python path, bit for bit, with one
  context and three.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.core.problem_batch import surrogate_cost
from msroute.core.qp import projection_cuts
from msroute.policies import _live_rows, live_step
from msroute.policies.base import Decision
from msroute.policies.duals import aggregate_spend
from msroute.policies.live import DEFAULT_OMD_PARAMS
from msroute.policies.omd import OMDApproachability
from msroute.router.streams import DecisionStreams
from test_live_step import ROUNDS, _assert_same, _run, _steps

SHAPES = [(x, k, d) for x in (1, 3, 12) for k in (2, 5, 9, 16, 40) for d in (1, 2)]


@pytest.mark.parametrize(("n_contexts", "k", "d"), SHAPES)
def test_an_accepted_shape_sums_as_numpy(
    compiled: types.ModuleType, n_contexts: int, k: int, d: int
) -> None:
    if not live_step._sums_as_numpy(compiled, n_contexts, (k, d)):
        # numpy sums otherwise on this machine: the check found a float that differs.
        assert not live_step._probe_sums(_live_rows, n_contexts, k, d)  # type: ignore[arg-type]
        return
    rng = np.random.default_rng([7, n_contexts, k, d])
    for _ in range(200):
        q = rng.dirichlet(np.ones(k) * rng.uniform(0.1, 3.0), size=n_contexts)
        costs = rng.random((n_contexts, k, d)) * 10.0 ** rng.uniform(-4, 3, (n_contexts, k, d))
        measured = np.empty((n_contexts, d))
        compiled.measure_rows(q, costs, measured)
        np.testing.assert_array_equal(measured, surrogate_cost(q, costs))
        visits = rng.integers(0, 50_000, n_contexts)
        x = int(rng.integers(n_contexts))
        others = np.empty((1, d))
        share = compiled.aggregate_one(q, costs, visits, x, others)
        want_share, want_others = aggregate_spend(
            q, costs, visits.astype(np.float64), x, surrogate_cost
        )
        assert share == want_share[0]
        np.testing.assert_array_equal(others, want_others)


def test_the_python_source_sums_as_compiled(compiled: types.ModuleType) -> None:
    rng = np.random.default_rng(3)
    for k, d in ((5, 1), (16, 2)):
        q = rng.dirichlet(np.ones(k), size=3)
        costs = rng.random((3, k, d))
        a, b = np.empty((3, d)), np.empty((3, d))
        compiled.measure_rows(q, costs, a)
        _live_rows.measure_rows(q, costs, b)
        np.testing.assert_array_equal(a, b)
        visits = rng.integers(0, 100, 3)
        oa, ob = np.empty((1, d)), np.empty((1, d))
        assert compiled.aggregate_one(q, costs, visits, 1, oa) == _live_rows.aggregate_one(
            q, costs, visits, 1, ob
        )
        np.testing.assert_array_equal(oa, ob)


def _one_cost_policy(n_contexts: int, tight: bool) -> OMDApproachability:
    costs = np.random.default_rng(11).uniform(0.05, 1.0, (5, 1))
    budget = float(costs.min() + costs.mean()) / 2 if tight else 0.95 * float(costs.max())
    policy = OMDApproachability(
        Problem(costs, 1, Constraints(upper=[budget])),
        horizon=ROUNDS,
        n_runs=1,
        seed=5,
        n_contexts=n_contexts,
        **DEFAULT_OMD_PARAMS,
    )
    policy.streams = DecisionStreams(5, policy.streams.uniforms.block)  # as a router's
    return policy.pace()


@pytest.mark.parametrize("tight", [True, False], ids=["tight", "loose"])
@pytest.mark.parametrize("kind", ["compiled", "source"])
@pytest.mark.parametrize("n_contexts", [1, 3])
def test_a_one_cost_router_decides_the_same_through_the_compiled_sums(
    compiled: types.ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    n_contexts: int,
    tight: bool,
) -> None:
    if not live_step._sums_as_numpy(compiled, n_contexts, (5, 1)):
        pytest.skip("numpy's product sums otherwise on this machine: the compiled sums are off")
    runs: dict[str, Any] = {}
    calls: list[str] = []
    for name in ("python-path", kind):
        monkeypatch.setattr(live_step, "_loaded", _steps(name, compiled, calls))
        monkeypatch.setattr(projection_cuts, "_rows_loaded", name == "compiled")
        policy = _one_cost_policy(n_contexts, tight)
        runs[name] = (policy, _run(policy, seed=4))
    (base, base_made), (other, other_made) = runs["python-path"], runs[kind]
    _assert_same(base, base_made, other, other_made)
    assert calls.count("measure_rows") == calls.count("select_one") > 0
    if n_contexts > 1:
        assert calls.count("aggregate_one") > 10  # the QP steps' aggregate cut


def test_the_live_steps_decision_is_the_constructors_value() -> None:
    draws, probs = live_step._drawn(3), np.array([[0.1, 0.2, 0.3, 0.4]])
    context, cost = np.array([2]), np.array([[0.5]])
    for arr in (probs, context, cost):
        arr.setflags(write=False)
    fast = Decision.of_read_only(draws, probs, context, 7, cost)
    slow = Decision(np.array([[3]]), probs, context, 7, cost)
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(Decision)}
    for f in dataclasses.fields(Decision):
        np.testing.assert_array_equal(getattr(fast, f.name), getattr(slow, f.name))
    assert live_step._drawn(3) is draws and not draws.flags.writeable
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.round = 8  # type: ignore[misc]
