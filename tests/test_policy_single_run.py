"""A single run (R = 1, the live router's case) takes cheaper paths than a batch: views of its
state instead of gathers, a binary search of the CDF instead of the batched comparison, no
re-validation of what the router validated. They must decide and learn exactly as the batched
(general) paths do: the same run through both, bit for bit, with contexts, eligibility masks
and feedback that comes late, out of order or never."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.errors import InvalidValueError
from msroute.policies import sampling
from msroute.policies.base import Decision, sample_multinomial
from msroute.policies.costs import CostEstimate
from msroute.policies.omd import OMDApproachability
from msroute.policies.reward_model import _AdditiveModel
from msroute.policies.state_walk import state_dict
from msroute.router import RouterConfig
from msroute.router.state import RouterState

K, M, D = 9, 3, 2
ROUNDS = 400

COSTS = np.random.default_rng(7).uniform(0.0, 1.0, (K, D))


def _problem(m: int) -> Problem:
    bounds = Constraints(
        upper=[0.9 * float(COSTS[:, 0].mean()) * m, None], lower=[None, 0.6 * m / M]
    )
    return Problem(COSTS, m, bounds)


CONFIGS: list[dict[str, Any]] = [
    {"variant": "paper"},
    {"variant": "model"},
    {"variant": "paper", "dual": "paper", "cost_estimate": "table"},
    {"variant": "model", "surrogate": "exact", "cost_estimate": "draws"},
    {"variant": "paper", "eta_schedule": "anytime", "batch": 3},
]


def _gathered_cell(self: OMDApproachability, context: Any) -> tuple[Any, Any]:
    return (self._rows, self._ctx0 if context is None else context)


def _batched_costs(
    self: CostEstimate, draws: Any, cost: Any, counts: Any = None, rows: Any = None
) -> None:
    if self.mode != "table":
        self._update_batch(draws, cost, counts, rows)


@contextmanager
def general_paths() -> Iterator[None]:
    """The batched code for a single run: gathered state, the batched CDF comparison, the
    model estimator's and the cost estimates' numpy forms."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sampling, "_sample_row", sampling._sample_rows)
        mp.setattr(OMDApproachability, "_cell", _gathered_cell)
        mp.setattr(_AdditiveModel, "estimate", _AdditiveModel._estimate_rows)
        mp.setattr(CostEstimate, "update", _batched_costs)
        yield


def assert_bitwise(a: object, b: object, what: str) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), what
        assert a.shape == b.shape and a.dtype == b.dtype, what
        assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), what
    else:
        assert a == b, what


@pytest.mark.parametrize("m", [1, M])
@pytest.mark.parametrize("n_contexts", [1, 3])
@pytest.mark.parametrize("params", CONFIGS, ids=lambda p: "-".join(map(str, p.values())))
def test_the_single_run_paths_are_the_general_ones_bit_for_bit(
    params: dict[str, Any], n_contexts: int, m: int
) -> None:
    kwargs = {"horizon": ROUNDS, "n_runs": 1, "seed": 11, "n_contexts": n_contexts, **params}
    fast = OMDApproachability(_problem(m), **kwargs)
    general = OMDApproachability(_problem(m), **kwargs)
    rng = np.random.default_rng(3)
    pending: list[tuple[Decision, Decision]] = []
    for t in range(ROUNDS):
        context = rng.integers(0, n_contexts, 1)
        mask = rng.random((1, K)) < 0.5
        mask[0, rng.integers(0, K)] = True  # an eligible expert
        eligible = None if t % 3 == 0 else mask
        # The live router's way in (validated at its own boundary) ...
        trusted = None if eligible is None or eligible.all() else eligible
        d_fast = fast.select_trusted(context if n_contexts > 1 else None, trusted)
        with general_paths():  # ... and the public one, on the general paths
            d_gen = general.select(context, eligible)
        assert_bitwise(d_fast.draws, d_gen.draws, f"draws of round {t}")
        assert_bitwise(d_fast.probs, d_gen.probs, f"probs of round {t}")
        pending.append((d_fast, d_gen))
        # Feedback for a random pending decision (late and out of order); some never come.
        while pending and rng.random() < 0.55:
            d_one, d_other = pending.pop(int(rng.integers(0, len(pending))))
            if rng.random() < 0.05:
                continue
            reward = rng.uniform(0.0, 2.0, 1)
            # Real costs differ from the table: the cost estimates learn.
            cost = COSTS[np.unique(d_one.draws)].sum(axis=0)[None, :] * rng.uniform(0.8, 1.3)
            fast.update_trusted(d_one, reward, cost)
            with general_paths():
                general.update(d_other, reward, cost)
    fast_state, general_state = state_dict(fast), state_dict(general)
    assert fast_state.keys() == general_state.keys()
    for key, value in fast_state.items():
        assert_bitwise(value, general_state[key], key)
    assert int(fast._steps.sum()) > 10  # the QP steps ran


def test_sampling_one_row_is_the_batched_sampling() -> None:
    """The binary search of a single row draws what the batched comparison draws: with zeros,
    masks, uniforms at the very top of the CDF, and uniforms that land exactly on a CDF value
    (small integer weights: the ties a binary search must break as the comparison does)."""
    rng = np.random.default_rng(5)
    for trial in range(4000):
        k = int(rng.integers(1, 12))
        q = rng.random((2, k)) * (rng.random((2, k)) < 0.7)
        if trial % 4 < 2:
            q = np.floor(q * 4.0)  # weights 0..3: exact sums
        q[~(q > 0).any(axis=1), 0] = 1.0
        mask = q > 0 if trial % 2 else None
        q[1] = q[0]
        cdf = q[0].cumsum()
        u = rng.random((2, M))
        u[:, 0] = np.nextafter(1.0, 0.0)  # the top of the CDF, where rounding bites
        # Exactly on a CDF value (with integer weights), below 1.
        u[:, 1] = min(cdf[rng.integers(0, k)] / cdf[-1], np.nextafter(1.0, 0.0))
        both = sample_multinomial(u, q, mask)
        row = sample_multinomial(u[:1], q[:1], None if mask is None else mask[:1])
        assert_bitwise(row, both[:1], f"trial {trial}")
        if mask is not None:
            assert mask[0, row[0]].all()  # never an ineligible expert


def test_batched_sampling_counts_the_cdf_entries_below_each_uniform() -> None:
    """The compiled batched sampler (no mask) draws what the comparison form draws: the count of
    CDF entries at most ``u * total``, capped at K - 1; with zeros, unnormalized rows, ties on
    exact CDF values and uniforms at the top of the CDF."""
    rng = np.random.default_rng(8)
    for trial in range(2000):
        r, k, m = int(rng.integers(2, 40)), int(rng.integers(1, 60)), int(rng.integers(1, 8))
        q = rng.random((r, k)) ** float(rng.integers(1, 20)) * (rng.random((r, k)) < 0.7)
        if trial % 3 == 0:
            q = np.floor(q * 4.0)  # small integer weights: exact sums, ties on CDF values
        q[~(q > 0).any(axis=1), 0] = 1.0
        u = rng.random((r, m))
        u[:, 0] = np.nextafter(1.0, 0.0)
        cdf = q.cumsum(axis=1)
        u[:, -1] = np.minimum(cdf[:, -1 - trial % k] / cdf[:, -1], np.nextafter(1.0, 0.0))
        scaled = u * cdf[:, -1:]
        expected = np.minimum((scaled[:, :, None] >= cdf[:, None, :]).sum(axis=2), k - 1)
        assert_bitwise(sample_multinomial(u, q), expected.astype(np.int64), f"trial {trial}")
    with pytest.raises(InvalidValueError, match="uniforms for 3 rows"):
        sample_multinomial(rng.random((3, 2)), np.ones((4, 5)))


def test_the_routers_team_cost_adds_the_rows_as_numpy_does() -> None:
    """The router sums a team's cost rows in Python: the floats of ``costs[team].sum(axis=0)``."""
    rng = np.random.default_rng(2)
    costs = rng.standard_normal((40, 3)) * 10.0 ** rng.integers(-6, 6, (40, 3))
    config = {
        "policy": "omd",
        "m_draws": 3,
        "cost_names": ["a", "b", "c"],
        "experts": {f"e{i}": np.abs(row).tolist() for i, row in enumerate(costs)},
    }
    state = RouterState.initial(RouterConfig.from_dict(config))
    state.cost_rows = costs.tolist()  # signed rows too: the sum's rounding is what is tested
    for _ in range(2000):
        team = list(dict.fromkeys(rng.integers(0, 40, 3).tolist()))
        assert_bitwise(state.team_cost(team), costs[team].sum(axis=0), str(team))


@pytest.mark.parametrize("mode", ["distinct", "draws"])
@pytest.mark.parametrize("rows", [1, 4], ids=["one-row", "rows"])
def test_one_round_of_cost_estimates_is_the_batched_update(mode: str, rows: int) -> None:
    """``CostEstimate`` at one run and one draw moves only the drawn expert's entries: the
    floats of the batched update, on either layout (one row, or one row per context), with
    realized costs equal to the prediction (nothing learned), near it, far from it, and 0."""
    rng = np.random.default_rng(5)
    prior = rng.uniform(0.0, 2.0, (rows, K, D)) * (rng.random((rows, K, D)) < 0.8)
    scale = rng.uniform(0.5, 2.0, (rows, D))
    fast = CostEstimate(prior, scale, mode=mode)  # type: ignore[arg-type]
    general = CostEstimate(prior, scale, mode=mode)  # type: ignore[arg-type]
    for t in range(3000):
        row, drawn = int(rng.integers(0, rows)), int(rng.integers(0, K))
        draws = np.array([[drawn]])
        kind = t % 4
        if kind == 0:  # as predicted
            cost = fast.costs[row, drawn][None, :].copy()
        elif kind == 1:  # near it
            cost = fast.costs[row, drawn][None, :] * (1.0 + rng.normal(0.0, 1e-9, (1, D)))
        elif kind == 2:  # far from it
            cost = rng.uniform(0.0, 5.0, (1, D))
        else:
            cost = np.zeros((1, D))
        cost = np.abs(cost)
        at = None if rows == 1 else np.array([row])
        fast.update(draws, cost, None, at)
        general._update_batch(draws, cost, None, at)
        assert_bitwise(fast.costs, general.costs, f"costs after round {t}")
        assert_bitwise(fast.n_obs, general.n_obs, f"counts after round {t}")
