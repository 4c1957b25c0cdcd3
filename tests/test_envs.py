"""Skill environments: Beta moments, regime blocks, reproducible replayable streams."""

from __future__ import annotations

import doctest
from typing import Any

import numpy as np
import pytest
from scipy import stats

import msroute.envs as envs_module
from msroute.envs import (
    MEAN_CLIP,
    RegimeSwitchingEnv,
    SequenceEnv,
    SkillEnv,
    StochasticEnv,
    run_seed_sequences,
)
from msroute.errors import InvalidValueError

BASE = np.array([[0.0, 0.2, 0.5], [0.9, 1.0, 0.35]])


def make_env(kind: str, base: Any = BASE, **kw: Any) -> StochasticEnv | RegimeSwitchingEnv:
    if kind == "stochastic":
        return StochasticEnv(base, **kw)
    kw.setdefault("horizon", 60)
    return RegimeSwitchingEnv(base, **kw)


BETA_KINDS = ["stochastic", "regime"]


# --------------------------------------------------------------------------- Beta moments
def test_stochastic_beta_means_and_variances() -> None:
    kappa, t = 20.0, 20_000
    env = StochasticEnv(BASE, kappa=kappa, seed=11)
    x = env.skills(0, t)[:, 0]  # (T, N, K)
    m = np.clip(BASE, MEAN_CLIP, 1 - MEAN_CLIP)
    var = m * (1 - m) / (kappa + 1)
    assert np.array_equal(env.mean_skills(0, 1)[0, 0], m)
    # Sample mean within 5 standard errors of the Beta mean (clipped: a 0 mean is 1e-3).
    np.testing.assert_array_less(np.abs(x.mean(axis=0) - m), 5 * np.sqrt(var / t))
    # Sample variance within 5 standard errors: Var(s^2) ~ var^2 (excess kurtosis + 2) / T.
    kurt = stats.beta(kappa * m, kappa * (1 - m)).stats(moments="k")
    se_var = var * np.sqrt((np.asarray(kurt) + 2) / t)
    np.testing.assert_array_less(np.abs(x.var(axis=0, ddof=1) - var), 5 * se_var)
    assert np.all((x >= 0) & (x <= 1))


@pytest.mark.parametrize("kappa", [2.0, 200.0])
def test_kappa_sets_the_variance(kappa: float) -> None:
    t = 20_000
    x = StochasticEnv([[0.5]], kappa=kappa, seed=3).skills(0, t)[:, 0, 0, 0]
    var = 0.25 / (kappa + 1)
    kurt = float(stats.beta(kappa / 2, kappa / 2).stats(moments="k"))
    assert abs(x.var(ddof=1) - var) < 5 * var * np.sqrt((kurt + 2) / t)


@pytest.mark.parametrize(
    ("mean", "kappa"),
    [(1e-3, 20.0), (0.97, 20.0), (0.5, 0.5), (0.3, 2.0), (0.5, 20.0)],
    ids=["a<1", "b<1", "both<1", "a<1<b", "both>1"],
)
def test_skills_follow_the_beta_law_whatever_the_shapes(mean: float, kappa: float) -> None:
    # 20,000 draws of one entry against scipy's Beta(kappa m, kappa (1 - m)): the cdf (KS) and
    # the mean; a shape below 1 takes the variates' other branches (and both, their logarithms).
    x = StochasticEnv([[mean]], kappa=kappa, seed=5).skills(0, 20_000).ravel()
    law = stats.beta(kappa * mean, kappa * (1 - mean))
    assert stats.kstest(x, law.cdf).pvalue > 1e-3
    assert abs(x.mean() - mean) < 5 * law.std() / np.sqrt(x.size)
    assert np.all((x >= 0) & (x <= 1))
    assert stats.kstest(x, stats.beta(kappa * mean * 1.2, kappa * (1 - mean)).cdf).pvalue < 1e-6


def test_regime_beta_noise_around_the_block_means() -> None:
    base = np.full((1, 10), 0.5)
    env = RegimeSwitchingEnv(base, n_blocks=2, fraction=0.3, shrink=0.2, horizon=20_000, seed=5)
    x = env.skills(0, 20_000)[:, 0, 0, :]  # (T, K)
    for b in range(2):
        lo, hi = env.block_bounds[b], env.block_bounds[b + 1]
        m = np.where(env.shrunk_mask(b)[0], 0.1, 0.5)
        se = np.sqrt(m * (1 - m) / 21 / (hi - lo))
        np.testing.assert_array_less(np.abs(x[lo:hi].mean(axis=0) - m), 5 * se)


# --------------------------------------------------------------------------- regime blocks
def test_block_boundaries_last_block_takes_the_remainder() -> None:
    env = RegimeSwitchingEnv(np.full((1, 4), 0.5), n_blocks=4, horizon=23, seed=0)
    assert env.block_bounds.tolist() == [0, 5, 10, 15, 23]
    assert env.block_of(np.arange(23)).tolist() == [0] * 5 + [1] * 5 + [2] * 5 + [3] * 8


def test_means_change_only_at_block_boundaries_and_follow_the_shrunk_sets() -> None:
    base = np.random.default_rng(1).uniform(0.0, 1.0, (3, 50))
    env = RegimeSwitchingEnv(base, horizon=1005, seed=[4, 5])  # 10 blocks of 100, last 105
    means = env.mean_skills(0, 1005)  # (T, R, N, K)
    assert env.shrunk.shape == (2, 10, 50)
    assert env.n_shrunk == 5
    changes = np.flatnonzero(np.any(means[1:] != means[:-1], axis=(1, 2, 3))) + 1
    assert set(changes.tolist()) <= set(env.block_bounds[1:-1].tolist())
    for b in range(10):
        mask = env.shrunk_mask(b)  # (R, K)
        assert mask.sum(axis=1).tolist() == [5, 5]  # every block, the first included
        factor = np.where(mask, 0.2, 1.0)[:, None, :]
        expected = np.clip(base[None] * factor, MEAN_CLIP, 1 - MEAN_CLIP)
        lo, hi = env.block_bounds[b], env.block_bounds[b + 1]
        assert np.array_equal(means[lo:hi], np.broadcast_to(expected, (hi - lo, *expected.shape)))
    # Fresh sets: consecutive blocks differ, and the runs differ.
    assert any(not np.array_equal(env.shrunk[0, b], env.shrunk[0, b + 1]) for b in range(9))
    assert not np.array_equal(env.shrunk[0], env.shrunk[1])


def test_shrunk_sets_are_uniform() -> None:
    env = RegimeSwitchingEnv(
        np.full((1, 10), 0.5), n_blocks=2, fraction=0.3, horizon=2, n_runs=2000, seed=8
    )
    freq = env.shrunk.mean(axis=(0, 1))  # each expert: 3 in 10 by symmetry
    se = np.sqrt(0.3 * 0.7 / 4000)
    np.testing.assert_array_less(np.abs(freq - 0.3), 5 * se)


@pytest.mark.parametrize(
    ("k", "fraction", "expected"),
    [(50, 0.1, 5), (3, 0.1, 1), (5, 0.5, 3), (7, 1.0, 7), (20, 0.12, 2), (10, 0.35, 4)],
)
def test_number_of_shrunk_experts(k: int, fraction: float, expected: int) -> None:
    env = RegimeSwitchingEnv(np.full((1, k), 0.5), fraction=fraction, horizon=10, seed=0)
    assert env.n_shrunk == expected
    assert env.shrunk.sum(axis=2).ravel().tolist() == [expected] * 10


def test_regime_with_no_shrink_is_the_stochastic_stream() -> None:
    stoch = StochasticEnv(BASE, seed=[1, 2], chunk_size=16)
    regime = RegimeSwitchingEnv(BASE, shrink=1.0, horizon=50, seed=[1, 2], chunk_size=16)
    assert np.array_equal(stoch.skills(0, 50), regime.skills(0, 50))
    zero = RegimeSwitchingEnv(BASE, fraction=1.0, shrink=0.0, horizon=50, seed=[1, 2])
    assert np.all(zero.mean_skills(0, 50) == MEAN_CLIP)


# --------------------------------------------------------------------------- reproducibility
@pytest.mark.parametrize("kind", BETA_KINDS)
def test_same_seed_same_skills_other_seed_other_skills(kind: str) -> None:
    a = make_env(kind, seed=7, n_runs=3).skills(0, 40)
    b = make_env(kind, seed=7, n_runs=3).skills(0, 40)
    c = make_env(kind, seed=8, n_runs=3).skills(0, 40)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a[:, 0], a[:, 1])  # runs are independent streams
    # Chunks are independent too: no chunk of a run repeats another one.
    chunks = make_env(kind, base=np.full((1, 2), 0.5), seed=7, chunk_size=4).skills(0, 40)
    firsts = {tuple(chunks[i, 0].ravel().tolist()) for i in range(0, 40, 4)}
    assert len(firsts) == 10


@pytest.mark.parametrize("kind", BETA_KINDS)
def test_skills_do_not_depend_on_the_call_pattern(kind: str) -> None:
    # Chunks of 7 rounds and a one-chunk cache: every pattern crosses chunk boundaries and
    # regenerates evicted chunks.
    whole = make_env(kind, seed=[3, 4], chunk_size=7, cache_chunks=1).skills(0, 60)
    env = make_env(kind, seed=[3, 4], chunk_size=7, cache_chunks=1)
    one_by_one = np.concatenate([env.skills(t, t + 1) for t in range(60)])
    assert np.array_equal(whole, one_by_one)
    env = make_env(kind, seed=[3, 4], chunk_size=7, cache_chunks=1)
    for start, stop in [(50, 60), (3, 19), (0, 2), (19, 50), (5, 5), (13, 14)]:
        assert np.array_equal(env.skills(start, stop), whole[start:stop])
    assert env.skills(5, 5).shape == (0, 2, 2, 3)


@pytest.mark.parametrize("kind", BETA_KINDS)
def test_skills_written_into_a_slice_of_a_larger_array(kind: str) -> None:
    """``out=`` (a stacked batch's slice) gets exactly the skills a fresh array would."""
    env = make_env(kind, seed=[3, 4], chunk_size=7, cache_chunks=1)
    big = np.full((9, 5, 2, 3), -1.0)
    assert env.skills(4, 13, out=big[:, 1:3]) is not None
    assert np.array_equal(big[:, 1:3], make_env(kind, seed=[3, 4], chunk_size=7).skills(4, 13))
    assert np.all(big[:, [0, 3, 4]] == -1.0)  # nothing written outside the slice
    with pytest.raises(InvalidValueError, match="out has shape"):
        env.skills(4, 13, out=big[:, :3])


@pytest.mark.parametrize("kind", BETA_KINDS)
def test_run_depends_only_on_its_own_seed(kind: str) -> None:
    seeds = [np.random.SeedSequence(100), 5, np.random.SeedSequence(9).spawn(2)[1]]
    batch = make_env(kind, seed=seeds).skills(0, 30)
    for r, s in enumerate(seeds):
        alone = make_env(kind, seed=s).skills(0, 30)
        assert np.array_equal(batch[:, r], alone[:, 0])
    # Regrouped: run 2 batched with run 0 only is unchanged.
    pair = make_env(kind, seed=[seeds[2], seeds[0]]).skills(0, 30)
    assert np.array_equal(pair[:, 0], batch[:, 2])


@pytest.mark.parametrize("kind", BETA_KINDS)
def test_single_seed_spawns_one_child_per_run(kind: str) -> None:
    parent = np.random.SeedSequence(42)
    batch = make_env(kind, seed=parent, n_runs=3).skills(0, 20)
    assert parent.n_children_spawned == 0  # the caller's seed is left alone
    children = np.random.SeedSequence(42).spawn(3)
    assert np.array_equal(batch, make_env(kind, seed=children).skills(0, 20))
    assert np.array_equal(batch, make_env(kind, seed=42, n_runs=3).skills(0, 20))


@pytest.mark.parametrize("kind", BETA_KINDS)
def test_per_run_base_skills(kind: str) -> None:
    bases = np.stack([BASE, 1 - BASE])
    env = make_env(kind, base=bases, seed=[1, 2])
    assert env.n_runs == 2
    x = env.skills(0, 30)
    assert np.array_equal(x[:, 1], make_env(kind, base=1 - BASE, seed=2).skills(0, 30)[:, 0])
    m = env.mean_skills(0, 30)
    assert np.array_equal(m[:, 1], make_env(kind, base=1 - BASE, seed=2).mean_skills(0, 30)[:, 0])


@pytest.mark.parametrize("kind", BETA_KINDS)
def test_threads_do_not_change_the_values(kind: str) -> None:
    one = make_env(kind, seed=[1, 2, 3, 4], chunk_size=9).skills(0, 40)
    many = make_env(kind, seed=[1, 2, 3, 4], chunk_size=9, n_threads=3).skills(0, 40)
    assert np.array_equal(one, many)


def test_run_seed_sequences() -> None:
    assert run_seed_sequences(5, 1)[0].entropy == 5
    seeds = run_seed_sequences(None, 2)
    assert seeds[0].entropy == seeds[1].entropy and seeds[0].spawn_key != seeds[1].spawn_key
    with pytest.raises(ValueError, match="seed has 2 entries for 3 runs"):
        run_seed_sequences([1, 2], 3)


def test_returned_arrays_are_fresh() -> None:
    env = StochasticEnv(BASE, seed=1)
    x = env.skills(0, 5)
    x[:] = -1.0
    assert np.all(env.skills(0, 5) >= 0)
    m = env.mean_skills(0, 2)
    m[:] = 5.0
    assert np.all(env.mean_skills(0, 2) < 1)


# --------------------------------------------------------------------------- SequenceEnv
def test_sequence_env_replays_the_given_skills() -> None:
    seq = np.random.default_rng(0).uniform(0, 3, (8, 2, 4))
    before = seq.copy()
    env = SequenceEnv(seq, n_runs=3)
    assert (env.n_runs, env.n_dims, env.n_experts, env.horizon) == (3, 2, 4, 8)
    x = env.skills(2, 6)
    assert x.shape == (4, 3, 2, 4)
    assert all(np.array_equal(x[:, r], seq[2:6]) for r in range(3))
    assert np.array_equal(env.mean_skills(0, 8), env.skills(0, 8))
    x[:] = 0.0
    assert np.array_equal(env.skills(2, 6)[:, 0], seq[2:6])
    assert np.array_equal(seq, before)


def test_sequence_env_per_run() -> None:
    seq = np.arange(2 * 3 * 1 * 2, dtype=float).reshape(2, 3, 1, 2)
    env = SequenceEnv(seq)
    assert env.n_runs == 3
    assert np.array_equal(env.skills(0, 2), seq)


# --------------------------------------------------------------------------- the contract
@pytest.mark.parametrize(
    "env",
    [
        StochasticEnv(BASE, seed=[0, 1]),
        RegimeSwitchingEnv(BASE, horizon=30, seed=[0, 1]),
        SequenceEnv(np.ones((30, 2, 2, 3))),
    ],
    ids=["stochastic", "regime", "sequence"],
)
def test_conformance(env: SkillEnv) -> None:
    assert isinstance(env, SkillEnv)
    assert (env.n_runs, env.n_dims, env.n_experts) == (2, 2, 3)
    for fn in (env.skills, env.mean_skills):
        x = fn(4, 30)
        assert x.shape == (26, 2, 2, 3) and x.dtype == np.float64
        assert np.all(np.isfinite(x)) and np.all(x >= 0)
        assert np.array_equal(fn(4, 30), x)
    assert "n_runs=2" in repr(env)


@pytest.mark.parametrize(
    ("start", "stop", "error", "match"),
    [
        (5, 3, ValueError, "stop == 3 is before start == 5"),
        (-1, 3, ValueError, "start == -1, must be >= 0"),
        (0, 31, ValueError, r"stop == 31 is past the horizon \(30 rounds\)"),
        (0.5, 3, TypeError, "start must be an integer"),
    ],
)
def test_bad_round_ranges(start: Any, stop: Any, error: type[Exception], match: str) -> None:
    for env in (
        RegimeSwitchingEnv(BASE, horizon=30, seed=0),
        SequenceEnv(np.ones((30, 1, 1))),
    ):
        with pytest.raises(error, match=match):
            env.skills(start, stop)
        with pytest.raises(error, match=match):
            env.mean_skills(start, stop)


def test_unbounded_stream_has_no_horizon() -> None:
    env = StochasticEnv(BASE, seed=0, chunk_size=10)
    assert env.horizon is None
    assert env.skills(1_000_000, 1_000_002).shape == (2, 1, 2, 3)


# --------------------------------------------------------------------------- validation
BAD_BASE = [[0.5, 1.5], [0.2, 0.1]]


@pytest.mark.parametrize(
    ("factory", "error", "match"),
    [
        (
            lambda: StochasticEnv(BAD_BASE),
            ValueError,
            r"skills_base\[0, 1\] == 1\.5, must be in \[0, 1\]",
        ),
        (lambda: StochasticEnv([[0.5, -0.1]]), ValueError, r"skills_base\[0, 1\] == -0\.1"),
        (lambda: StochasticEnv([[0.5, np.nan]]), ValueError, "skills_base contains 1 NaN"),
        (lambda: StochasticEnv([0.5, 0.5]), ValueError, "skills_base must have 2 to 3 dimensions"),
        (lambda: StochasticEnv(np.ones((1, 0))), ValueError, "non-empty axes"),
        (
            lambda: StochasticEnv(BASE, kappa=0),
            ValueError,
            "kappa == 0, must be a finite number > 0",
        ),
        (lambda: StochasticEnv(BASE, kappa=np.inf), ValueError, "kappa == inf"),
        (
            lambda: StochasticEnv(BASE, seed=1.5),
            TypeError,
            "seed must be an int or a numpy SeedSequence",
        ),  # type: ignore[arg-type]
        (lambda: StochasticEnv(BASE, seed=-3), ValueError, "seed == -3, must be >= 0"),
        (
            lambda: StochasticEnv(BASE, seed=[1, 2], n_runs=3),
            ValueError,
            "seed gives 2 runs but n_runs gives 3",
        ),
        (
            lambda: StochasticEnv(np.stack([BASE] * 2), seed=[1, 2, 3]),
            ValueError,
            "skills_base gives 2 runs but seed gives 3",
        ),
        (lambda: StochasticEnv(BASE, n_runs=0), ValueError, "n_runs == 0, must be >= 1"),
        (lambda: StochasticEnv(BASE, chunk_size=0), ValueError, "chunk_size == 0"),
        (lambda: StochasticEnv(BASE, cache_chunks=0), ValueError, "cache_chunks == 0"),
        (lambda: StochasticEnv(BASE, n_threads=0), ValueError, "n_threads == 0"),
        (
            lambda: RegimeSwitchingEnv(BAD_BASE, horizon=10),
            ValueError,
            r"skills_base\[0, 1\] == 1\.5",
        ),
        (lambda: RegimeSwitchingEnv(BASE, horizon=0), ValueError, "horizon == 0, must be >= 1"),
        (lambda: RegimeSwitchingEnv(BASE, n_blocks=0, horizon=10), ValueError, "n_blocks == 0"),
        (
            lambda: RegimeSwitchingEnv(BASE, n_blocks=11, horizon=10),
            ValueError,
            "n_blocks == 11, must be <= horizon == 10",
        ),
        (
            lambda: RegimeSwitchingEnv(BASE, fraction=0.0, horizon=10),
            ValueError,
            r"fraction == 0\.0, must be in \(0, 1\]",
        ),
        (
            lambda: RegimeSwitchingEnv(BASE, fraction=1.2, horizon=10),
            ValueError,
            r"fraction == 1\.2",
        ),
        (
            lambda: RegimeSwitchingEnv(BASE, shrink=-0.1, horizon=10),
            ValueError,
            r"shrink == -0\.1, must be in \[0, 1\]",
        ),
        (lambda: RegimeSwitchingEnv(BASE, shrink=1.5, horizon=10), ValueError, r"shrink == 1\.5"),
        (lambda: RegimeSwitchingEnv(BASE, kappa=-1, horizon=10), ValueError, "kappa == -1"),
        (lambda: SequenceEnv(np.full((3, 1, 2), np.nan)), ValueError, "skills contains 6 NaN"),
        (
            lambda: SequenceEnv([[[0.5, -2.0]]]),
            ValueError,
            r"skills\[0, 0, 1\] == -2\.0, must be >= 0",
        ),
        (lambda: SequenceEnv(np.ones((3, 2))), ValueError, "skills must have 3 to 4 dimensions"),
        (lambda: SequenceEnv(np.ones((0, 2, 2))), ValueError, "non-empty axes"),
        (
            lambda: SequenceEnv(np.ones((3, 2, 1, 1)), n_runs=3),
            ValueError,
            "skills gives 2 runs but n_runs gives 3",
        ),
    ],
)
def test_bad_arguments(factory: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        factory()


def test_shrunk_mask_block_range() -> None:
    env = RegimeSwitchingEnv(BASE, horizon=10, seed=0)
    with pytest.raises(ValueError, match="block == 10, must be < n_blocks == 10"):
        env.shrunk_mask(10)


def test_doctests_of_the_module() -> None:
    result = doctest.testmod(envs_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------------------- stacked
def _stacked_pair(cache_chunks: int = 4) -> tuple[Any, list[Any]]:
    """A stacked (stochastic, regime) pair of 3 and 2 runs, and fresh copies of its parts."""
    from msroute.env_layouts import StackedEnv

    base = np.random.default_rng(0).random((3, 5))

    def parts() -> list[Any]:
        return [
            StochasticEnv(base, seed=[1, 2, 3], chunk_size=8, cache_chunks=cache_chunks),
            RegimeSwitchingEnv(
                base, horizon=29, seed=[4, 5], chunk_size=8, cache_chunks=cache_chunks
            ),
        ]

    return StackedEnv(parts()), parts()


@pytest.mark.parametrize(("start", "stop"), [(0, 8), (3, 7), (8, 16), (5, 21), (24, 29), (0, 29)])
def test_stacked_skills_are_each_environments_own(start: int, stop: int) -> None:
    """Every run reads its environment's skills; within one chunk, a read-only view of it."""
    stacked, (sto, reg) = _stacked_pair()
    got = stacked.skills(start, stop)
    want = np.concatenate([sto.skills(start, stop), reg.skills(start, stop)], axis=1)
    np.testing.assert_array_equal(got, want)
    assert not got.flags.writeable
    assert [len(e._cache) for e in stacked.envs] == [0, 0]  # the parts keep no copy
    again = stacked.skills(start, stop)
    assert np.shares_memory(got, again) == (start // 8 == (stop - 1) // 8)
    assert stacked.skills(start, start).shape == (0, 5, 3, 5)


def test_stacked_draw_ahead_caches_the_same_skills() -> None:
    stacked, _ = _stacked_pair()
    lazy, _ = _stacked_pair()
    stacked.draw_ahead(29, threads=2)
    assert sorted(stacked._cache) == [0, 1, 2, 3]
    np.testing.assert_array_equal(stacked.skills(0, 29), lazy.skills(0, 29))
    view = stacked.skills(24, 29)
    assert np.shares_memory(view, stacked._cache[3])
    with pytest.raises(InvalidValueError, match="past the horizon"):
        stacked.skills(0, 30)


def test_stacked_cache_is_bounded() -> None:
    stacked, (sto, _) = _stacked_pair(cache_chunks=2)
    for start in range(0, 29, 8):
        stacked.skills(start, min(start + 8, 29))
    assert sorted(stacked._cache) == [2, 3]
    np.testing.assert_array_equal(stacked.skills(0, 3)[:, :3], sto.skills(0, 3))


def test_fill_chunk_checks_its_target_and_copies_a_cached_chunk() -> None:
    env = RegimeSwitchingEnv(np.full((2, 4), 0.5), horizon=10, seed=[0, 1], chunk_size=8)
    with pytest.raises(InvalidValueError, match="chunk 1 holds 2 rounds"):
        env.fill_chunk(1, np.empty((3, 2, 2, 4)))
    with pytest.raises(InvalidValueError, match="out has shape"):
        env.fill_chunk(0, np.empty((8, 1, 2, 4)))
    drawn = np.empty((5, 2, 2, 4))
    env.fill_chunk(0, drawn)  # a prefix of the chunk, drawn
    cached = env.skills(0, 8)
    copied = np.empty((5, 2, 2, 4))
    env.fill_chunk(0, copied)
    np.testing.assert_array_equal(drawn, cached[:5])
    np.testing.assert_array_equal(copied, drawn)


# ---------------------------------------------------------------------------- memory pages
def _huge_pages_allowed(arr: np.ndarray) -> bool | None:
    """Whether the kernel may back the middle of ``arr``'s memory with transparent huge pages
    (the ``THPeligible`` line of its mapping in ``/proc/self/smaps``); None where it does not
    say."""
    from pathlib import Path

    addr = arr.__array_interface__["data"][0] + arr.nbytes // 2  # numpy advises whole 2 MiB
    try:
        text = Path("/proc/self/smaps").read_text()
    except OSError:
        return None
    inside = False
    for line in text.splitlines():
        head = line.split(maxsplit=1)[0]
        if not head.endswith(":"):  # a mapping's first line: "lo-hi perms ..."
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "THPeligible:":
            return line.split()[1] == "1"
    return None


def test_kept_chunks_are_on_ordinary_pages() -> None:
    """The chunks an environment keeps (a sweep's skills, drawn before its workers fork) are
    not on transparent huge pages, which numpy asks for from 4 MiB and which cost several
    times the CPU to write where the kernel compacts memory to find them."""
    from msroute.env_layouts import StackedEnv

    if _huge_pages_allowed(np.empty((1000, 1, 1, 600))) is not True:
        pytest.skip("this kernel gives numpy's large arrays no transparent huge pages")
    base = np.full((1, 600), 0.5)  # a chunk of 1,000 rounds: 4.8 MB
    env = StochasticEnv(base, seed=[0])
    env.skills(0, 1)

    def pair() -> StackedEnv:
        regime = RegimeSwitchingEnv(base, horizon=10**3, seed=[2])
        return StackedEnv([StochasticEnv(base, seed=[1]), regime])

    stacked, ahead = pair(), pair()
    stacked.skills(0, 1)
    ahead.draw_ahead(10**3, threads=2)
    for chunk in (env._cache[0], stacked._cache[0], ahead._cache[0]):
        assert _huge_pages_allowed(chunk) is False
    np.testing.assert_array_equal(stacked._cache[0], ahead._cache[0])
    from msroute._memory import empty_kept

    kept = empty_kept((3, 4))
    kept[...] = 1.5
    assert kept.dtype == np.float64 and kept.shape == (3, 4) and kept.sum() == 18.0
    assert empty_kept((0, 4)).shape == (0, 4)
