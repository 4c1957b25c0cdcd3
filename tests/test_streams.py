"""Per-run random streams: each run's numbers depend on its own seed only."""

from __future__ import annotations

import numpy as np
import pytest

from msroute.policies.streams import RunStreams


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
        np.testing.assert_array_equal(batched.beta(a, b)[1], alone.beta(a[1:2], b[1:2])[0])


def test_one_seed_spawns_distinct_children() -> None:
    streams = RunStreams(5, n_runs=3)
    u = streams.uniform(8)
    assert not np.array_equal(u[0], u[1]) and not np.array_equal(u[1], u[2])
    np.testing.assert_array_equal(RunStreams(5, n_runs=3).uniform(8), u)


def test_beta_samples_have_the_right_mean() -> None:
    streams = RunStreams(0, n_runs=2)
    a = np.array([[2.0, 8.0], [5.0, 1.0]])
    b = np.array([[8.0, 2.0], [5.0, 3.0]])
    draws = np.stack([streams.beta(a, b) for _ in range(20_000)])
    np.testing.assert_allclose(draws.mean(axis=0), a / (a + b), atol=0.01)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="seed has 2 entries for 3 runs"):
        RunStreams([1, 2], n_runs=3)
    with pytest.raises(ValueError, match="width == 9"):
        RunStreams(0, n_runs=1, block=8).uniform(9)
