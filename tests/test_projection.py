"""Tests of the exact QP step (6): KKT certificates, cvxpy cross-checks, batching, errors."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from msroute.core.qp._projection_rows import _search_mu
from msroute.core.qp._simplex import FEASIBILITY_RTOL
from msroute.core.qp.projection import _project_step_unchecked, _solve, project_step
from msroute.errors import EmptyFeasibleSetError

KKT_TOL = 1e-9


# ---------------------------------------------------------------------- independent helpers
def floored_simplex_bisect(y: np.ndarray, gamma: float) -> np.ndarray:
    """Projection onto {sum q = 1, q >= gamma} by bisection on the threshold (independent)."""
    k = y.size
    if k * gamma >= 1.0:
        return np.full(k, 1.0 / k)
    lo, hi = float(y.min()) - 1.0, float(y.max())  # sum(max(gamma, y - t)) >= 1 at lo, <= at hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.maximum(gamma, y - mid).sum() > 1.0:
            lo = mid
        else:
            hi = mid
    return np.maximum(gamma, y - 0.5 * (lo + hi))


def smallest_reach(a: np.ndarray, gamma: float) -> float:
    """min a . q over the floored simplex: the floor everywhere, the rest on the smallest a_i."""
    return float(gamma * a.sum() + (1.0 - a.size * gamma) * a.min())


def smallest_reach_rounded_up(a: np.ndarray, gamma: float) -> float:
    """:func:`smallest_reach` computed exactly, then rounded up to a float.

    Among subnormal a, gamma * sum(a) in floats can round below it by as much as |a| itself,
    and a cut there is empty (by a margin of the cut's own scale).
    """
    g = Fraction(gamma)
    mass = max(1 - a.size * g, Fraction(0))
    exact = g * sum(map(Fraction, a.tolist())) + mass * Fraction(float(a.min()))
    up = float(exact)
    return up if Fraction(up) >= exact else float(np.nextafter(up, np.inf))


def kkt_violation(
    y: np.ndarray, gamma: float, a: np.ndarray, b: float, q: np.ndarray, mu: float
) -> dict[str, float]:
    """Violations of the KKT conditions of min ||q - y||^2/2 s.t. 1.q = 1, q >= gamma, a.q <= b.

    Stationarity: q - y + mu a - nu 1 - lam = 0 with lam >= 0 and lam_i = 0 where q_i > gamma,
    i.e. r = q - y + mu a equals nu on the free coordinates and is >= nu on the floored ones.
    Each violation is scaled by the size of the numbers involved.
    """
    scale = 1.0 + np.abs(y).max() + abs(mu) * np.abs(a).max()
    r = q - y + mu * a
    free = q > gamma
    nu = float(r[free].mean()) if free.any() else float(r.min())
    return {
        "sum": abs(q.sum() - 1.0),
        "floor": max(0.0, gamma - q.min()),
        "halfspace": max(0.0, (a @ q - b) / (1.0 + np.abs(a).max())),
        "mu_sign": max(0.0, -mu),
        "stationarity_free": float(np.abs(r[free] - nu).max()) / scale if free.any() else 0.0,
        "lambda_sign": max(0.0, float((nu - r).max())) / scale,
        "slackness": abs(mu * (a @ q - b)) / scale,
    }


def assert_kkt(y: np.ndarray, gamma: float, a: np.ndarray, b: float, q: np.ndarray, mu: float):
    bad = {k: v for k, v in kkt_violation(y, gamma, a, b, q, mu).items() if v > KKT_TOL}
    assert not bad, f"KKT violated: {bad}"


def cvxpy_projection(y: np.ndarray, gamma: float, a: np.ndarray | None, b: float | None):
    cp = pytest.importorskip("cvxpy")
    x = cp.Variable(y.size)
    cons = [cp.sum(x) == 1, x >= gamma]
    if a is not None:
        cons.append(a @ x <= b)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(x - y)), cons)
    prob.solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12, tol_ktratio=1e-10
    )
    assert prob.status == "optimal"
    return np.asarray(x.value)


@st.composite
def instances(draw: st.DrawFn, binding: bool = True) -> tuple[np.ndarray, float, np.ndarray, float]:
    """A (y, gamma, a, b) with a non-empty set; the cut binds when ``binding`` (most of the time).

    ``a`` sometimes takes few distinct values (ties), ``gamma`` sometimes sits at 0 or 1/K.
    """
    k = draw(st.integers(1, 30))
    gfrac = draw(st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 0.999)))
    gamma = gfrac / k
    yscale = draw(st.sampled_from([0.01, 1.0, 30.0]))
    y = draw(hnp.arrays(np.float64, k, elements=st.floats(-1.0, 1.0))) * yscale
    if draw(st.booleans()):
        # Subnormal entries are left out: mu ~ 1 / gap(a) would overflow (a = C w is never so).
        a = draw(hnp.arrays(np.float64, k, elements=st.floats(-3.0, 3.0, allow_subnormal=False)))
    else:
        a = draw(hnp.arrays(np.float64, k, elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0])))
    q0 = floored_simplex_bisect(y, gamma)
    reach = smallest_reach(a, gamma)
    t = draw(st.floats(0.0, 0.999) if binding else st.floats(0.0, 1.5))
    b = reach + t * (float(a @ q0) - reach)
    return y, gamma, a, b


# ---------------------------------------------------------------------- KKT and references
@settings(max_examples=300, deadline=None)
@given(instances(binding=False))
def test_kkt_holds_on_random_instances(inst):
    y, gamma, a, b = inst
    q, mu = _solve(y, gamma, a, b)
    assert q.shape == y.shape and mu.shape == ()
    assert_kkt(y, gamma, a, b, q, float(mu))
    np.testing.assert_array_equal(project_step(y, gamma, a, b), q)


@settings(max_examples=150, deadline=None)
@given(instances(binding=True))
def test_safeguarded_search_agrees_with_active_set_path(inst):
    """The fallback search (used when active-set steps do not settle) solves the same problem."""
    y, gamma, a, b = inst
    q, _ = _solve(y, gamma, a, b)
    reach = smallest_reach(a, gamma)
    if not (a @ floored_simplex_bisect(y, gamma) > b > reach + 1e-6 * np.abs(a).max()):
        return  # the search is only defined for a binding, non-degenerate cut
    qs, ms = _search_mu(y[None], gamma, a[None], np.array([b]))
    assert_kkt(y, gamma, a, b, qs[0], float(ms[0]))
    np.testing.assert_allclose(qs[0], q, rtol=0, atol=1e-9 * (1 + np.abs(y).max()))


def test_search_path_is_taken_and_exact():
    """A cut whose normal is constant on the free set at mu = 0 defeats the first Newton step."""
    y = np.array([11.802480834485724, 8.510507876884622, -0.4866029367131749])
    a = np.array([-0.7000421761704606, 0.08560981069367146, -0.7077351936331538])
    gamma, b = 0.05084045161870594, -0.6657589447137965
    # At mu = 0 only coordinate 0 is free; a . q(mu) is flat until coordinate 2 enters.
    q, mu = _solve(y, gamma, a, b)
    assert_kkt(y, gamma, a, b, q, float(mu))
    assert abs(a @ q - b) < 1e-12
    np.testing.assert_allclose(q, cvxpy_projection(y, gamma, a, b), atol=1e-7)


def test_near_tied_normal_is_solved():
    """a = (0, 1e-270, 1): the search bracket spans 270 orders of magnitude."""
    y, a, b = np.array([0.0, 0.0, 1.0]), np.array([0.0, 8.16e-271, 1.0]), 0.5
    q, mu = _solve(y, 0.0, a, b)
    np.testing.assert_allclose(q, [0.25, 0.25, 0.5], atol=1e-12)
    assert_kkt(y, 0.0, a, b, q, float(mu))


def test_matches_cvxpy_on_random_instances():
    rng = np.random.default_rng(20260601)
    n_binding = 0
    for _ in range(30):
        k = int(rng.integers(2, 60))
        gamma = float(rng.uniform(0, 1.0 / k))
        y = rng.dirichlet(np.ones(k)) + rng.normal(scale=rng.choice([0.01, 0.3]), size=k)
        a = rng.normal(size=k)
        reach = smallest_reach(a, gamma)
        b = reach + rng.uniform(0.02, 1.3) * (a @ floored_simplex_bisect(y, gamma) - reach)
        q = project_step(y, gamma, a, b)
        ref = cvxpy_projection(y, gamma, a, b)
        n_binding += bool(a @ ref > b - 1e-7)
        # Clarabel at tight tolerances is accurate to ~1e-10; compare within its accuracy.
        np.testing.assert_allclose(q, ref, rtol=0, atol=1e-7)
    assert n_binding >= 15  # the comparison exercised the cut, not only the floored simplex


def test_floored_simplex_projection_matches_cvxpy():
    rng = np.random.default_rng(7)
    for k in (1, 2, 5, 40):
        y = rng.normal(size=k)
        np.testing.assert_allclose(
            project_step(y, 0.2 / k), cvxpy_projection(y, 0.2 / k, None, None), atol=1e-7
        )


@settings(max_examples=100, deadline=None)
@given(instances(binding=False))
def test_no_cut_equals_plain_floored_projection(inst):
    y, gamma, a, _ = inst
    plain = floored_simplex_bisect(y, gamma)
    tol = 1e-10 * (1 + np.abs(y).max())
    np.testing.assert_allclose(project_step(y, gamma), plain, atol=tol)
    zeros = np.zeros_like(y)
    # a = 0 is the dual w = 0: no cut whatever b is.
    np.testing.assert_array_equal(project_step(y, gamma, zeros, 0.0), project_step(y, gamma))
    np.testing.assert_array_equal(project_step(y, gamma, zeros, -1.0), project_step(y, gamma))
    # A cut that the plain projection already meets changes nothing.
    b_slack = float(a @ plain) + 1e-6
    q, mu = _solve(y, gamma, a, b_slack)
    np.testing.assert_allclose(q, plain, atol=tol)
    assert mu == 0.0


@settings(max_examples=100, deadline=None)
@given(instances(binding=True), st.floats(1e-12, 1e6), st.floats(-5.0, 5.0))
def test_cut_invariances(inst, scale, shift):
    """(a, b) -> (c a, c b) and (a + s, b + s) describe the same set on the simplex.

    The first is the warning of docs/architecture.md: a tiny nonzero w enforces the whole
    half-space.
    """
    y, gamma, a, b = inst
    q = project_step(y, gamma, a, b)
    tol = 1e-8 * (1 + np.abs(y).max())
    # c a and c b are the same cut only while no nonzero entry drops below the normal range
    # (a = (2.2e-308, 0, 0) and c = 1e-12 keep ~12 bits of a_0 and of b: another cut), and
    # while the cut is not within rounding of its reach: there, c b rounded one ulp below c
    # times the reach is a cut out of reach, which the step moves to its reach, another set (a
    # = (-6e-99, 2.5, 0, ...), b = 2.5 gamma: its reach, c = 1e-12).
    cut = np.r_[a, b]
    margin = 8 * np.finfo(float).eps * (abs(b) + float(np.abs(a).sum()))
    at_reach = b - smallest_reach(a, gamma) <= margin
    if not at_reach and np.all((cut == 0.0) | (np.abs(cut * scale) >= np.finfo(float).tiny)):
        np.testing.assert_allclose(project_step(y, gamma, scale * a, scale * b), q, atol=tol)
    q_shift, mu_shift = _solve(y, gamma, a + shift, b + shift)
    assert_kkt(y, gamma, a + shift, b + shift, q_shift, float(mu_shift))


def test_feasible_point_is_fixed():
    rng = np.random.default_rng(3)
    k, gamma = 12, 0.01
    q = gamma + (1 - k * gamma) * rng.dirichlet(np.ones(k))
    a = rng.normal(size=k)
    np.testing.assert_allclose(project_step(q, gamma, a, a @ q + 1e-9), q, atol=1e-14)
    np.testing.assert_allclose(project_step(q, gamma, a, a @ q), q, atol=1e-13)


def test_docstring_style_example_by_hand():
    # y = (0.9, 0.3, -0.4), gamma = 0, cut q_0 <= 0.5: mass moves to coordinate 1 (q = .5, .5, 0).
    q = project_step([0.9, 0.3, -0.4], 0.0, [1.0, 0.0, 0.0], 0.5)
    np.testing.assert_allclose(q, [0.5, 0.5, 0.0], atol=1e-15)


# ---------------------------------------------------------------------- batching
def _rounding_tolerance(q: np.ndarray, gamma: float, a: np.ndarray) -> np.ndarray:
    """How far two correct solvers may land apart on each row (R,) of a binding cut, from
    rounding alone: 1e-12, times the conditioning of the cut on the free coordinates F (those
    above the floor). There q_F = y_F - lam 1 - mu a_F, and (lam, mu) solve a 2 x 2 system
    whose determinant is |F|^2 var(a_F): a cut nearly constant on F (two free experts with
    almost the same cost) amplifies rounding by max|a|^2 / (|F| var(a_F))."""
    free = q > gamma + 1e-9
    tol = np.full(q.shape[0], 1e-12)
    for r in range(q.shape[0]):
        n_free = int(free[r].sum())
        if n_free >= 2:
            spread = n_free * float(np.var(a[r][free[r]]))
            scale = float(np.abs(a[r]).max()) ** 2
            if scale > 0.0:
                tol[r] += 4.0 * np.finfo(float).eps * scale / max(spread, 1e-300)
    return tol


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 25), st.integers(0, 2**32 - 1))
@example(3, 5, 1_227_954_840)  # run 0's free experts cost -1.6827 and -1.6803
def test_batched_equals_looped_single_solves(n_runs, k, seed):
    rng = np.random.default_rng(seed)
    gamma = float(rng.uniform(0, 1.0 / k))
    y = rng.normal(scale=rng.choice([0.05, 1.0]), size=(n_runs, k)) + 1.0 / k
    a = rng.normal(size=(n_runs, k))
    a[rng.random(n_runs) < 0.2] = 0.0  # some runs have w = 0
    reach = gamma * a.sum(-1) + (1 - k * gamma) * a.min(-1)
    f0 = np.array([a[r] @ floored_simplex_bisect(y[r], gamma) for r in range(n_runs)])
    b = reach + rng.uniform(0.01, 1.2, size=n_runs) * (f0 - reach)
    q = project_step(y, gamma, a, b)
    looped = np.stack([project_step(y[r], gamma, a[r], b[r]) for r in range(n_runs)])
    # Equal up to rounding, which a cut nearly constant on the free experts amplifies (e.g.
    # costs -1.6827 and -1.6803 on the two free experts: 1e-11 apart, not a defect).
    assert np.all(np.abs(q - looped) <= _rounding_tolerance(looped, gamma, a)[:, None])
    np.testing.assert_array_equal(_project_step_unchecked(y, gamma, a, b), q)
    # Any leading shape: (2, R, K) with b (2, R).
    q2 = project_step(np.stack([y, y]), gamma, np.stack([a, a]), np.stack([b, b]))
    np.testing.assert_allclose(q2, np.stack([q, q]), rtol=0, atol=1e-12)


def test_broadcasting_of_a_and_b():
    rng = np.random.default_rng(11)
    k, gamma = 6, 0.02
    y = rng.normal(size=(4, k))
    a = rng.normal(size=k)
    b = float(smallest_reach(a, gamma) + 0.1)
    q = project_step(y, gamma, a, b)  # one cut shared by all rows
    assert q.shape == (4, k)
    for r in range(4):
        np.testing.assert_allclose(q[r], project_step(y[r], gamma, a, b), atol=1e-12)
    b_neg = float(smallest_reach(-a, gamma) + 0.1)
    q_one_y = project_step(y[0], gamma, np.stack([a, -a]), [b, b_neg])  # one y, two cuts
    assert q_one_y.shape == (2, k)
    np.testing.assert_allclose(q_one_y[1], project_step(y[0], gamma, -a, b_neg), atol=1e-12)


@pytest.mark.parametrize("scale", [2.5, 1e-150, 1e150])
def test_batched_multipliers_are_kkt_certificates(scale: float) -> None:
    """Every row's multiplier from the batched path certifies its cut, at any scale of a.

    (a, b) and (a, b) / max|a| are the same cut; the batched path solves the latter when some
    row's max|a| is extreme (1e-150, 1e150) and must scale the multiplier back by max|a|, on a
    binding cut and on the face b = min reach alike, and only then.
    """
    rng = np.random.default_rng(5)
    n, k, gamma = 6, 9, 0.01
    y = rng.normal(size=(n, k)) * 0.3 + 1.0 / k
    a = rng.normal(size=(n, k)) * scale
    f0 = np.array([a[r] @ floored_simplex_bisect(y[r], gamma) for r in range(n)])
    reach = np.array([smallest_reach(a[r], gamma) for r in range(n)])
    b = reach + np.linspace(0.2, 0.8, n) * (f0 - reach)
    b[-1] = reach[-1]  # the minimising face
    q, mu = _solve(y, gamma, a, b)
    for r in range(n):
        # The KKT conditions of (a, b) / scale, whose multiplier is mu * scale (all of order 1).
        assert_kkt(y[r], gamma, a[r] / scale, b[r] / scale, q[r], float(mu[r]) * scale)
        _, mu1 = _solve(y[r], gamma, a[r], float(b[r]))
        assert float(mu[r]) == pytest.approx(float(mu1), rel=1e-6)


def test_single_row_batch_equals_vector():
    y = np.array([[0.5, 0.2, 0.3, -0.1]])
    a = np.array([[1.0, -1.0, 0.5, 0.0]])
    b = np.array([0.05])
    q = project_step(y, 0.01, a, b)
    assert q.shape == (1, 4)
    np.testing.assert_array_equal(q[0], project_step(y[0], 0.01, a[0], 0.05))


def test_single_row_path_matches_batched_path_on_step_like_instances():
    """The one-row fast path (scalar 2x2 solves) and the batched path solve the same problems."""
    rng = np.random.default_rng(2024)
    n, k = 200, 50
    gamma = 1.0 / (10 * k)
    y = gamma + (1 - k * gamma) * rng.dirichlet(np.full(k, 0.5), size=n)
    y += rng.normal(scale=rng.choice([2.0 / k, 1.0]), size=(n, 1)) * rng.normal(size=(n, k))
    a = rng.normal(size=(n, k)) + rng.choice([0.0, 3.0], size=(n, 1))
    reach = gamma * a.sum(-1) + (1 - k * gamma) * a.min(-1)
    f0 = np.array([a[r] @ floored_simplex_bisect(y[r], gamma) for r in range(n)])
    b = reach + rng.uniform(0.01, 1.3, size=n) * (f0 - reach)
    q_rows, _ = _solve(y, gamma, a, b)
    n_binding = 0
    for r in range(n):
        q, mu = _solve(y[r], gamma, a[r], float(b[r]))
        assert_kkt(y[r], gamma, a[r], float(b[r]), q, float(mu))
        np.testing.assert_allclose(q, q_rows[r], rtol=0, atol=1e-12 * (1 + np.abs(y[r]).max()))
        np.testing.assert_array_equal(project_step(y[r], gamma, a[r], b[r]), q)
        np.testing.assert_array_equal(_project_step_unchecked(y[r], gamma, a[r], float(b[r])), q)
        n_binding += bool(mu > 0)
    assert n_binding >= 100


# ---------------------------------------------------------------------- empty and degenerate sets
def test_empty_set_raises_with_diagnosis():
    a = np.array([0.3, 0.5, 0.9, 0.4])
    gamma = 0.05
    reach = smallest_reach(a, gamma)  # 0.05 * 2.1 + 0.8 * 0.3 = 0.345
    b = reach - 0.01
    with pytest.raises(EmptyFeasibleSetError, match="smallest reachable") as info:
        project_step(np.full(4, 0.25), gamma, a, b)
    msg = str(info.value)
    assert f"{reach:.10g}" in msg and f"{b:.10g}" in msg
    assert "gamma * sum(a) + (1 - K gamma) * min(a)" in msg
    assert isinstance(info.value, ValueError)  # callers may catch ValueError too


@pytest.mark.parametrize("scale", [1e-150, 1e150])
def test_the_empty_set_diagnosis_of_an_extreme_cut_is_in_its_units(scale: float) -> None:
    """Emptiness of a cut whose max|a| is extreme is decided on (a, b) / max|a|; the message
    still gives the smallest reach and b in the cut's own units (and the rescaled ones), on
    the single-row and the batched path."""
    a = np.array([0.3, 0.5, 0.9, 0.4])
    gamma = 0.05
    reach = smallest_reach(a, gamma)  # 0.345 for the unscaled cut
    b = reach - 0.01
    ours = [f"{reach * scale:.10g}", f"{b * scale:.10g}", f"units of max|a| = {0.9 * scale:.6g}"]
    with pytest.raises(EmptyFeasibleSetError, match="smallest reachable") as info:
        project_step(np.full(4, 0.25), gamma, a * scale, b * scale)
    assert all(text in str(info.value) for text in ours), str(info.value)
    rows = np.stack([a, a]) * scale
    with pytest.raises(EmptyFeasibleSetError, match=re.escape("in row 0")) as info:
        project_step(np.full((2, 4), 0.25), gamma, rows, np.full(2, b * scale))
    assert all(text in str(info.value) for text in ours), str(info.value)


def test_empty_set_in_a_batch_names_the_row():
    a = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    b = np.array([2.0, 0.5])  # row 1 asks a . q <= 0.5 < min a = 1
    with pytest.raises(EmptyFeasibleSetError, match=re.escape("in row 1")):
        _project_step_unchecked(np.full((2, 3), 1 / 3), 0.0, a, b)


def test_b_at_the_smallest_reach_returns_the_minimising_face():
    a = np.array([2.0, 1.0, 3.0, 1.0, 5.0])
    gamma = 0.02
    y = np.array([0.9, 0.1, 0.5, 0.3, 0.2])
    reach = smallest_reach(a, gamma)
    for b in (reach, reach - 0.1 * FEASIBILITY_RTOL * 5.0, reach + 0.1 * FEASIBILITY_RTOL * 5.0):
        q, mu = _solve(y, gamma, a, b)
        # Off the face {a_i = min a} everything sits at the floor; on it, the floored projection
        # of y's face coordinates with the remaining mass: 1 - 3*0.02 = 0.94 over (0.1, 0.3).
        np.testing.assert_allclose(q[[0, 2, 4]], gamma, atol=1e-15)
        np.testing.assert_allclose(q[[1, 3]], [0.37, 0.57], atol=1e-12)
        assert abs(a @ q - reach) < 1e-12
        assert_kkt(y, gamma, a, max(b, reach), q, float(mu))


def test_a_subnormal_cut_is_empty_or_not_on_both_paths() -> None:
    """a = (0, 5e-324): q_1 5e-324 <= b with q_1 >= 1/4 is empty for b = 0 (the floats round
    gamma * sum(a) = 1.25e-324 down to 0). Both paths decide on (a, b) / max|a| and agree."""
    y, a = np.array([0.0, 1.0]), np.array([0.0, 5e-324])
    with pytest.raises(EmptyFeasibleSetError, match="smallest reachable"):
        project_step(y, 0.25, a, 0.0)
    with pytest.raises(EmptyFeasibleSetError, match="in row 0"):
        project_step(np.stack([y, y]), 0.25, np.stack([a, a]), np.zeros(2))
    q = project_step(y, 0.25, a, 5e-324)  # q_1 <= 1: no cut
    np.testing.assert_array_equal(q, [0.25, 0.75])
    np.testing.assert_array_equal(
        project_step(np.stack([y, y]), 0.25, np.stack([a, a]), [5e-324] * 2), [q, q]
    )


def test_k_gamma_equal_one_is_the_single_point():
    k = 4
    q = project_step([3.0, -1.0, 0.0, 2.0], 1.0 / k, [1.0, 2.0, 3.0, 4.0], 2.5)
    np.testing.assert_allclose(q, 0.25)
    with pytest.raises(EmptyFeasibleSetError):
        project_step([3.0, -1.0, 0.0, 2.0], 1.0 / k, [1.0, 2.0, 3.0, 4.0], 2.4)


# ---------------------------------------------------------------------- input validation
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"y": [0.5, np.nan]}, ValueError, "y contains 1 NaN"),
        ({"y": [0.5, np.inf]}, ValueError, "y contains 1 NaN or infinite"),
        ({"y": 0.5}, ValueError, "y must have"),
        ({"y": np.zeros((2, 0))}, ValueError, "y must have at least one expert"),
        ({"gamma": 0.6}, ValueError, "gamma == 0.6 with 2 experts"),
        ({"gamma": -0.1}, ValueError, "gamma == -0.1"),
        ({"gamma": np.nan}, ValueError, "gamma == nan"),
        ({"gamma": "0.1"}, TypeError, "gamma must be a real number"),
        ({"a": [1.0, np.nan], "b": 0.0}, ValueError, "a contains 1 NaN"),
        ({"a": [1.0, 2.0, 3.0], "b": 0.0}, ValueError, "a has 3 entries"),
        ({"a": [1.0, 2.0], "b": np.inf}, ValueError, "b contains 1 NaN or infinite"),
        ({"a": [1.0, 2.0], "b": [0.0, 1.0]}, ValueError, "b has shape"),
        ({"a": [1.0, 2.0]}, ValueError, "a was given without b"),
        ({"b": 1.0}, ValueError, "b was given without a"),
        ({"y": [[0.5, 0.5]] * 3, "a": [[1.0, 2.0]] * 2, "b": 0.0}, ValueError, "leading axes"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(kwargs, error, match):
    args = {"y": [0.5, 0.5], "gamma": 0.1, **kwargs}
    with pytest.raises(error, match=match):
        project_step(**args)


@pytest.mark.parametrize(
    ("y", "a", "b", "match"),
    [
        (np.array([0.5, np.nan]), np.array([1.0, 0.0]), 0.5, "y contains 1 NaN"),
        (np.array([0.5, 0.5]), np.array([1.0, -np.inf]), 0.5, "a contains 1 NaN or infinite"),
        (np.array([0.5, 0.5]), np.array([0.0, np.inf]), 0.5, "a contains 1 NaN or infinite"),
        (np.array([0.5, 0.5]), np.array([1.0, 0.0]), np.float64(np.nan), "b contains 1 NaN"),
        (np.array([np.inf, 0.5]), None, None, "y contains 1 NaN or infinite"),
    ],
)
def test_bad_float_arrays_raise_on_the_single_row_path(y, a, b, match):
    """1-d float64 arrays take a cheaper validation; it must reject the same inputs."""
    with pytest.raises(ValueError, match=match):
        project_step(y, 0.1, a, b)


def test_huge_and_tiny_cuts_match_the_unit_cut():
    """Cuts scaled by 1e200 or 1e-200 (their squares overflow or underflow) cut the same set."""
    y, a, b = np.array([0.6, 0.3, 0.1]), np.array([3.0, 1.0, 0.0]), 1.5
    q = project_step(y, 0.0, a, b)
    np.testing.assert_allclose(q, np.array([2.7, 2.4, 1.9]) / 7, atol=1e-15)
    for scale in (1e200, 1e-200):
        np.testing.assert_allclose(project_step(y, 0.0, scale * a, scale * b), q, atol=1e-14)


def test_inputs_are_not_mutated():
    y = np.array([[0.9, 0.3, -0.2], [0.1, 0.1, 0.8]])
    a = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    b = np.array([0.5, 0.3])
    copies = (y.copy(), a.copy(), b.copy())
    project_step(y, 0.05, a, b)
    for before, after in zip(copies, (y, a, b), strict=True):
        np.testing.assert_array_equal(before, after)


# ---------------------------------------------------------------------- extreme scales
def _magnitudes(min_size: int, max_size: int) -> st.SearchStrategy[np.ndarray]:
    """Vectors mixing zeros and values of any sign and magnitude from 1e-300 to 1e308."""
    value = st.one_of(
        st.just(0.0),
        st.builds(
            lambda sign, e, m: sign * m * 10.0**e,
            st.sampled_from([-1.0, 1.0]),
            st.integers(-300, 307),
            st.floats(1.0, 9.99),
        ),
        st.floats(-10.0, 10.0),
    )
    return st.lists(value, min_size=min_size, max_size=max_size).map(np.array)


def test_issue_examples_stay_on_the_floored_simplex() -> None:
    for top in (1e12, 1e16, 1e300):
        q = project_step(np.r_[top, np.zeros(9)], 0.01)
        np.testing.assert_allclose(q, np.r_[0.91, np.full(9, 0.01)], rtol=0, atol=1e-15)
        # The same point with a cut q_0 <= 0.5, one row and several: the rest shares 0.5.
        a = np.r_[1.0, np.zeros(9)]
        want = np.r_[0.5, np.full(9, 0.5 / 9)]
        np.testing.assert_allclose(project_step(np.r_[top, np.zeros(9)], 0.01, a, 0.5), want)
        rows = project_step(np.tile(np.r_[top, np.zeros(9)], (3, 1)), 0.01, a, np.full(3, 0.5))
        np.testing.assert_allclose(rows, np.tile(want, (3, 1)))


@settings(max_examples=150, deadline=None)
@given(
    y=_magnitudes(1, 12),
    gamma_frac=st.floats(0.0, 1.0),
    a=_magnitudes(12, 12),
    where=st.floats(0.0, 1.0),
    batched=st.booleans(),
)
def test_every_finite_input_lands_on_the_floored_simplex(
    y: np.ndarray, gamma_frac: float, a: np.ndarray, where: float, batched: bool
) -> None:
    """sum(q) = 1 to 1e-12 and q >= gamma for any finite y and a, with or without a cut."""
    k = y.size
    gamma = gamma_frac / k
    a = a[:k]
    q0 = project_step(y, gamma)
    assert abs(q0.sum() - 1.0) <= 1e-12 and q0.min() >= gamma
    if not np.isfinite(a.sum() * 1e-300):  # a's own sum overflows: scale it (the same cut)
        a = a / np.abs(a).max()
    # A cut between the smallest reachable a . q and the unconstrained point's a . q.
    lo = gamma * a.sum() + (1.0 - k * gamma) * a.min()
    b = float(lo + where * (a @ q0 - lo)) if a @ q0 > lo else float(a @ q0)
    b = max(b, smallest_reach_rounded_up(a, gamma))  # not empty however lo rounded
    if batched:
        q = project_step(np.stack([y, y]), gamma, np.stack([a, a]), np.array([b, b]))[1]
    else:
        q = project_step(y, gamma, a, b)
    assert np.all(np.isfinite(q))
    assert abs(q.sum() - 1.0) <= 1e-12
    assert q.min() >= gamma
    assert a @ q <= b + 1e-9 * np.abs(a).max() + 1e-12 * abs(b)


@settings(max_examples=60, deadline=None)
@given(
    y=hnp.arrays(np.float64, 8, elements=st.floats(-3.0, 3.0)),
    a=hnp.arrays(np.float64, 8, elements=st.floats(-2.0, 2.0)),
    where=st.floats(0.05, 0.95),
    gamma_frac=st.floats(0.0, 0.9),
)
def test_the_exact_fallback_agrees_with_the_floating_point_solver(
    y: np.ndarray, a: np.ndarray, where: float, gamma_frac: float
) -> None:
    from msroute.core.qp._exact_cut import exact_cut

    gamma = gamma_frac / 8
    q0 = project_step(y, gamma)
    lo = smallest_reach(a, gamma)
    if not a @ q0 > lo + 1e-6 or np.ptp(a) < 1e-3:
        return
    b = float(lo + where * (a @ q0 - lo))
    q, mu = _solve(y, gamma, a, b)
    qe, mue = exact_cut(y, gamma, a, b, 0.0)
    np.testing.assert_allclose(qe, q, atol=1e-9)
    assert abs(qe.sum() - 1.0) <= 1e-15 * 8 and abs(a @ qe - b) <= 1e-14
    assert mue == pytest.approx(float(mu), rel=1e-7, abs=1e-9)


def test_exact_search_is_bounded_whatever_the_bracket(monkeypatch: pytest.MonkeyPatch) -> None:
    """y spread over 1e308 against the gap 5e-324 of a: the exact search needs a few steps.

    y - mu a cancels at this scale, so the floating-point solution fails its accuracy check
    and the row is solved in rational arithmetic, on a bracket of mu ~2^2098 wide (every
    coordinate off argmin(a) is floored beyond (max y - min y + 1) / 5e-324). A linear
    bisection of it took ~2100 steps here (and once hit its cap of 4000 on a thinner piece);
    halving log(1 + mu) and dropping whole linear pieces of a . q(mu) takes a handful. The cap
    is lowered so that a step count growing with the scale fails this test.
    """
    import msroute.core.qp._exact_cut as exact

    monkeypatch.setattr(exact, "MAX_EXACT_STEPS", 32)
    y, a = np.array([1e308, 0.0, 0.0]), np.array([1.0, 0.0, 5e-324])
    # The cut q_0 <= 1/4 binds; the rest shares 3/4 (a_2 - a_1 = 5e-324 splits it unevenly
    # by mu * 5e-324 ~ 1e-16).
    want = [0.25, 0.375, 0.375]
    np.testing.assert_allclose(project_step(y, 0.0, a, 0.25), want, rtol=0, atol=1e-15)
    rows = project_step(np.stack([y, y]), 0.0, np.stack([a, a]), np.array([0.25, 0.25]))
    np.testing.assert_allclose(rows, [want, want], rtol=0, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(
    y=_magnitudes(1, 12),
    gamma_frac=st.floats(0.0, 0.99),
    a=_magnitudes(12, 12),
    where=st.floats(0.01, 0.99),
    guess=st.one_of(st.sampled_from([0.0, np.inf, np.nan, 1.8e308]), st.floats(0.0, 1e300)),
)
def test_the_exact_search_ends_on_the_same_point_from_any_guess(
    y: np.ndarray, gamma_frac: float, a: np.ndarray, where: float, guess: float
) -> None:
    """The exact solution is unique: every starting guess of mu gives the same floats."""
    from msroute.core.qp._exact_cut import exact_cut

    k = y.size
    gamma = gamma_frac / k
    a = a[:k]
    if not np.abs(a).max() > 0.0:
        return
    a = a / np.abs(a).max()  # as its callers pass it
    q0 = project_step(y, gamma)
    lo = gamma * a.sum() + (1.0 - k * gamma) * a.min()
    b = float(lo + where * (a @ q0 - lo))
    if not lo + FEASIBILITY_RTOL < b < a @ q0:  # a binding, non-degenerate cut
        return
    q, mu = exact_cut(y, gamma, a, b, 0.0)
    qg, mug = exact_cut(y, gamma, a, b, guess)
    np.testing.assert_array_equal(qg, q)
    assert mug == mu and mu > 0.0
    assert abs(q.sum() - 1.0) <= 2 * k * np.finfo(float).eps and q.min() >= gamma


@settings(max_examples=300, deadline=None)
@given(
    st.fractions(min_value=0, max_value=2**2100),
    st.fractions(min_value=0, max_value=2**2100),
    st.integers(0, 2100),
)
def test_the_bisection_point_is_inside_and_halves_the_exponent(
    x: Fraction, y: Fraction, shift: int
) -> None:
    from msroute.core.qp._exact_cut import bisection_point, floor_log2

    lo, hi = min(x, y), max(x, y) * 2**shift + 1
    mid = bisection_point(lo, hi)
    assert lo < mid < hi
    e_lo, e_mid, e_hi = (floor_log2(1 + v) for v in (lo, mid, hi))
    for v, e in ((lo, e_lo), (mid, e_mid), (hi, e_hi)):
        assert 2**e <= 1 + v < 2 ** (e + 1)
    if e_hi - e_lo >= 2:  # halving log(1 + mu): either half spans at most half the exponents
        assert max(e_mid - e_lo, e_hi - e_mid) <= (e_hi - e_lo + 1) // 2
    else:
        assert mid == (lo + hi) / 2
