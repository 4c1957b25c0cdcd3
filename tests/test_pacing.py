"""The pacer (msroute.policies.pacing): its restriction, its accounting and its estimates."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msroute import Constraints, Problem, ProblemBatch, make_policy
from msroute.policies.costs import CostEstimate
from msroute.policies.duals import cost_scale
from msroute.policies.pacing import COST_WINDOW, Pacer


def _pacer(costs: np.ndarray, m: int, upper: list, lower: list | None = None) -> Pacer:
    problem = Problem(costs, m, Constraints(upper=upper, lower=lower or [None] * len(upper)))
    batch = ProblemBatch(problem, 1)
    return Pacer(batch, cost_scale(batch.costs, batch.lo_ori, batch.hi_ori))


def _worst_team(costs: np.ndarray, members: np.ndarray, m: int) -> np.ndarray:
    """The dearest team of at most m distinct members, by enumeration (the reference)."""
    idx = np.flatnonzero(members)
    best = np.zeros(costs.shape[1])
    for size in range(1, min(m, idx.size) + 1):
        for team in itertools.combinations(idx, size):
            best = np.maximum(best, costs[list(team)].sum(axis=0))
    return best


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    st.integers(2, 7),
    st.integers(1, 4),
    st.integers(1, 2),
    st.integers(0, 2**32 - 1),
)
def test_the_allowed_set_is_the_largest_prefix_whose_worst_team_fits(k, m, d, seed) -> None:
    rng = np.random.default_rng(seed)
    costs = np.exp(rng.uniform(-3, 0, (k, d)))
    room = rng.uniform(0.2, 2.0, d) * costs.max(axis=0) * m
    eligible = rng.random(k) < 0.8
    eligible[rng.integers(k)] = True
    pacer = _pacer(costs, m, [1.0] * d)
    fits = pacer._fitting(costs[None], room[None], np.full((1, d), -np.inf), eligible[None])[0]
    # A batch of runs (bisection over the prefixes) finds the same set as one run (a walk).
    problem = Problem(costs, m, Constraints(upper=[1.0] * d))
    batch = ProblemBatch(problem, 2)
    two = Pacer(batch, cost_scale(batch.costs, batch.lo_ori, batch.hi_ori))
    both = two._fitting(
        np.stack([costs, costs]),
        np.stack([room, room]),
        np.full((2, d), -np.inf),
        np.stack([eligible, eligible]),
    )
    assert both[0].tolist() == fits.tolist() == both[1].tolist()
    assert not (fits & ~eligible).any()
    assert np.all(_worst_team(costs, fits, m) <= room)
    # Maximal: with the next expert in the order of dearness (relative to the room), the
    # worst team no longer fits.
    candidates = eligible & np.all(costs <= room, axis=1)
    rest = np.flatnonzero(candidates & ~fits)
    if rest.size:
        nxt = rest[np.argmin((costs[rest] / room).max(axis=1))]
        grown = fits.copy()
        grown[nxt] = True
        assert np.any(_worst_team(costs, grown, m) > room)


def test_nothing_is_narrowed_while_the_room_pays_for_any_team() -> None:
    pacer = _pacer(np.array([[0.03], [0.01], [0.002]]), 2, [0.02])
    pacer.spend[:] = 0.0
    assert pacer.restrict(100, None) is None  # 100 x 0.02 of room, the dearest team 0.04
    assert pacer.restricted[0] == 0


def test_a_spend_over_the_bound_goes_to_the_expert_that_brings_it_back() -> None:
    """A bound lowered below the average spent: no expert fits, and the decision goes to the
    one that brings the spend back fastest (the cheapest, here)."""
    pacer = _pacer(np.array([[0.03, 1.0], [0.01, 0.0], [0.002, 0.0]]), 1, [0.02, None])
    pacer.spend[:] = [[10.0, 0.0]]  # 10 dollars after 100 decisions: 0.1 a decision
    mask = pacer.restrict(101, None)
    assert mask is not None and mask[0].tolist() == [False, False, True]
    assert (pacer.restricted[0], pacer.recovered[0]) == (1, 1)


def test_a_covering_bound_keeps_only_experts_that_meet_it() -> None:
    costs = np.array([[0.03, 1.0], [0.01, 0.0], [0.002, 1.0]])
    pacer = _pacer(costs, 2, [1.0, None], [None, 0.5])
    mask = pacer.restrict(1, None)  # the first decision must carry the in-house share itself
    assert mask is not None and mask[0].tolist() == [True, False, True]


def test_bookings_learn_the_prices_the_feedback_reports() -> None:
    """Each call of the dear expert costs twice its table price: the pacer's estimate learns
    it, books later decisions at it, and its spend is the realized one."""
    problem = Problem([[0.02], [0.001]], 1, Constraints(upper=[0.01]))
    pol = make_policy("uniform", problem, horizon=10, seed=0, pacing=True)
    realized = 0.0
    for _ in range(400):
        d = pol.select()
        cost = np.array([[0.04 if d.draws[0, 0] == 0 else 0.001]])
        realized += cost[0, 0]
        pol.update(d, np.array([1.0]), cost)
    assert pol.pacer is not None
    assert pol.pacer.est.costs[0, 0, 0] == pytest.approx(0.04, rel=0.05)
    assert pol.pacer.spend[0, 0] == pytest.approx(realized)
    assert realized / 400 <= 0.01


def test_pacing_is_recorded_and_survives_a_save(tmp_path) -> None:
    from msroute.policies import load_policy

    problem = Problem([[0.02], [0.001]], 2, Constraints(upper=[0.01]))
    pol = make_policy("omd", problem, horizon=10, seed=0, pacing=True)
    for _ in range(30):
        d = pol.select()
        pol.update(d, np.array([1.0]), d.cost)
    pol.save(tmp_path / "p.npz")
    twin = load_policy(tmp_path / "p.npz")
    assert twin.pacer is not None and twin._init_kwargs["pacing"] is True
    np.testing.assert_array_equal(twin.pacer.spend, pol.pacer.spend)
    a, b = pol.select(), twin.select()
    np.testing.assert_array_equal(a.draws, b.draws)
    with pytest.raises(TypeError, match="pacing must be True or False"):
        make_policy("omd", problem, horizon=10, pacing="yes")


def test_bounds_that_only_a_mixture_meets_are_approached_by_alternating() -> None:
    """No expert is inside every bound on its own (the cheap one is not in-house, the in-house
    one is over the budget): when no set fits, each decision goes where the spend ends nearest
    the box, and the averages settle inside it (the old rule, the most room in the worst
    coordinate, kept choosing a dear expert that is neither: 11.6x under the in-house floor)."""
    costs = np.array([[0.0037, 4.36, 0.0], [0.0006, 1.07, 0.0], [0.007, 0.50, 1.0]])
    problem = Problem(costs, 2, Constraints(upper=[0.0027, 3.7, None], lower=[None, None, 0.07]))
    pol = make_policy("uniform", problem, horizon=10, seed=0, pacing=True)
    spent = np.zeros(3)
    for _ in range(3000):
        d = pol.select()
        spent += d.cost[0]
        pol.update(d, np.array([1.0]), d.cost)
    avg = spent / 3000
    assert avg[0] <= 0.0027 and avg[1] <= 3.7 and avg[2] >= 0.07


def test_a_price_that_rises_is_booked_at_its_new_level() -> None:
    """300 calls at the table price, then it triples: within 60 calls the pacer books it within
    5% of the new price (its estimate averages over about ``COST_WINDOW`` calls); an estimate
    over all calls (the policies' own, ``CostEstimate`` without a window) is still near 1.4x."""
    pacer = _pacer(np.array([[0.01], [0.001]]), 1, [0.01])
    assert pacer.est.window == COST_WINDOW
    whole = CostEstimate(np.array([[[0.01], [0.001]]]), np.array([[0.01]]))
    draws = np.array([[0]])
    for price in [0.01] * 300 + [0.03] * 60:
        for est in (pacer.est, whole):
            est.update(draws, np.array([[price]]))
    assert pacer.est.costs[0, 0, 0] == pytest.approx(0.03, rel=0.05)
    assert whole.costs[0, 0, 0] < 0.015
    as_before = pacer.est.costs.copy()
    pacer.est.update(draws, as_before[:, 0, :])  # a cost as predicted leaves it as it is
    assert np.array_equal(pacer.est.costs, as_before)


@pytest.mark.parametrize("window", [0.5, float("nan"), -3.0])
def test_a_cost_window_below_one_call_is_refused(window: float) -> None:
    with pytest.raises(ValueError, match="window"):
        CostEstimate(np.array([[[0.01]]]), np.array([[0.01]]), window=window)


def test_a_mask_that_forces_a_floor_short_is_reserved_for() -> None:
    """A run at its in-house floor whose mask leaves only an outside expert falls one call
    short: the pacer reserves that shortfall for the next masked requests, as it does a cap's
    overshoot (it asked ``need <= 0`` before, under which nothing falls short: no reserve)."""
    costs = np.array([[0.001, 0.0], [0.02, 1.0]])  # outside and cheap, in-house and dear
    pacer = _pacer(costs, 1, [0.02, None], [None, 0.3])
    pacer.spend[0] = [1.0, 30.05]  # 100 decisions made, 0.3005 in-house: within the floor
    allowed = pacer.restrict(101, np.array([[True, False]]))
    assert allowed is not None and allowed[0].tolist() == [True, False]
    assert pacer.recovered[0] == 1
    need = 101 * 0.3 * (1 + 1e-9) - 30.05
    assert pacer.forced[0, 3] == pytest.approx(need)  # the floor's column: d + 1
    _, need_next = pacer.rooms(102)
    assert need_next[0, 1] == pytest.approx(102 * 0.3 - 30.05 + 8 * need, rel=1e-6)
    old = _pacer(costs, 1, [0.02, None], [None, 0.3])
    old.mixtures = False  # a pacer recorded before the reserve for floors
    old.spend[0] = [1.0, 30.05]
    old.restrict(101, np.array([[True, False]]))
    assert old.forced[0, 3] == 0.0


def test_bounds_only_a_mixture_meets_reserve_one_overshoot_without_a_mask() -> None:
    """No expert meets the cap and the floor alone: a decision no expert fits, without a mask,
    keeps its overshoot (or shortfall) in reserve once (an eighth of the masks' unit)."""
    costs = np.array([[0.3, 0.0], [0.6, 1.0]])  # fast outside, slow in-house
    for seconds, picked, column, amount in (
        (46.0, 1, 0, 0.6 - (101 * 0.46 * (1 - 1e-9) - 46.0)),  # the slow one, 0.14 s over
        (46.14, 0, 3, 101 * 0.48 * (1 + 1e-9) - 48.1),  # the fast one, 0.38 call short
    ):
        pacer = _pacer(costs, 1, [0.46, None], [None, 0.48])
        pacer.spend[0] = [seconds, 48.1]  # 100 decisions, within both bounds
        allowed = pacer.restrict(101, None)
        assert allowed is not None and allowed[0].tolist() == [picked == 0, picked == 1]
        assert pacer.recovered[0] == 1
        assert pacer.forced[0, column] == pytest.approx(amount / 8)
        assert np.count_nonzero(pacer.forced) == 1
