"""Teams under a budget with contexts: the exact surrogate's aggregate cut, its default, and
what files and journals of the linear default before it keep running."""

from __future__ import annotations

import json
import sqlite3
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.policies import ContextualOMD, OMDApproachability, load_policy
from msroute.policies.duals import expected_team_cost, expected_team_cost_grad
from msroute.router import Router

K, M, X, R = 6, 2, 3, 2
COSTS = np.linspace(0.1, 1.0, K)[:, None] * np.array([[1.0, 2.0]])
PROBLEM = Problem(COSTS, M, Constraints(upper=[0.9, None], names=["usd", "gpu"]))


def played(policy: OMDApproachability, rounds: int, seed: int = 0) -> OMDApproachability:
    """``rounds`` rounds of Bernoulli rewards (mean rising with the expert's cost), contexts
    drawn uniformly, realized costs the table's."""
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        ctx = rng.integers(0, policy.n_contexts, R)
        dec = policy.select(ctx)
        hit = rng.random((R, K)) < np.linspace(0.2, 0.9, K)
        reward = np.array([float(hit[r, dec.draws[r]].max()) for r in range(R)])
        cost = np.stack([COSTS[np.unique(dec.draws[r])].sum(axis=0) for r in range(R)])
        policy.update(dec, reward, cost)
    return policy


@pytest.mark.parametrize(
    ("cls", "m", "x", "dual", "want"),
    [
        (OMDApproachability, 2, 3, "invariant", "exact"),
        (OMDApproachability, 1, 3, "invariant", "linear"),
        (OMDApproachability, 2, 1, "invariant", "linear"),
        (OMDApproachability, 2, 3, "paper", "linear"),
        (ContextualOMD, 2, 3, "invariant", "linear"),  # Algorithm 2 as printed
    ],
)
def test_the_default_surrogate(cls: type, m: int, x: int, dual: str, want: str) -> None:
    problem = Problem(COSTS, m, Constraints(upper=[0.9, None]))
    pol = cls(problem, horizon=100, n_runs=R, seed=0, n_contexts=x, dual=dual)
    assert pol.dual.surrogate == want
    assert pol._init_kwargs["surrogate"] == want  # saved with the policy


def test_the_aggregate_cut_is_the_tangent_of_the_contexts_total_spend() -> None:
    pol = played(OMDApproachability(PROBLEM, horizon=400, n_runs=R, seed=1, n_contexts=X), 150)
    runs, ctx = np.array([0, 1]), np.array([2, 0])
    share, others = pol._aggregate_spend(runs, ctx)
    costs = pol.cost_est.costs.reshape(R, X, K, 2)
    visits = pol._visits.astype(float)
    for i, (r, x) in enumerate(zip(runs, ctx, strict=True)):  # the sum written out
        p = visits[r] / visits[r].sum()
        assert share[i] == pytest.approx(p[x], rel=1e-15)
        spend = [p[y] * expected_team_cost(pol._q[r, y][None], costs[r, y], M)[0] for y in range(X)]
        np.testing.assert_allclose(others[i], sum(spend) - spend[x], rtol=1e-12)
    pol.dual.w = np.array([[0.4, 0.0], [0.3, 0.0]])  # the budget's cut active in both runs
    q0 = pol._q[runs, ctx]
    own = costs[runs, ctx]
    a, b = pol.dual.cuts(pol._context_costs(runs, ctx), runs, q0, (share, others))
    rng = np.random.default_rng(2)
    _, hi = pol.dual.target()
    for _ in range(20):  # any routing q of the context: a . q - b is the tangent's excess
        q = rng.dirichlet(np.ones(K), R)
        for i in range(R):
            e0 = expected_team_cost(q0[i][None], own[i], M)[0, 0]
            g = expected_team_cost_grad(q0[i][None], own[i], M)[0, :, 0]
            tangent = share[i] * (e0 + g @ (q[i] - q0[i])) + others[i, 0]
            assert a[i, 0] @ q[i] - b[i, 0] == pytest.approx(tangent - hi[runs[i], 0], abs=1e-12)


def test_a_team_with_contexts_spends_its_budget_and_keeps_it() -> None:
    exact = played(OMDApproachability(PROBLEM, horizon=3000, n_runs=R, seed=3, n_contexts=X), 3000)
    linear = played(
        OMDApproachability(
            PROBLEM, horizon=3000, n_runs=R, seed=3, n_contexts=X, surrogate="linear"
        ),
        3000,
    )
    spend = [p._cost_sum[:, 0] / 3000 / 0.9 for p in (exact, linear)]
    assert np.all(spend[0] <= 1.0)  # the budget holds in every run
    assert np.all(spend[0] > spend[1])  # and more of it is spent than C^T q <= u / M allows


def _rewrite_manifest(path: Path, edit: Any) -> None:
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members.pop("manifest.json"))
    edit(manifest)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        for name, data in members.items():
            zf.writestr(name, data)


def test_a_file_of_the_linear_default_resumes_linear(tmp_path: Path) -> None:
    pol = played(OMDApproachability(PROBLEM, horizon=400, n_runs=R, seed=4, n_contexts=X), 50)
    path = tmp_path / "p.npz"
    pol.save(path)
    assert load_policy(path).dual.surrogate == "exact"

    def as_version_3(manifest: dict[str, Any]) -> None:  # before files named the surrogate
        manifest["format_version"] = 3
        del manifest["kwargs"]["surrogate"]

    _rewrite_manifest(path, as_version_3)
    assert load_policy(path).dual.surrogate == "linear"


ROUTER: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 5,
    "contexts": ["math", "code"],
    "experts": {"big": [0.03], "mid": [0.01], "small": [0.002]},
    "constraints": {"upper": {"usd": 0.03}},
}


def _traffic(router: Router, n: int) -> None:
    for i in range(n):
        d = router.route(context=("math", "code")[i % 2])
        router.feedback(d.decision_id, 0.9 if "big" in d.team else 0.4)


def test_a_journal_replays_with_the_policy_arguments_it_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j.db"
    with Router(ROUTER, journal=path) as router:
        _traffic(router, 60)
        assert router.policy.dual.surrogate == "exact"
    from msroute.router import state

    # A later msroute with other defaults re-derives the journal's decisions all the same.
    monkeypatch.setitem(state.DEFAULT_OMD_PARAMS, "eta_mult", 0.5)
    with Router.open(path, use_snapshot=False) as reopened:
        assert reopened.state()["decisions"] == 60
    with Router(ROUTER) as fresh:  # while a new router takes the new default
        assert fresh.policy._init_kwargs["eta_mult"] == 0.5


def test_a_team_router_weighs_its_residuals_per_draw() -> None:
    """A team of M shares a round's residual among its M draws: the live offset is M/(2K),
    and a single expert's is the model variant's 1/(2K)."""
    with Router(ROUTER) as team, Router({**ROUTER, "m_draws": 1}) as single:
        assert team.policy.ix == 2 * 0.5 / 3
        assert single.policy.ix == 0.5 / 3


def test_a_journal_that_recorded_no_policy_arguments_replays_the_linear_default(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    # As they ran: unpaced, the linear surrogate and the variant's offset (1/(2K) at any M).
    linear = {**ROUTER, "pacing": False, "params": {"surrogate": "linear", "ix_per_k": 0.5}}
    with Router(linear, journal=path) as router:
        _traffic(router, 60)
        want = router.state()
    db = sqlite3.connect(path)  # as a journal written before the arguments were recorded
    db.execute("DELETE FROM meta WHERE key = 'policy_kwargs'")
    db.execute(
        "UPDATE meta SET value = ? WHERE key = 'config'",
        (
            json.dumps(
                {
                    **json.loads(
                        db.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()[0]
                    ),
                    "params": {},
                }
            ),
        ),
    )
    db.commit()
    db.close()
    with Router.open(path, use_snapshot=False) as reopened:  # every decision re-derived
        assert reopened.policy.dual.surrogate == "linear"
        assert reopened.policy.ix == 0.5 / 3
        assert reopened.state()["q_by_context"] == want["q_by_context"]


@pytest.mark.parametrize(
    ("value", "match"),
    [("[1, 2]", "not a JSON object"), ("{", "not JSON"), ('{"eta_mult": "x"}', "rebuild")],
)
def test_damaged_policy_arguments_are_refused(tmp_path: Path, value: str, match: str) -> None:
    from msroute.errors import JournalError

    path = tmp_path / "j.db"
    with Router(ROUTER, journal=path) as router:
        _traffic(router, 5)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'policy_kwargs'", (value,))
    db.commit()
    db.close()
    with pytest.raises(JournalError, match=match):
        Router.open(path)


def test_the_linear_aggregate_cut_holds_the_contexts_total_surrogate_spend() -> None:
    pol = played(
        OMDApproachability(
            PROBLEM, horizon=400, n_runs=R, seed=6, n_contexts=X, surrogate="linear"
        ),
        150,
    )
    runs, ctx = np.array([0, 1]), np.array([1, 2])
    share, others = pol._aggregate_spend(runs, ctx)
    costs = pol.cost_est.costs.reshape(R, X, K, 2)
    visits = pol._visits.astype(float)
    for i, (r, x) in enumerate(zip(runs, ctx, strict=True)):
        p = visits[r] / visits[r].sum()
        spend = [p[y] * pol._q[r, y] @ costs[r, y] for y in range(X)]
        np.testing.assert_allclose(others[i], sum(spend) - spend[x], rtol=1e-12)
    pol.dual.w = np.array([[0.5, 0.0], [0.2, 0.0]])
    a, b = pol.dual.cuts(pol._context_costs(runs, ctx), runs, pol._q[runs, ctx], (share, others))
    _, hi = pol.dual.target()
    rng = np.random.default_rng(7)
    for q in rng.dirichlet(np.ones(K), (10, R)):
        for i in range(R):  # the paper's cut with every expert's row p c_i + O, on the simplex
            rows = share[i] * costs[runs[i], ctx[i]][:, 0] + others[i, 0]
            assert a[i, 0] @ q[i] - b[i, 0] == pytest.approx(
                rows @ q[i] - hi[runs[i], 0], abs=1e-12
            )


@pytest.mark.parametrize(
    ("m", "params", "want"),
    [(2, {}, "exact"), (1, {}, "linear"), (2, {"surrogate": "linear"}, "linear")],
)
def test_a_router_routing_teams_runs_the_exact_surrogate(
    m: int, params: dict[str, Any], want: str
) -> None:
    cfg = {**ROUTER, "contexts": None, "m_draws": m, "params": params}
    with Router(cfg) as router:
        assert router.policy.dual.surrogate == want


def _aggregate_of_runs(pol: OMDApproachability, ctx: int) -> tuple[np.ndarray, np.ndarray]:
    """``_aggregate_spend`` of run 0 as the batch computes it (gathers of (R', X, ...))."""
    x, (k, d) = pol.n_contexts, pol.cost_est.costs.shape[1:]
    runs = np.array([0])
    by_ctx = pol.cost_est.costs.reshape(1, x, k, d)[runs]
    visits = pol._visits[runs].astype(np.float64)
    if pol.prior.on:
        visits = visits + pol.prior.share[runs]
    share = visits / np.maximum(visits.sum(axis=1, keepdims=True), 1.0)
    measured = pol.dual.measure(pol._q[runs].reshape(-1, k), by_ctx.reshape(-1, k, d))
    spend = measured.reshape(1, x, d) * share[..., None]
    return share[[0], [ctx]], spend.sum(axis=1) - spend[[0], [ctx]]


@pytest.mark.parametrize(("m", "x"), [(1, 3), (1, 14), (2, 3), (2, 20)])
def test_one_runs_aggregate_is_the_batchs_floats(m: int, x: int) -> None:
    problem = Problem(COSTS, m, Constraints(upper=[0.9, None]))
    pol = OMDApproachability(problem, horizon=400, n_runs=1, seed=m + x, n_contexts=x)
    rng = np.random.default_rng(x)
    for t in range(300):
        ctx = rng.integers(0, x, 1)
        dec = pol.select(ctx)
        reward = rng.random(1)
        pol.update(dec, reward, COSTS[np.unique(dec.draws[0])].sum(axis=0)[None, :])
        if t % 25 == 0:
            for c in range(x):
                share, others = pol._aggregate_spend(np.array([0]), np.array([c]))
                want_share, want_others = _aggregate_of_runs(pol, c)
                assert share.tobytes() == want_share.tobytes()
                assert others.shape == want_others.shape
                assert others.tobytes() == want_others.tobytes()
