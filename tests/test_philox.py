"""The first uniform of a decision's stream (``msroute.policies._philox``), in Python and
compiled, is numpy's ``Philox`` draw; a decision stream started lazily draws what one
positioned at once draws."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from msroute.policies import _philox
from msroute.policies._compiled import philox as compiled_philox
from msroute.router.streams import DecisionStreams


@numba.njit
def _compiled(key: np.ndarray, n: int) -> float:
    return compiled_philox.first_uniform(key, n)


def _numpy_first(key: np.ndarray, n: int) -> float:
    """numpy's first uniform at counter (0, n, 0, 0), empty buffer (how a router positions)."""
    gen = np.random.Generator(np.random.Philox(key=key))
    state = gen.bit_generator.state
    state["state"]["counter"] = np.array([0, n, 0, 0], dtype=np.uint64)
    state["buffer_pos"] = 4
    gen.bit_generator.state = state
    return float(gen.random((1, 1))[0, 0])


def test_first_uniform_is_numpys() -> None:
    rng = np.random.default_rng(0)
    ns = [0, 1, 2, 2**32 - 1, 2**32, 2**62, 2**63 - 1]
    keys = [np.array([0, 0], dtype=np.uint64), np.array([2**64 - 1] * 2, dtype=np.uint64)]
    keys += [rng.integers(0, 2**64, 2, dtype=np.uint64) for _ in range(300)]
    for i, key in enumerate(keys):
        for n in [*ns, int(rng.integers(0, 2**63)), i]:
            expected = _numpy_first(key, n)
            assert _philox.first_uniform(key, n) == expected, (key, n)
            assert _compiled(key, n) == expected, (key, n)


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_a_lazily_started_stream_draws_the_positioned_streams_draws(seed: int) -> None:
    streams = DecisionStreams(seed, 8)
    for n in [0, 5, 3, 5, 1000]:
        streams.start(n)
        first = _philox.first_uniform(streams.key, n)
        u = streams.uniform(3)
        assert u[0, 0] == first == _numpy_first(streams.key, n)
        assert streams.uniform(1)[0, 0] != u[0, 0]  # the stream goes on within a decision
    with pytest.raises(ValueError):
        streams.key[0] = 1  # the key is read-only


def test_a_stream_goes_on_after_the_counters_first_uniform() -> None:
    """A decision whose first uniform came from the counter draws next what the generator
    would have drawn after it; a decision that drew is no longer fresh."""
    taken, drawn = DecisionStreams(11, 8), DecisionStreams(11, 8)
    for n in [0, 4, 4, 9]:
        taken.start(n)
        drawn.start(n)
        assert taken.fresh and drawn.fresh
        taken.take_first()
        first = drawn.uniform(1)[0, 0]
        assert first == _philox.first_uniform(taken.key, n)
        assert not taken.fresh and not drawn.fresh
        assert taken.uniform(3).tobytes() == drawn.uniform(3).tobytes()
