"""The direct call of numpy's LAPACK solve (msroute.policies._gesv) and the single-cell refit
that uses it: numpy's floats bit for bit, and numpy's answer wherever the call does not settle."""

from __future__ import annotations

import numpy as np
import pytest

from msroute.policies._gesv import solver
from msroute.policies.reward_model import ModelGradient


def _numpy_refit(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """``ModelGradient.refit``'s numpy solve of one cell (the transposed stacked matrix)."""
    return np.linalg.solve(np.swapaxes(gram[None], 1, 2), moment[None, :, None])[0, :, 0]


def _model_system(rng: np.random.Generator, k: int, prior: bool) -> tuple[np.ndarray, np.ndarray]:
    """A Gram matrix and moment as the model builds them: ``ridge I`` plus ``x x^T`` of rounds
    with ``x = (1, several-hot)``, the rewards' sums, and optionally a warm prior's
    pseudo-rounds on the experts' diagonal (``reward_model._with_prior``)."""
    p = k + 1
    ridge = float(rng.choice([1.0, 0.5, 2.0, 1e-3]))
    rounds = int(rng.integers(0, 300))
    feats = np.zeros((rounds, p))
    feats[:, 0] = 1.0
    draws = rng.integers(0, k, (rounds, int(rng.integers(1, 4))))
    feats[np.arange(rounds)[:, None], draws + 1] = 1.0
    reward = rng.random(rounds) if rng.random() < 0.5 else (rng.random(rounds) < 0.5) * 1.0
    gram = ridge * np.eye(p) + feats.T @ feats
    moment = feats.T @ reward
    if prior:
        weight = rng.uniform(0.0, 50.0, k) * (rng.random(k) < 0.7)
        gram[np.arange(1, p), np.arange(1, p)] += weight
        moment[1:] += weight * rng.random(k)
    return gram, moment


def _solver(p: int):  # type: ignore[no-untyped-def]
    lapack = np.show_config(mode="dicts")["Build Dependencies"]["lapack"]  # type: ignore[index]
    if lapack["name"] != "scipy-openblas":
        assert solver(p) is None
        pytest.skip(f"numpy's LAPACK ({lapack['name']}) is not one the direct call knows")
    solve = solver(p)
    assert solve is not None, "numpy's own OpenBLAS dgesv was not found or disagreed"
    return solve


@pytest.mark.parametrize("k", [2, 5, 50, 80])
@pytest.mark.parametrize("prior", [False, True])
def test_direct_solve_is_numpys(k: int, prior: bool) -> None:
    rng = np.random.default_rng(k + 100 * prior)
    solve = _solver(k + 1)
    out = np.empty(k + 1)
    for _ in range(200):
        gram, moment = _model_system(rng, k, prior)
        assert solve(gram, moment, out)
        assert np.array_equal(out, _numpy_refit(gram, moment))


def test_direct_solve_reads_the_transpose_as_numpy() -> None:
    """A matrix that is not symmetric and needs pivoting: ``solve(a, b)`` is numpy's solve
    of ``a.T`` (the refit's column-major hand-over), not of ``a``."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((7, 7)), rng.standard_normal(7)
    out = np.empty(7)
    assert _solver(7)(a, b, out)
    assert np.array_equal(out, _numpy_refit(a, b))
    assert not np.array_equal(out, np.linalg.solve(a, b))


def test_unsettled_system_changes_nothing() -> None:
    """A singular or non-finite system returns False with ``out`` untouched (numpy decides)."""
    solve = _solver(4)
    out = np.full(4, 7.0)
    assert not solve(np.zeros((4, 4)), np.ones(4), out)
    assert not solve(np.eye(4), np.array([1.0, np.inf, 0.0, 0.0]), out)
    assert not solve(np.eye(4), np.array([1.0, np.nan, 0.0, 0.0]), out)
    assert np.array_equal(out, np.full(4, 7.0))


@pytest.mark.parametrize("k", [2, 5, 80])
def test_single_cell_refit_matches_batch(k: int) -> None:
    """One run's refit (the direct call) gives the floats of the same cell in a batched refit
    (numpy's stacked solve)."""
    rng = np.random.default_rng(k)
    single = ModelGradient(1, 2, k, 1, 0.0)
    batch = ModelGradient(3, 2, k, 1, 0.0)
    for t in range(400):
        ctx, drawn, reward = t % 2, int(rng.integers(k)), float(rng.random() < 0.4)
        single._accumulate_one(ctx, drawn + 1, reward)
        for run in range(3):
            batch._accumulate_one(run * 2 + ctx, drawn + 1, reward)
        if t % 10 == 9:
            single.refit(np.array([0]), np.array([ctx]))
            batch.refit(np.arange(3), np.full(3, ctx))
            assert np.array_equal(single.coef[0], batch.coef[1])
    assert np.any(single.coef != 0.0)


def test_singular_refit_is_numpys_error() -> None:
    """Without a ridge and without rounds the Gram matrix is singular: the refit raises
    numpy's error, as numpy's solve does."""
    model = ModelGradient(1, 1, 3, 1, 0.0, ridge=0.0)
    with pytest.raises(np.linalg.LinAlgError):
        model.refit(np.array([0]), np.array([0]))
    assert np.array_equal(model.coef, np.zeros((1, 1, 4)))
