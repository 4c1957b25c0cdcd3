"""The projection onto the floored simplex cut by several half-spaces (one per active bound)."""

from __future__ import annotations

import numpy as np
import pytest

from msroute import EmptyFeasibleSetError, project_step
from msroute.core.qp import projection_cuts
from msroute.core.qp._cut_rows import SOLVED, cut_rows
from msroute.core.qp._simplex import _floored_simplex
from msroute.core.qp.projection_cuts import project_cuts, solve_cuts

cp = pytest.importorskip("cvxpy")


def reference(y: np.ndarray, gamma: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The same projection by a general conic solver (Clarabel at tight tolerances)."""
    x = cp.Variable(y.size)
    cons = [cp.sum(x) == 1, x >= gamma, a @ x <= b]
    prob = cp.Problem(cp.Minimize(cp.sum_squares(x - y)), cons)
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.asarray(x.value)


def random_instance(rng: np.random.Generator, it: int):
    k = int(rng.integers(3, 30))
    m = int(rng.integers(1, 4))
    gamma = float(rng.uniform(0, 1 / k))
    y = rng.normal(size=k) * rng.choice([0.1, 1.0, 10.0])
    if it % 3:
        a = rng.normal(size=(m, k))
    else:  # 0/1 columns with a sign: the cuts of cost indicators (many ties)
        a = rng.integers(0, 2, size=(m, k)).astype(float) * rng.choice([-1.0, 1.0], size=(m, 1))
    x0 = rng.dirichlet(np.ones(k)) * (1 - k * gamma) + gamma
    b = a @ x0 + rng.uniform(0.0, 0.3, size=m) * (it % 2)
    return y, gamma, a, b


def test_matches_a_general_solver_and_certifies_kkt() -> None:
    rng = np.random.default_rng(0)
    binding = np.zeros(4, dtype=int)
    for it in range(150):
        y, gamma, a, b = random_instance(rng, it)
        q, mu = solve_cuts(y[None], gamma, a[None], b[None])
        q, mu = q[0], mu[0]
        ref = reference(y, gamma, a, b)
        # Feasible, and never worse than the reference solver (which is accurate to ~1e-8).
        assert abs(q.sum() - 1) < 1e-12 and q.min() >= gamma - 1e-15
        assert np.all(a @ q - b <= 1e-12)
        assert np.sum((q - y) ** 2) <= np.sum((ref - y) ** 2) + 1e-12
        np.testing.assert_allclose(q, ref, atol=1e-6)
        # KKT: q = max(gamma, y - A^T mu - tau) with mu >= 0, complementary slackness.
        assert np.all(mu >= 0)
        assert np.all(mu * np.abs(a @ q - b) <= 1e-9)
        z = y - mu @ a
        free = q > gamma + 1e-12
        tau = float(np.mean((z - q)[free]))
        np.testing.assert_allclose(q[free], (z - tau)[free], atol=1e-9)
        assert np.all(z[~free] - tau <= gamma + 1e-9)
        binding[int(np.sum(mu > 0))] += 1
    assert binding[2] + binding[3] > 20  # the test exercises several binding cuts at once


#: Rows met by the Router's default OMD with 3 contexts and a binding budget (K = 5, one cut):
#: step 2's semismooth iteration cycles on both (a free set of one coordinate with the cut
#: binding is singular), and the second was left 1e-9 short of its optimum by step 3's Newton
#: ascent before the one-cut search.
CYCLING_ROWS = [
    (
        [15.10711985, 0.2, 7.65355992, 7.65355992, 7.65355992],
        0.02,
        [0.8634604, 0.70341734, 0.6197135, 1.0, 0.78123573],
        0.63709869,
    ),
    (
        [
            -3.8497789388951955,
            -4.853054960090246,
            9.410555701024954,
            2.666002693261672,
            21.849522219408797,
        ],
        0.014142135623730949,
        [0.8473733535224224, 0.668474089304548, 0.5749082902794383, 1.0, 0.7554610121241566],
        0.5886498550670587,
    ),
]


@pytest.mark.parametrize("row", range(len(CYCLING_ROWS)))
def test_rows_where_the_active_set_cycles_are_solved_exactly(row: int) -> None:
    y, gamma, a, b = (np.array(v, dtype=float) for v in CYCLING_ROWS[row])
    q, mu = solve_cuts(y[None], float(gamma), a[None, None], b[None, None])
    q, mu = q[0], mu[0]
    ref = reference(y, float(gamma), a[None], b[None])
    assert abs(q.sum() - 1) < 1e-12 and q.min() >= gamma - 1e-15
    assert a @ q - b <= 1e-12 and mu[0] > 0 and abs(a @ q - b) <= 1e-12  # the cut binds
    best = np.sum((ref - y) ** 2)
    assert np.sum((q - y) ** 2) <= best * (1 + 1e-12)
    z = y - mu[0] * a
    free = q > gamma + 1e-12
    tau = float(np.mean((z - q)[free]))
    np.testing.assert_allclose(q[free], (z - tau)[free], atol=1e-9)
    assert np.all(z[~free] - tau <= gamma + 1e-9)


def test_one_cut_is_project_step() -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        k = 12
        y, a = rng.normal(size=k), rng.normal(size=k)
        b = float(a @ np.full(k, 1 / k) + rng.uniform(0, 0.2))
        np.testing.assert_allclose(
            project_cuts(y, 0.01, a[None], [b]), project_step(y, 0.01, a, b), atol=1e-13
        )


def test_zero_rows_are_no_cut_and_rows_are_independent() -> None:
    y = np.array([[0.9, 0.3, -0.2], [0.2, 0.2, 0.6]])
    a = np.zeros((2, 2, 3))
    a[0, 0, 0] = 1.0  # row 0: q_0 <= 0.5; row 1: no cut at all
    q = project_cuts(y, 0.05, a, np.array([[0.5, 0.0], [0.0, 0.0]]))
    np.testing.assert_allclose(q[0], project_step(y[0], 0.05, a[0, 0], 0.5), atol=1e-15)
    np.testing.assert_allclose(q[1], project_step(y[1], 0.05), atol=1e-15)


def test_cuts_that_miss_the_simplex_together_raise() -> None:
    # q_0 <= 0.3 and q_0 >= 0.5: each alone is fine, together empty.
    a = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    with pytest.raises(EmptyFeasibleSetError):
        project_cuts([0.9, 0.1, 0.0], 0.0, a, [0.3, -0.5])
    with pytest.raises(EmptyFeasibleSetError):  # one cut alone misses it
        project_cuts([0.9, 0.1, 0.0], 0.1, a[:1], [0.05])


def test_bad_shapes_are_named() -> None:
    with pytest.raises(ValueError, match="shape"):
        project_cuts([0.5, 0.5], 0.0, [[1.0, 0.0, 0.0]], [1.0])


@pytest.mark.parametrize("loaded", [False, True], ids=["python", "compiled"])
def test_one_row_in_python_floats_and_a_compiled_batch_give_the_same_floats(
    loaded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A live router projects one row in Python floats until its background thread has loaded
    # the compiled rows (then compiled), a batch of runs compiles the same steps: a run must
    # get the floats it would get in a batch (alone = batch, bit for bit), either way.
    if loaded:
        projection_cuts.load_compiled_rows()
    monkeypatch.setattr(projection_cuts, "_rows_loaded", loaded)
    rng = np.random.default_rng(5)
    for it in range(40):
        y, gamma, a, b = random_instance(rng, it)
        n = 6
        ys = y[None] + rng.normal(size=(n, y.size)) * 0.3
        a_n, b_n = np.repeat(a[None], n, axis=0), np.repeat(b[None], n, axis=0)
        try:
            q, mu = solve_cuts(ys, gamma, a_n, b_n)
        except EmptyFeasibleSetError:
            continue
        for r in range(n):
            q1, mu1 = solve_cuts(ys[r : r + 1], gamma, a_n[r : r + 1], b_n[r : r + 1])
            assert np.array_equal(q1[0], q[r]) and np.array_equal(mu1[0], mu[r]), (it, r)


def test_rows_whose_cuts_hold_get_the_floored_simplex_floats() -> None:
    rng = np.random.default_rng(6)
    for _ in range(50):
        k = int(rng.integers(2, 60))
        y = rng.normal(size=(3, k))
        gamma = float(rng.uniform(0, 1 / k))
        a = rng.normal(size=(3, 2, k))
        b = np.abs(a).sum(axis=-1)  # never binding
        want, _, _ = _floored_simplex(y, gamma)
        assert np.array_equal(solve_cuts(y, gamma, a, b)[0], want)
        assert np.array_equal(solve_cuts(y[:1], gamma, a[:1], b[:1])[0], want[:1])


def test_a_singular_first_guess_grows_the_free_set_and_is_solved_exactly() -> None:
    # A router's step far off the simplex: q(0) is a vertex (one free coordinate), and with
    # the cut binding the first guess's equations are singular; growing F by the coordinates
    # of y above the floor settles it in step 2.
    y = np.array([-1.81213335, 0.02, -1.41275706, -2.2724113, 8.4756538])
    a = np.array([[0.1254877, 0.21185495, 0.70356197, 0.68247056, 0.6538466]])
    b, gamma = np.array([0.29952995]), 0.014142135623730949
    q, mu, status = [[0.0] * 5], [[0.0]], [9]
    cut_rows([y.tolist()], gamma, [a.tolist()], [b.tolist()], q, mu, status)
    assert status == [SOLVED]
    ref = reference(y, gamma, a, b)
    np.testing.assert_allclose(q[0], ref, atol=1e-8)
    assert abs(float(a[0] @ np.array(q[0])) - b[0]) < 1e-12 and mu[0][0] > 0.0
