"""Per-run random streams: each run's numbers depend on its own seed only, and follow their laws."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from msroute.errors import InvalidValueError
from msroute.policies._compiled import variates
from msroute.policies.streams import GammaConstants, RunStreams
from msroute.policies.team import top_m


def test_uniforms_are_one_sequence_per_run_whatever_the_buffer() -> None:
    small = RunStreams([3, 4], n_runs=2, block=7)
    got = np.concatenate([small.uniform(3) for _ in range(9)], axis=1)  # refills mid-call
    large = RunStreams([3, 4], n_runs=2, block=64).uniform(27)
    np.testing.assert_array_equal(got, large)
    assert not np.array_equal(got[0], got[1])


def test_uniforms_are_the_generators_own() -> None:
    # The uniforms every policy but Thompson sampling draws: numpy's, from child 1 of the seed.
    seed = np.random.SeedSequence(9)
    want = np.random.default_rng(np.random.SeedSequence(9, spawn_key=(1,))).random(30)
    streams = RunStreams([seed], n_runs=1, block=8)
    got = np.concatenate([streams.uniform(5), streams.uniform(25)], axis=1)[0]
    np.testing.assert_array_equal(got, want)


def test_a_run_draws_the_same_alone_or_batched() -> None:
    batched = RunStreams([10, 11, 12], n_runs=3, block=16)
    alone = RunStreams([11], n_runs=1, block=5)
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = rng.uniform(0.2, 3.0, size=(2, 3, 4))  # shapes below 1 too
        np.testing.assert_array_equal(batched.uniform(4)[1], alone.uniform(4)[0])
        np.testing.assert_array_equal(batched.beta(a, b)[1], alone.beta(a[1:2], b[1:2])[0])
        np.testing.assert_array_equal(
            batched.beta_top(a, b, 2, None)[1], alone.beta_top(a[1:2], b[1:2], 2, None)[0]
        )
        np.testing.assert_array_equal(batched.standard_gamma(a)[1], alone.standard_gamma(a[1:2])[0])


def test_one_seed_spawns_distinct_children() -> None:
    streams = RunStreams(5, n_runs=3)
    u = streams.uniform(8)
    assert not np.array_equal(u[0], u[1]) and not np.array_equal(u[1], u[2])
    np.testing.assert_array_equal(RunStreams(5, n_runs=3).uniform(8), u)
    state = streams.gamma_state
    assert state.shape == (3, 4) and state.dtype == np.uint64
    assert len({tuple(row) for row in state.tolist()}) == 3


def test_xoshiro256pp_matches_the_reference_implementation() -> None:
    # The first words of xoshiro256plusplus.c (Blackman and Vigna) from the state {1, 2, 3, 4}.
    state = np.array([1, 2, 3, 4], dtype=np.uint64)
    words = np.empty(10, dtype=np.uint64)
    variates.fill_words(state, words)
    assert words.tolist() == [
        41943041,
        58720359,
        3588806011781223,
        3591011842654386,
        9228616714210784205,
        9973669472204895162,
        14011001112246962877,
        12406186145184390807,
        15849039046786891736,
        10450023813501588000,
    ]
    more = np.empty(3, dtype=np.uint64)
    variates.fill_words(state, more)  # the state advanced in place
    again = np.array([1, 2, 3, 4], dtype=np.uint64)
    all13 = np.empty(13, dtype=np.uint64)
    variates.fill_words(again, all13)
    np.testing.assert_array_equal(all13[10:], more)


def test_ziggurat_tables_have_layers_of_equal_area() -> None:
    # The ziggurat draws exactly from N(0, 1) when its 256 pieces (255 rectangles and the base
    # strip with the tail) have one area V: rebuilt from numpy's constants, checked here.
    scale = 2.0**52
    x = variates.WI * scale  # right edge of each layer (layer 0: the base's V / f(R))
    f = variates.FI
    area_v = variates.ZIG_V
    # Layer i (1..255) spans [f(x_i), f(x_{i-1})] in height and [0, x_i] in width.
    areas = x[1:] * (f[:-1] - f[1:])
    np.testing.assert_allclose(areas, area_v, rtol=1e-12)
    assert x[255] == variates.ZIG_R and f[0] == 1.0
    np.testing.assert_allclose(f, np.exp(-0.5 * np.r_[0.0, x[1:]] ** 2), rtol=1e-14)


def test_normals_follow_the_normal_law() -> None:
    # Two million draws: the cdf (KS), the moments, and the mass of the tail beyond R = 3.654
    # and of the wedges (the two rare branches of the ziggurat) within binomial error.
    state = np.array([7, 8, 9, 10], dtype=np.uint64)
    x = np.empty(2_000_000)
    variates.fill_normals(state, x)
    n = x.size
    assert stats.kstest(x, "norm").pvalue > 1e-4
    assert abs(x.mean()) < 5 / np.sqrt(n)
    assert abs(x.var() - 1.0) < 5 * np.sqrt(2 / n)
    assert abs(stats.kurtosis(x)) < 5 * np.sqrt(24 / n)
    for edge in (2.0, variates.ZIG_R, 4.5):
        p = 2 * stats.norm.sf(edge)
        hits = int(np.count_nonzero(np.abs(x) > edge))
        assert abs(hits - n * p) < 5 * np.sqrt(n * p * (1 - p)) + 1, edge
    # A wrong law is rejected by the same test: it has the power to fail.
    assert stats.kstest(x * 1.01, "norm").pvalue < 1e-6


@pytest.mark.parametrize("shape", [0.05, 0.7, 1.0, 1.3, 4.0, 2500.0])
def test_gamma_variates_follow_the_gamma_law(shape: float) -> None:
    # Kolmogorov-Smirnov against scipy's Gamma cdf: shapes below 1 (boosted), at 1, near 1
    # (the rejections are most frequent there) and large.
    streams = RunStreams(7, n_runs=4)
    shapes = np.full((4, 2500), shape)
    x = np.concatenate([streams.standard_gamma(shapes).ravel() for _ in range(4)])
    assert stats.kstest(x, stats.gamma(shape).cdf).pvalue > 1e-4
    assert stats.kstest(x, stats.gamma(shape * 1.05).cdf).pvalue < 1e-6


BETA_SHAPES = [
    (0.3, 0.6),  # both below 1: from the logarithms
    (0.05, 3.0),  # mass piled near 0
    (1.0, 1.0),
    (1.2, 900.0),
    (40.0, 2.5),
    (2500.0, 1.7),  # a Thompson-sampling posterior after thousands of rounds
    (0.7, 4000.0),  # one shape below 1, one large
]


@pytest.mark.parametrize(("a", "b"), BETA_SHAPES)
def test_beta_variates_follow_the_beta_law(a: float, b: float) -> None:
    # 40,000 draws per law against scipy's Beta: the cdf (KS), the mean and the variance
    # within 5 standard errors; and the same test rejects a law 5% off in a shape.
    streams = RunStreams(3, n_runs=4)
    shape_a, shape_b = np.full((4, 2000), a), np.full((4, 2000), b)
    x = np.concatenate([streams.beta(shape_a, shape_b).ravel() for _ in range(5)])
    assert np.all((x >= 0.0) & (x <= 1.0))
    law = stats.beta(a, b)
    assert stats.kstest(x, law.cdf).pvalue > 1e-4
    n, mean, var = x.size, law.mean(), law.var()
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / n)
    fourth = law.expect(lambda y: (y - mean) ** 4)
    assert abs(x.var() - var) < 5 * np.sqrt((fourth - var**2) / n)
    assert stats.kstest(x, stats.beta(a * 1.05, b).cdf).pvalue < 1e-6


def test_top_of_the_beta_draws_is_top_m_of_them() -> None:
    # The fused loop picks what top_m would pick from the same draws, with and without an
    # offset, ties included (shapes near 0 give many draws of exactly 0.0).
    rng = np.random.default_rng(4)
    a, b = rng.uniform(0.5, 30.0, size=(2, 6, 12))
    a[:3, :8] = 1e-3  # Beta(0.001, b) is 0.0 in floating point most of the time
    fused, apart = RunStreams(list(range(6)), n_runs=6), RunStreams(list(range(6)), n_runs=6)
    zeros = 0
    for offset in (None, rng.normal(size=(6, 12)), np.where(rng.random((6, 12)) < 0.5, 2.0, 0.0)):
        for m in (1, 4, 12):
            draws = apart.beta(a, b)
            zeros += int(np.count_nonzero(draws == 0.0))
            want = top_m(draws if offset is None else draws + offset, m)
            np.testing.assert_array_equal(fused.beta_top(a, b, m, offset), want)
    assert zeros > 50


def test_constants_follow_the_shapes_they_are_kept_for() -> None:
    # Shapes near 1 reject most often, so the runs' retries differ in number. Constants kept
    # from call to call while shapes change in a few entries (a learner's update, or a whole
    # array replaced) give the draws of constants computed afresh; a run draws the same alone.
    rng = np.random.default_rng(2)
    a, b = rng.uniform(0.5, 3.0, size=(2, 5, 20))
    kept = GammaConstants(5, 40)
    batched, fresh = RunStreams(list(range(5)), n_runs=5), RunStreams(list(range(5)), n_runs=5)
    alone = RunStreams([3], n_runs=1)
    for t in range(30):
        flat = rng.choice(a.size, size=3, replace=False)
        a.reshape(-1)[flat] = rng.uniform(0.5, 3.0, size=3)
        if t == 10:
            b = rng.uniform(0.5, 3.0, size=(5, 20))
        got = batched.beta(a, b, kept)
        np.testing.assert_array_equal(got, fresh.beta(a, b))
        np.testing.assert_array_equal(got[3], alone.beta(a[3:4], b[3:4])[0])
    np.testing.assert_array_equal(kept.seen, np.concatenate([a, b], axis=1))
    np.testing.assert_array_equal(kept.d, np.where(kept.seen < 1, kept.seen + 1, kept.seen) - 1 / 3)


def test_requests_wider_than_the_buffer_continue_the_same_sequence() -> None:
    small = RunStreams([1, 2], n_runs=2, block=8)
    got = np.concatenate([small.uniform(3), small.uniform(20), small.uniform(5)], axis=1)
    np.testing.assert_array_equal(got, RunStreams([1, 2], n_runs=2, block=64).uniform(28))


def test_runs_at_different_positions_keep_their_own_sequences() -> None:
    # Positions differ only in a state loaded from elsewhere; each run still continues its own.
    streams, want = RunStreams([1, 2], n_runs=2, block=8), RunStreams([1, 2], n_runs=2, block=8)
    whole = want.uniform(16)
    streams.uniform(2)
    streams.uniforms.pos[1] -= 1  # run 1 re-reads its last value
    got = streams.uniform(9)
    np.testing.assert_array_equal(got[0], whole[0, 2:11])
    np.testing.assert_array_equal(got[1], whole[1, 1:10])


def test_compiled_sampler_works_without_a_cache_location() -> None:
    # An installation whose directory and user cache cannot be written: numba finds no place for
    # its machine code (simulated by offering it only a locator that never applies), so the
    # kernels compile in memory, with no warning.
    env = {
        **os.environ,
        "NUMBA_CACHE_LOCATOR_CLASSES": "IPythonCacheLocator",
        "PYTHONPATH": os.pathsep.join([str(Path(variates.__file__).parents[3]), *sys.path]),
    }
    code = (
        "import numpy as np\n"
        "from msroute.policies._compiled import variates\n"
        "from msroute.policies.streams import RunStreams\n"
        "print(RunStreams(0, 2).beta(np.full((2, 2), 2.0), np.ones((2, 2))).shape)\n"
        "print(type(variates.beta_variates._cache).__name__)"
    )
    run = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["(2,", "2)", "NullCache"]


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="seed has 2 entries for 3 runs"):
        RunStreams([1, 2], n_runs=3)
    streams = RunStreams([1, 2], n_runs=2)
    before = streams.gamma_state.copy()
    ones = np.ones((2, 3))
    for bad in (0.0, -1.0, np.inf, np.nan):
        shape = ones.copy()
        shape[1, 2] = bad
        with pytest.raises(InvalidValueError, match="shapes must be finite, positive numbers"):
            streams.beta(ones, shape)
        with pytest.raises(InvalidValueError, match="shapes must be finite, positive numbers"):
            streams.beta_top(shape, ones, 1, None)
        with pytest.raises(InvalidValueError, match="shapes must be finite, positive numbers"):
            streams.standard_gamma(shape)
    np.testing.assert_array_equal(streams.gamma_state, before)  # no run drew
    with pytest.raises(ValueError, match="must be a 2-d array"):
        streams.beta(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match=r"a \(2, 3\) and b \(2, 2\) must match"):
        streams.beta(ones, np.ones((2, 2)))
