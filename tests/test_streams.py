"""Per-run random streams: each run's numbers depend on its own seed only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from msroute.policies import _kernels
from msroute.policies.streams import GammaShapes, RunStreams, _candidate


def test_uniforms_are_one_sequence_per_run_whatever_the_buffer() -> None:
    small = RunStreams([3, 4], n_runs=2, block=7)
    got = np.concatenate([small.uniform(3) for _ in range(9)], axis=1)  # refills mid-call
    large = RunStreams([3, 4], n_runs=2, block=64).uniform(27)
    np.testing.assert_array_equal(got, large)
    assert not np.array_equal(got[0], got[1])


def test_a_run_draws_the_same_alone_or_batched() -> None:
    batched = RunStreams([10, 11, 12], n_runs=3, block=16)
    alone = RunStreams([11], n_runs=1, block=5)
    a = np.random.default_rng(0).uniform(1, 3, size=(3, 4))
    b = np.random.default_rng(1).uniform(1, 3, size=(3, 4))
    for _ in range(5):
        np.testing.assert_array_equal(batched.uniform(4)[1], alone.uniform(4)[0])
        ab = GammaShapes(np.concatenate([a, b], axis=1))
        np.testing.assert_array_equal(
            batched.beta(ab)[1], alone.beta(GammaShapes(ab.shape[1:2]))[0]
        )


def test_one_seed_spawns_distinct_children() -> None:
    streams = RunStreams(5, n_runs=3)
    u = streams.uniform(8)
    assert not np.array_equal(u[0], u[1]) and not np.array_equal(u[1], u[2])
    np.testing.assert_array_equal(RunStreams(5, n_runs=3).uniform(8), u)


def test_beta_samples_have_the_right_mean() -> None:
    streams = RunStreams(0, n_runs=2)
    a = np.array([[2.0, 8.0], [5.0, 1.0]])
    b = np.array([[8.0, 2.0], [5.0, 3.0]])
    ab = GammaShapes(np.concatenate([a, b], axis=1))
    draws = np.stack([streams.beta(ab) for _ in range(20_000)])
    np.testing.assert_allclose(draws.mean(axis=0), a / (a + b), atol=0.01)


@pytest.mark.parametrize("shape", [0.05, 0.7, 1.0, 1.3, 4.0, 2500.0])
def test_gamma_variates_follow_the_gamma_law(shape: float) -> None:
    # Kolmogorov-Smirnov against scipy's Gamma cdf: shapes below 1 (boosted), at 1, near 1
    # (the rejections are most frequent there) and large.
    streams = RunStreams(7, n_runs=4, block=256)
    shapes = GammaShapes(np.full((4, 500), shape))
    x = np.concatenate([streams.standard_gamma(shapes).ravel() for _ in range(5)])
    assert stats.kstest(x, stats.gamma(shape).cdf).pvalue > 1e-3


@pytest.mark.parametrize(("a", "b"), [(0.3, 0.6), (1.0, 1.0), (1.2, 900.0), (40.0, 2.5)])
def test_beta_variates_follow_the_beta_law(a: float, b: float) -> None:
    streams = RunStreams(3, n_runs=2, block=300)
    shapes = GammaShapes(np.concatenate([np.full((2, 1000), a), np.full((2, 1000), b)], axis=1))
    x = np.concatenate([streams.beta(shapes).ravel() for _ in range(5)])
    assert np.all((x >= 0.0) & (x <= 1.0))
    assert stats.kstest(x, stats.beta(a, b).cdf).pvalue > 1e-3


def test_rejections_draw_from_each_runs_own_streams() -> None:
    # Shapes near 1 reject often, so the runs' retries differ in number; a run still draws the
    # same alone, and after shapes are set entry by entry as after building them anew.
    rng = np.random.default_rng(2)
    shape = rng.uniform(0.5, 3.0, size=(5, 40))
    batched, alone = RunStreams(list(range(5)), n_runs=5), RunStreams([3], n_runs=1, block=9)
    kept = GammaShapes(shape)
    for _ in range(30):
        new = rng.uniform(0.5, 3.0, size=3)
        flat = rng.choice(shape.size, size=3, replace=False)
        shape.reshape(-1)[flat] = new
        kept.set(flat, new)
        np.testing.assert_array_equal(kept.d, GammaShapes(shape).d)
        got = batched.standard_gamma(kept)[3]
        np.testing.assert_array_equal(got, alone.standard_gamma(GammaShapes(shape[3:4]))[0])


def test_requests_wider_than_the_buffer_continue_the_same_sequence() -> None:
    small = RunStreams([1, 2], n_runs=2, block=8)
    got = np.concatenate([small.uniform(3), small.uniform(20), small.uniform(5)], axis=1)
    np.testing.assert_array_equal(got, RunStreams([1, 2], n_runs=2, block=64).uniform(28))


def test_compiled_normals_are_numpys() -> None:
    # A million values reach the ziggurat's rare branches (its tail and its wedges), and the
    # generator is left where numpy's own call leaves it.
    ours, numpys = np.random.default_rng(8), np.random.default_rng(8)
    got, want = np.empty(1_000_000), np.empty(1_000_000)
    _kernels.fill_normals(ours, got)
    numpys.standard_normal(out=want)
    np.testing.assert_array_equal(got, want)
    assert ours.random() == numpys.random()


def test_compiled_candidates_are_numpys() -> None:
    # With no spare values to retry from, the compiled loop gives each variate its first
    # candidate: d v and the squeeze-or-logarithm test of numpy's vectorized formula, bit for bit,
    # on shapes from near 1 (many rejections) to the thousands.
    rng = np.random.default_rng(5)
    shapes = GammaShapes(
        np.concatenate([rng.uniform(1.0, 3.0, (4, 3000)), rng.uniform(1.0, 5e3, (4, 3000))], axis=1)
    )
    x, u = rng.standard_normal((4, 6000)), rng.random((4, 6000))
    u[0, :50] = 0.0  # log u = -inf: accepted
    out, ok = np.empty((4, 6000)), np.empty((4, 6000), dtype=np.bool_)
    none, at = np.empty((4, 0)), np.zeros(4, dtype=np.int64)
    _kernels.marsaglia_tsang(shapes.d, shapes.c, x, u, none, at, none, at.copy(), 4, out, ok)
    want_out, want_ok = _candidate(shapes.d.ravel(), shapes.c.ravel(), x.ravel(), u.ravel())
    np.testing.assert_array_equal(out.ravel(), want_out)
    np.testing.assert_array_equal(ok.ravel(), want_ok)
    assert int((~ok).sum()) > 0 and bool(ok[0, :50].all())


def test_compiled_sampler_works_without_a_cache_location() -> None:
    # An installation whose directory and user cache cannot be written: numba finds no place for
    # its machine code (simulated by offering it only a locator that never applies), so the
    # kernels compile in memory, with no warning.
    env = {
        **os.environ,
        "NUMBA_CACHE_LOCATOR_CLASSES": "IPythonCacheLocator",
        "PYTHONPATH": os.pathsep.join([str(Path(_kernels.__file__).parents[2]), *sys.path]),
    }
    code = (
        "import numpy as np\n"
        "from msroute.policies import _kernels\n"
        "from msroute.policies.streams import GammaShapes, RunStreams\n"
        "print(RunStreams(0, 2).beta(GammaShapes(np.full((2, 4), 2.0))).shape)\n"
        "print(type(_kernels.marsaglia_tsang._cache).__name__)"
    )
    run = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["(2,", "2)", "NullCache"]


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="seed has 2 entries for 3 runs"):
        RunStreams([1, 2], n_runs=3)
    with pytest.raises(ValueError, match="finite, positive"):
        GammaShapes(np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="finite, positive"):
        GammaShapes(np.array([[1.0, np.inf]]))
