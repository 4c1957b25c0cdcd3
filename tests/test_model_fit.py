"""The model estimator's two fits (msroute.policies.omd_variants): the dense exact solve and
the sparse conjugate-gradient one that scales in K; their persistence and validation."""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _policy_sim import beta_skills
from msroute import Constraints, Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.errors import InvalidStateError, InvalidValueError, JournalError
from msroute.policies import PolicyFileError, load_policy
from msroute.policies.base import draw_counts
from msroute.policies.omd import OMDApproachability
from msroute.policies.omd_variants import (
    DENSE_FIT_MAX_EXPERTS,
    ModelGradient,
    SparseModelGradient,
    make_estimator,
)
from msroute.policies.state_walk import check_state, load_state_dict, state_dict, variable_entries
from msroute.router import Router
from test_persist import MEANS, lockstep, make, play, rewrite
from test_policies_omd import COSTS, SKILLS, M, run_fixed_skills
from test_router import _assert_same_policy_state, _FailingCommits, cfg, traffic

RUNS, CONTEXTS = 3, 2


def feed(
    fits: list[ModelGradient | SparseModelGradient],
    k: int,
    rounds: int,
    seed: int,
    on_refit: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> None:
    """Give every fit the same rounds (skewed routing, random contexts), refitting every 10."""
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(k, 0.3), RUNS)
    rows = np.arange(RUNS)
    for t in range(rounds):
        draws = np.stack([rng.choice(k, M, p=q[r]) for r in range(RUNS)])
        counts = draw_counts(draws, k)
        ctx = rng.integers(0, CONTEXTS, RUNS)
        reward = rng.uniform(0.0, 1.0, RUNS) + (counts[:, :5] > 0).sum(axis=1)
        for fit in fits:
            fit.estimate(rows, ctx, q, draws, counts, reward, reward)
        if t % 10 == 9:
            for fit in fits:
                fit.refit(rows, ctx)
            if on_refit is not None:
                on_refit(rows, ctx)


def dense_gram(sparse: SparseModelGradient, k: int) -> np.ndarray:
    """The sparse fit's counts as the dense fit's (cells, K + 1, K + 1) Gram matrices."""
    gram = np.zeros(RUNS * CONTEXTS * (k + 1) ** 2)
    gram[sparse.pair_key] = sparse.pair_count
    return gram.reshape(RUNS, CONTEXTS, k + 1, k + 1) + sparse.ridge * np.eye(k + 1)


@pytest.mark.parametrize(("k", "m"), [(40, 5), (3, 5)])
def test_sparse_statistics_are_the_dense_ones_bit_for_bit(k: int, m: int) -> None:
    dense = ModelGradient(RUNS, CONTEXTS, k, m, ix=0.01)
    sparse = SparseModelGradient(RUNS, CONTEXTS, k, m, ix=0.01)
    feed([dense, sparse], k, 200, seed=1)
    assert np.array_equal(dense_gram(sparse, k), dense.gram)
    assert np.array_equal(sparse.moment, dense.moment)
    assert np.all(np.diff(sparse.pair_key) > 0) and sparse.pair_count.min() >= 1


def test_sparse_fit_is_the_dense_least_squares_solution() -> None:
    """At every refit, for every run and context, the conjugate gradient stops at a relative
    residual of 1e-8 on the exact Gram matrix, which puts it within 1e-6 of the dense exact
    solve (coefficients of order 1); experts never routed get exactly 0."""
    k = 60
    dense = ModelGradient(RUNS, CONTEXTS, k, M, ix=0.0)
    sparse = SparseModelGradient(RUNS, CONTEXTS, k, M, ix=0.0)
    worst: list[float] = []
    residual: list[float] = []

    def compare(rows: np.ndarray, ctx: np.ndarray) -> None:
        worst.append(float(np.abs(sparse.coef - dense.coef).max()))
        moment = dense.moment[rows, ctx]
        gap = np.einsum("rij,rj->ri", dense.gram[rows, ctx], sparse.coef[rows, ctx]) - moment
        residual.append(float(np.max(np.linalg.norm(gap, axis=1) / np.linalg.norm(moment, axis=1))))

    feed([dense, sparse], k, 400, seed=2, on_refit=compare)
    assert max(worst) < 1e-6 and max(residual) <= 1e-8
    assert np.abs(dense.coef).max() > 0.1  # a fit with something in it
    never = dense_gram(sparse, k)[..., 0, :] == 0.0
    assert never.any() and np.all(sparse.coef[never] == 0.0)


def test_a_refit_cut_short_continues_from_where_it_stopped() -> None:
    """Five iterations per refit: not yet the solution, but each refit starts from the last
    coefficients, so refits on the same data converge to the dense solution."""
    k = 60
    dense = ModelGradient(RUNS, CONTEXTS, k, M, ix=0.0)
    sparse = SparseModelGradient(RUNS, CONTEXTS, k, M, ix=0.0, max_iter=5)
    feed([dense, sparse], k, 200, seed=3)
    gaps = [float(np.abs(sparse.coef - dense.coef).max())]
    runs, ctx = np.repeat(np.arange(RUNS), CONTEXTS), np.tile(np.arange(CONTEXTS), RUNS)
    dense.refit(runs, ctx)
    while gaps[-1] >= 1e-7 and len(gaps) < 2000:
        sparse.refit(runs, ctx)
        gaps.append(float(np.abs(sparse.coef - dense.coef).max()))
    assert gaps[0] > 1e-4 and gaps[-1] < 1e-7


def test_the_fit_is_picked_by_the_number_of_experts() -> None:
    def fit(k: int, how: str = "auto") -> object:
        return make_estimator("model", 1, 1, k, M, 0.0, how)

    assert type(fit(DENSE_FIT_MAX_EXPERTS)) is ModelGradient
    assert type(fit(DENSE_FIT_MAX_EXPERTS + 1)) is SparseModelGradient
    assert type(fit(6, "sparse")) is SparseModelGradient
    assert type(fit(500, "dense")) is ModelGradient
    with pytest.raises(InvalidValueError, match="model_fit == 'cg', must be one of auto"):
        fit(6, "cg")
    problem = Problem(COSTS, M, Constraints(upper=[0.8, None]))
    with pytest.raises(InvalidValueError, match="model_fit == 'cg'"):
        OMDApproachability(problem, horizon=10, model_fit="cg")


def test_sparse_and_dense_fits_route_alike() -> None:
    """The same instance and seed: the same reward within noise and the same expected reward
    of the played q at every round to 1e-6 (the fits differ by the solver's tolerance)."""
    problem = Problem(COSTS, M, Constraints(upper=[0.8, None], lower=[None, 0.4]))
    batch = ProblemBatch(problem, 2)
    out = {}
    for fit in ("dense", "sparse"):
        pol = OMDApproachability(batch, horizon=1500, seed=5, model_fit=fit)
        assert type(pol.estimator) is {"dense": ModelGradient, "sparse": SparseModelGradient}[fit]
        rewards, costs, phis, _ = run_fixed_skills(pol, batch, SKILLS, 1500)
        avg = costs.mean(axis=0)
        assert np.all(avg[:, 0] <= 0.8 + 1e-9) and np.all(avg[:, 1] >= 0.4 - 1e-9)
        out[fit] = (rewards, phis)
    (r_dense, phi_dense), (r_sparse, phi_sparse) = out["dense"], out["sparse"]
    noise = 3.0 * np.sqrt(r_dense.var() / r_dense.size + r_sparse.var() / r_sparse.size)
    assert abs(r_dense.mean() - r_sparse.mean()) <= noise
    np.testing.assert_allclose(phi_sparse, phi_dense, atol=1e-6)


def test_memory_at_100000_experts_is_bounded() -> None:
    """No (K + 1)^2 array (80 GB here): every state array holds at most a few K entries, and
    building the policy and playing a batch of rounds, its QP step included, allocate less than
    100 MB at their peak (42 MB measured over two batches, with the debug checks' copies of the
    state; the uniforms' buffer is 13 MB). One batch: each round costs seconds under the tracer."""
    k = 100_000
    rng = np.random.default_rng(0)
    costs = np.column_stack([rng.random(k), (np.arange(k) < 10).astype(float)])
    problem = Problem(costs, m_draws=5, constraints=Constraints(upper=[2.0, 1.0]))
    tracemalloc.start()
    try:
        pol = OMDApproachability(problem, horizon=1000, seed=1, check_feasible=False)
        assert isinstance(pol.estimator, SparseModelGradient)
        rounds = pol.batch_size
        for _ in range(rounds):
            decision = pol.select()
            pol.update(decision, rng.random(1), problem.costs[decision.draws[0]].sum(0)[None])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pol._steps.sum() == 1  # the batch's QP step was taken
    assert peak < 100e6, peak
    sizes = {key: v.size for key, v in state_dict(pol).items() if isinstance(v, np.ndarray)}
    assert 0 < sizes["estimator.pair_key"] <= rounds * (5 + 1) ** 2  # the pairs seen, not K^2
    buffers = [key for key in sizes if key.startswith("streams.") and key.endswith(".buffer")]
    assert max(v for key, v in sizes.items() if key not in buffers) <= 2 * (k + 1)


# ---------------------------------------------------------------------- persistence
def sparse_policy(n_runs: int = 2) -> OMDApproachability:
    problem = Problem(COSTS, M, Constraints(upper=[0.8, None], lower=[None, 0.4]))
    return OMDApproachability(
        ProblemBatch(problem, n_runs), horizon=500, seed=3, model_fit="sparse"
    )


def test_sparse_fit_saves_and_resumes_bit_for_bit(tmp_path: Path) -> None:
    pol = sparse_policy()
    batch = pol.problem_batch
    run_fixed_skills(pol, batch, SKILLS, 55)
    pol.save(tmp_path / "p.npz")
    back = load_policy(tmp_path / "p.npz")
    assert isinstance(back, OMDApproachability)
    assert isinstance(back.estimator, SparseModelGradient)
    size = pol.estimator.pair_key.size
    for p in (pol, back):
        run_fixed_skills(p, batch, SKILLS, 100)
    assert pol.estimator.pair_key.size > size  # the resumed state grew, as the original's
    for key, value in state_dict(pol).items():
        other = state_dict(back)[key]
        assert np.array_equal(value, other) if isinstance(value, np.ndarray) else value == other


@pytest.mark.parametrize("name", ["omd", "omd-contextual"])
def test_a_resumed_sparse_fit_decides_exactly_like_the_original(name: str, tmp_path: Path) -> None:
    """Runs in several contexts, saved mid-batch, then the same feedback: the same draws."""
    skills = beta_skills(MEANS, 3, 90, seed=7)
    contexts = np.random.default_rng(8).integers(0, 2, size=(90, 3))
    original = make(name, variant="model", model_fit="sparse")
    play(original, skills, contexts, range(43))
    original.save(tmp_path / "p.npz")
    resumed = load_policy(tmp_path / "p.npz")
    assert isinstance(resumed, OMDApproachability)
    assert isinstance(resumed.estimator, SparseModelGradient)
    lockstep(original, resumed, skills, contexts, range(43, 90))


def test_only_declared_entries_may_change_length() -> None:
    pol = sparse_policy()
    run_fixed_skills(pol, pol.problem_batch, SKILLS, 30)
    assert variable_entries(pol) == {"estimator.pair_key", "estimator.pair_count"}
    fresh = sparse_policy()
    load_state_dict(fresh, state_dict(pol))  # longer pair arrays than the fresh policy's
    assert np.array_equal(fresh.estimator.pair_key, pol.estimator.pair_key)
    state = state_dict(pol)
    state["estimator.moment"] = state["estimator.moment"][:1]
    with pytest.raises(InvalidValueError, match=r"'estimator.moment' must be float64 of shape"):
        load_state_dict(fresh, state)
    state = state_dict(pol)
    state["estimator.pair_key"] = state["estimator.pair_key"][:, None]
    with pytest.raises(InvalidValueError, match=r"'estimator.pair_key' must be int64 of shape \(n"):
        load_state_dict(fresh, state)


def _edit_array(name: str, change: Callable[[np.ndarray], np.ndarray]):
    def edit(_: dict[str, Any], members: dict[str, bytes]) -> None:
        arr = np.load(io.BytesIO(members[f"state.{name}.npy"]), allow_pickle=False)
        buf = io.BytesIO()
        np.save(buf, change(arr.copy()), allow_pickle=False)
        members[f"state.{name}.npy"] = buf.getvalue()

    return edit


def _bump_first_offdiagonal(count: np.ndarray, key: np.ndarray, p: int) -> np.ndarray:
    i, j = np.divmod(key % (p * p), p)
    count[np.flatnonzero((i > 0) & (j > i))[0]] += 1
    return count


def _one_round(count: np.ndarray) -> np.ndarray:
    count[0] = 1  # the first cell's intercept: one round, fewer than its features had
    return count


@pytest.mark.parametrize(
    ("name", "change", "match"),
    [
        ("pair_key", lambda a: a[::-1].copy(), "pair keys must increase"),
        ("pair_key", lambda a: a + 10**12, "pair keys must increase in"),
        ("pair_count", lambda a: a[:-1], "must have the same length"),
        ("pair_count", lambda a: a * 0, "counts must be >= 1"),
        ("pair_key", lambda a: a.astype(np.float64), "'estimator.pair_key' must be int64"),
        ("pair_count", _one_round, "counts more rounds than"),
    ],
)
def test_a_damaged_sparse_state_is_refused(
    tmp_path: Path, name: str, change: Callable[[np.ndarray], np.ndarray], match: str
) -> None:
    pol = sparse_policy()
    run_fixed_skills(pol, pol.problem_batch, SKILLS, 40)
    path = tmp_path / "p.npz"
    pol.save(path)
    rewrite(path, _edit_array(f"estimator.{name}", change))
    with pytest.raises(PolicyFileError, match=f"cannot rebuild the saved policy: .*({match})"):
        load_policy(path)


def test_a_moment_at_a_feature_never_seen_is_refused() -> None:
    fit = SparseModelGradient(RUNS, CONTEXTS, 8, M, ix=0.0)
    fit.validate_state("estimator.")
    fit.moment[1, 0, 3] = 0.5
    with pytest.raises(InvalidStateError, match=r"'estimator\.moment' is nonzero at a feature"):
        fit.validate_state("estimator.")


def test_asymmetric_counts_are_refused_in_both_fits(tmp_path: Path) -> None:
    pol = sparse_policy()
    run_fixed_skills(pol, pol.problem_batch, SKILLS, 40)
    p = pol.n_experts + 1
    key = pol.estimator.pair_key
    pol.save(tmp_path / "s.npz")
    rewrite(
        tmp_path / "s.npz",
        _edit_array("estimator.pair_count", lambda c: _bump_first_offdiagonal(c, key, p)),
    )
    with pytest.raises(PolicyFileError, match="co-occurrence counts are not symmetric"):
        load_policy(tmp_path / "s.npz")
    dense = OMDApproachability(pol.problem_batch, horizon=500, seed=3, model_fit="dense")
    run_fixed_skills(dense, dense.problem_batch, SKILLS, 40)
    check_state(dense)
    dense.estimator.gram[0, 0, 1, 2] += 1.0
    with pytest.raises(InvalidStateError, match=r"'estimator\.gram'.*not symmetric"):
        check_state(dense)
    dense.estimator.gram[0, 0, 1, 2] -= 0.5
    with pytest.raises(InvalidStateError, match=r"'estimator\.gram'.*integer counts"):
        check_state(dense)


# ---------------------------------------------------------------------- the router
def sparse_router(**changes: Any) -> Router:
    return Router(cfg(params={"variant": "model", "model_fit": "sparse"}, **changes))


def test_a_router_with_the_sparse_fit_recovers_from_a_failed_commit(tmp_path: Path) -> None:
    """A failed feedback commit leaves the sparse fit as committed: its pair arrays, which
    the feedback's learning would have grown, are back to their committed length."""
    router = Router(
        cfg(params={"variant": "model", "model_fit": "sparse"}), journal=tmp_path / "j.db"
    )
    twin = sparse_router()
    for r in (router, twin):
        traffic(r, 30)
        r.route(decision_id="last")
    policy = router.policy
    assert isinstance(policy, OMDApproachability)
    assert isinstance(policy.estimator, SparseModelGradient)
    real = router._journal._db  # type: ignore[union-attr]
    router._journal._db = _FailingCommits(real)  # type: ignore[union-attr]
    with pytest.raises(JournalError, match="disk I/O error"):
        router.feedback("last", 0.7)
    router._journal._db = real  # type: ignore[union-attr]
    estimator = router.policy.estimator  # the policy as committed (reloaded)
    assert isinstance(estimator, SparseModelGradient)
    assert isinstance(twin.policy, OMDApproachability)
    assert estimator.pair_key.size == twin.policy.estimator.pair_key.size  # type: ignore[union-attr]
    _assert_same_policy_state(router, twin)
    assert router.feedback("last", 0.7) == twin.feedback("last", 0.7) == "applied"
    _assert_same_policy_state(router, twin)
    router.close()


def test_a_router_with_the_sparse_fit_adds_experts_and_restarts(tmp_path: Path) -> None:
    router = Router(
        cfg(params={"variant": "model", "model_fit": "sparse"}), journal=tmp_path / "j.db"
    )
    traffic(router, 60)
    router.add_expert("new", {"usd": 0.005, "gpu": 0.2})
    policy = router.policy
    assert isinstance(policy, OMDApproachability)
    assert policy.estimator.pair_key.size == 0  # the fit starts over with the new pool
    traffic(router, 60, start=60)
    assert policy.estimator.pair_key.size > 0
    check_state(policy)
    router.close()
    reopened = Router.open(tmp_path / "j.db")
    _assert_same_policy_state(reopened, router)
    reopened.close()


def test_the_dense_fit_credits_a_batch_as_numpy_s_fancy_indexed_add() -> None:
    """The compiled credit of a batch's round (``_compiled.gram.add_rounds``) leaves the Gram
    matrices and moments of numpy's fancy-indexed add, entry for entry: ``1.0`` and the
    reward added once to each distinct entry, a repeated draw counted once, other cells and
    contexts untouched."""
    rng = np.random.default_rng(5)
    runs, contexts, k, m = 6, 3, 7, 4
    fit = ModelGradient(runs, contexts, k, m, ix=0.0)
    p = k + 1
    gram = fit.gram.copy()
    moment = fit.moment.copy()
    for _ in range(40):
        rows = rng.choice(runs, size=4, replace=False)
        ctx = rng.integers(0, contexts, size=rows.size)
        draws = rng.integers(0, 3, size=(rows.size, m))  # repeats within a row, often
        idx = np.concatenate([np.zeros((rows.size, 1), dtype=np.int64), draws + 1], axis=1)
        reward = rng.normal(size=rows.size)
        fit._accumulate(rows, ctx, idx, reward)
        at = ((rows * contexts + ctx) * p)[:, None] + idx
        gram.reshape(-1)[at[:, :, None] * p + idx[:, None, :]] += 1.0
        moment.reshape(-1)[at] += reward[:, None]
    assert np.array_equal(fit.gram, gram)
    assert np.array_equal(fit.moment, moment)
    assert fit.gram.reshape(-1, p, p)[:, 0, 0].max() > 1.0  # the rounds were credited
