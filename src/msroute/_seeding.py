"""Seeds of independent runs: one ``SeedSequence`` per run, derived the same way everywhere.

Every run of a batch derives its random streams (environment, policy) from its own seed, so a
run's numbers do not depend on which other runs it is batched with: serial, parallel and
resumed sweeps agree, and a run can be replayed alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import numpy as np

from msroute._validation import IntArray, check_positive_int
from msroute.errors import InvalidTypeError, InvalidValueError

__all__ = ["RngSeed", "RunSeed", "SeedArg", "as_generator", "child_seed", "run_seed_sequences"]

#: The seed of one run.
RunSeed = int | np.integer | np.random.SeedSequence
#: The seeds of a batch of runs: one seed per run, or one seed spawning them (None: fresh).
SeedArg = RunSeed | Sequence[RunSeed] | None
#: The randomness of one estimate (a Monte Carlo average): a seed, or a generator to draw from.
RngSeed = int | np.random.SeedSequence | np.random.Generator | None


def _as_seed_sequence(seed: object, name: str) -> np.random.SeedSequence:
    if seed is None:
        return np.random.SeedSequence()
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.ndarray) and seed.ndim == 0 and np.issubdtype(seed.dtype, np.integer):
        seed = seed.item()
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        kind = type(seed).__name__
        raise InvalidTypeError(f"{name} must be an int or a numpy SeedSequence, got {kind}")
    if seed < 0:
        raise InvalidValueError(f"{name} == {seed}, must be >= 0")
    return np.random.SeedSequence(int(seed))


def as_generator(seed: object, name: str = "seed") -> np.random.Generator:
    """The generator an ``RngSeed`` stands for: a Generator itself, else one built from the
    seed (an int >= 0, a SeedSequence or None for fresh entropy), checked as every other seed
    of msroute is (``InvalidTypeError``/``InvalidValueError`` naming ``name``; numpy alone
    would raise a bare error for -1 and read a list or a string of digits as entropy).

    ``default_rng(n)`` and ``default_rng(SeedSequence(n))`` are the same stream, so a valid
    seed gives the numbers it always gave.

    Examples
    --------
    >>> as_generator(3).random() == np.random.default_rng(3).random()
    True
    >>> as_generator(-1)
    Traceback (most recent call last):
    ...
    msroute.errors.InvalidValueError: seed == -1, must be >= 0
    """
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(_as_seed_sequence(seed, name))


def child_seed(seed: np.random.SeedSequence, *key: int) -> np.random.SeedSequence:
    """The seed sequence ``seed`` would spawn under ``key`` (``seed`` itself is untouched)."""
    return np.random.SeedSequence(
        seed.entropy, spawn_key=(*seed.spawn_key, *key), pool_size=seed.pool_size
    )


def _is_seed_sequence_arg(seed: object) -> TypeGuard[Sequence[RunSeed] | IntArray]:
    if isinstance(seed, np.ndarray):
        return seed.ndim > 0
    return isinstance(seed, Sequence) and not isinstance(seed, str | bytes)


def run_seed_sequences(seed: SeedArg, n_runs: int) -> tuple[np.random.SeedSequence, ...]:
    """The seed of each run, as the environments derive them.

    Parameters
    ----------
    seed : int, SeedSequence, sequence of those, or None
        A sequence gives one seed per run (its length must be ``n_runs``). A single seed is the
        run's seed when ``n_runs == 1``, and stands for its ``n_runs`` spawned children
        otherwise. None draws fresh entropy.
    n_runs : int

    Returns
    -------
    tuple of SeedSequence, length n_runs

    Examples
    --------
    >>> a = run_seed_sequences(7, 3)
    >>> b = np.random.SeedSequence(7).spawn(3)
    >>> [x.generate_state(2).tolist() == y.generate_state(2).tolist() for x, y in zip(a, b)]
    [True, True, True]
    """
    r = check_positive_int(n_runs, "n_runs")
    if _is_seed_sequence_arg(seed):
        seeds = list(seed)
        if len(seeds) != r:
            raise InvalidValueError(f"seed has {len(seeds)} entries for {r} runs; give one per run")
        return tuple(_as_seed_sequence(s, f"seed[{i}]") for i, s in enumerate(seeds))
    base = _as_seed_sequence(seed, "seed")
    if r == 1:
        return (base,)
    return tuple(child_seed(base, i) for i in range(r))
