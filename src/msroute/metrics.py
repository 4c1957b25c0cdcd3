"""The paper's metrics on recorded trajectories (Section 4.3, eqs. (4)-(5); Section 6.2).

Trajectories are arrays with a leading round axis and a run axis, as the simulator records
them: rewards ``(T, R)``, realized costs ``(T, R, d)`` (each distinct routed expert counted
once), per-run original bounds ``lo_ori, hi_ori`` ``(R, d)`` with ``-inf``/``+inf`` where a
bound is absent (``ProblemBatch.lo_ori``). Round counts ``at`` are 1-based: ``at = t``
means "after the first ``t`` rounds".

* ``constraint_regret`` is R2 of eq. (5): the distance of the running-average realized cost
  to ``S_ori``.
* ``objective_regret_proxy`` is Section 6.2's ``R1(n) = (1/n) sum_{s <= n}
  (E_{A ~ q_T}[r(A, V_s)] - r_s)`` with the final policy ``q_T`` standing in for ``q*``; the
  expectation is computed exactly by default (the paper uses 200 Monte Carlo draws, kept as
  ``method="monte_carlo"``).
* ``true_regret`` is R1 of eq. (4), ``OPT - (1/t) sum_{s <= t} Phi_s(q_s)``, with OPT from
  ``msroute.core.oracle``.
* ``feasible``, ``time_averaged``, ``running_average`` and ``rolling_mean``
  (Figure 3's trailing window) complete the set.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from msroute._seeding import RngSeed, as_generator
from msroute._validation import (
    FloatArray,
    IntArray,
    as_float_array,
    as_real,
    check_contexts,
    check_positive_int,
    check_simplex,
)
from msroute.core.bounds import bound_report, box_distance
from msroute.core.reward import context_scaled, expected_reward_core, monte_carlo_reward
from msroute.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "bound_report",
    "constraint_regret",
    "feasible",
    "objective_regret_proxy",
    "regret_of_averages",
    "rolling_mean",
    "running_average",
    "time_averaged",
    "true_regret",
]

SkillsLike = ArrayLike | Callable[[int, int], ArrayLike]

#: Rounds of skills fetched at a time (memory: 1,000 * R * N * K * 8 bytes, 24 MB at R = 20,
#: N = 3, K = 50).
_EXACT_CHUNK = 1000

#: Budget of array entries per Monte Carlo call (``monte_carlo_reward`` materialises
#: ``rounds * R * n_samples * max(M, N) * K`` values).
_MC_ENTRIES = 500_000


# ---------------------------------------------------------------------------- checks
def _as_trajectory(x: ArrayLike, name: str, ndim: int) -> FloatArray:
    arr = as_float_array(x, name, ndim_min=ndim, ndim_max=ndim)
    if arr.shape[0] < 1:
        raise InvalidValueError(
            f"{name} must hold at least one round (axis 0), got shape {arr.shape}"
        )
    return arr


def _as_bounds(
    lo: ArrayLike, hi: ArrayLike, shape: tuple[int, ...]
) -> tuple[FloatArray, FloatArray]:
    """Bounds of shape ``shape`` (R, d) or (d,); infinite ends allowed, NaN not."""
    out = []
    for name, value in (("lo_ori", lo), ("hi_ori", hi)):
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidTypeError(f"{name} must be an array of numbers") from exc
        if np.any(np.isnan(arr)):
            raise InvalidValueError(f"{name} contains NaN; use -inf / +inf for an absent bound")
        if arr.shape not in (shape, shape[-1:]):
            raise InvalidValueError(
                f"{name} has shape {arr.shape}; it must be (R, d) = {shape} or (d,) = {shape[-1:]}"
            )
        arr = np.broadcast_to(arr, shape)
        out.append(arr)
    lo_a, hi_a = out
    if np.any(lo_a > hi_a):
        raise InvalidValueError(
            "lo_ori must be <= hi_ori everywhere (a lower bound above an upper one)"
        )
    if np.any(lo_a == np.inf) or np.any(hi_a == -np.inf):
        raise InvalidValueError("lo_ori cannot be +inf and hi_ori cannot be -inf")
    return lo_a, hi_a


def _check_rounds(at: ArrayLike | None, horizon: int) -> IntArray:
    """1-based round counts in ``[1, T]``; ``None`` means every round."""
    if at is None:
        return np.arange(1, horizon + 1, dtype=np.int64)
    arr = np.atleast_1d(np.asarray(at))
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidValueError(
            f"at must be a non-empty 1-d array of round counts, got shape {arr.shape}"
        )
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)):
            if np.any(arr != np.round(arr)):
                raise InvalidValueError("at must hold whole round counts (1-based), got fractions")
        else:
            raise InvalidValueError(f"at must hold integer round counts, got dtype {arr.dtype}")
    counts = arr.astype(np.int64)
    if counts.min() < 1 or counts.max() > horizon:
        raise InvalidValueError(
            f"at must lie in [1, T] = [1, {horizon}] (1-based round counts), got values in "
            f"[{counts.min()}, {counts.max()}]"
        )
    return counts


# ---------------------------------------------------------------------------- averages
def time_averaged(x: ArrayLike) -> FloatArray:
    """Average over the round axis: rewards (T, R) -> (R,), costs (T, R, d) -> (R, d).

    Each run's average is summed along its own contiguous row, so it is the same, bit for bit,
    whichever other runs share the array (a run replayed alone matches the run in a sweep).

    Examples
    --------
    >>> time_averaged([[1.0, 2.0], [3.0, 6.0]]).tolist()
    [2.0, 4.0]
    """
    arr = as_float_array(x, "x", ndim_min=1)
    if arr.shape[0] < 1:
        raise InvalidValueError("x must hold at least one round (axis 0)")
    rows = np.ascontiguousarray(np.moveaxis(arr, 0, -1))
    return np.asarray(rows.mean(axis=-1), dtype=np.float64)


def running_average(x: ArrayLike, at: ArrayLike | None = None) -> FloatArray:
    """Running averages ``(1/t) sum_{s <= t} x_s`` at the round counts ``at``.

    Parameters
    ----------
    x : array_like, shape (T, ...)
    at : array_like of int, optional
        1-based round counts in ``[1, T]``; default every round.

    Returns
    -------
    ndarray, shape (len(at), ...)

    Examples
    --------
    >>> running_average([1.0, 3.0, 8.0]).tolist()
    [1.0, 2.0, 4.0]
    """
    arr = as_float_array(x, "x", ndim_min=1)
    if arr.shape[0] < 1:
        raise InvalidValueError("x must hold at least one round (axis 0)")
    counts = _check_rounds(at, arr.shape[0])
    total = np.cumsum(arr, axis=0)[counts - 1]
    return np.asarray(total / counts.reshape((-1,) + (1,) * (arr.ndim - 1)), dtype=np.float64)


def rolling_mean(x: ArrayLike, window: int) -> FloatArray:
    """Trailing rolling average over ``window`` rounds (Figure 3 uses ``window = 500``).

    Row ``i`` is the mean of rounds ``i, ..., i + window - 1`` (0-based), i.e. the window that
    ends at round ``i + window`` (1-based). Computed with one cumulative sum of the deviations
    from the column means, which keeps the rounding error at the level of the data, not of
    the running total.

    Parameters
    ----------
    x : array_like, shape (T, ...)
    window : int
        ``1 <= window <= T``.

    Returns
    -------
    ndarray, shape (T - window + 1, ...)

    Examples
    --------
    >>> rolling_mean([1.0, 2.0, 3.0, 10.0], window=2).tolist()
    [1.5, 2.5, 6.5]
    """
    arr = as_float_array(x, "x", ndim_min=1)
    w = check_positive_int(window, "window")
    t = arr.shape[0]
    if w > t:
        raise InvalidValueError(f"window == {w} is longer than the {t} rounds recorded")
    centre = arr.mean(axis=0)
    total = np.cumsum(arr - centre, axis=0)
    total = np.concatenate([np.zeros((1, *arr.shape[1:])), total], axis=0)
    return np.asarray((total[w:] - total[:-w]) / w + centre, dtype=np.float64)


# ---------------------------------------------------------------------------- constraints
def feasible(
    avg_cost: ArrayLike, lo_ori: ArrayLike, hi_ori: ArrayLike, tol: float = 1e-9
) -> np.ndarray:
    """Whether every bound holds for the time-averaged realized cost, up to ``tol``.

    The feasible run of docs/architecture.md ("Decided readings"):
    ``lo_j - tol <= avg_cost_j <= hi_j + tol`` for every coordinate ``j`` (the experiments
    report ``tol = 1e-9`` and ``tol = 1e-3``).

    Parameters
    ----------
    avg_cost : array_like, shape (R, d)
        Time-averaged realized cost of each run (``time_averaged`` of the costs).
    lo_ori, hi_ori : array_like, shape (R, d) or (d,)
        Original bounds, ``-inf`` / ``+inf`` where absent.
    tol : float, default 1e-9
        Absolute slack allowed on every bound.

    Returns
    -------
    ndarray of bool, shape (R,)

    Examples
    --------
    >>> feasible([[1.0, 0.5], [1.2, 0.5]], [-np.inf, 0.5], [1.0, np.inf]).tolist()
    [True, False]
    """
    cost = as_float_array(avg_cost, "avg_cost", ndim_min=1, ndim_max=2)
    lo, hi = _as_bounds(lo_ori, hi_ori, cost.shape)
    tol = as_real(tol, "tol")
    if not (np.isfinite(tol) and tol >= 0):
        raise InvalidValueError(f"tol == {tol}, must be a finite number >= 0")
    ok = (cost >= lo - tol) & (cost <= hi + tol)
    return np.asarray(np.all(ok, axis=-1))


def constraint_regret(
    costs: ArrayLike, lo_ori: ArrayLike, hi_ori: ArrayLike, at: ArrayLike | None = None
) -> FloatArray:
    """R2 of eq. (5): distance of the running-average realized cost to ``S_ori``.

    ``R2(t) = dist((1/t) sum_{s <= t} l_s, S_ori)`` with the Euclidean distance to the box;
    exactly zero when the average lies inside it.

    Parameters
    ----------
    costs : array_like, shape (T, R, d)
        Realized cost vectors ``l_t`` (each distinct routed expert counted once).
    lo_ori, hi_ori : array_like, shape (R, d) or (d,)
        Original bounds, ``-inf`` / ``+inf`` where absent.
    at : array_like of int, optional
        1-based round counts in ``[1, T]``; default every round.

    Returns
    -------
    ndarray, shape (len(at), R)

    Examples
    --------
    >>> costs = np.array([[[2.0, 0.0]], [[0.0, 0.0]]])  # T = 2, R = 1, d = 2
    >>> constraint_regret(costs, [-np.inf, -np.inf], [0.5, 1.0]).round(12).tolist()
    [[1.5], [0.5]]
    """
    c = _as_trajectory(costs, "costs", 3)
    return regret_of_averages(running_average(c, at), lo_ori, hi_ori)


def regret_of_averages(avg_cost: ArrayLike, lo_ori: ArrayLike, hi_ori: ArrayLike) -> FloatArray:
    """R2 from running-average costs already computed (e.g. streamed by
    ``msroute.simulate.simulate_summary``): shape (n, R, d) -> (n, R).

    Examples
    --------
    >>> regret_of_averages([[[1.5, 0.0]]], [-np.inf, -np.inf], [0.5, 1.0]).tolist()
    [[1.0]]
    """
    avg = _as_trajectory(avg_cost, "avg_cost", 3)
    lo, hi = _as_bounds(lo_ori, hi_ori, avg.shape[1:])
    return box_distance(avg, lo, hi)


# ---------------------------------------------------------------------------- rewards
def true_regret(
    opt_value: ArrayLike, expected_rewards: ArrayLike, at: ArrayLike | None = None
) -> FloatArray:
    """R1 of eq. (4): ``OPT - (1/t) sum_{s <= t} Phi_s(q_s)``.

    Parameters
    ----------
    opt_value : float or array_like, shape (R,)
        OPT of each run (``msroute.core.oracle.best_fixed_policy``, or ``OPT^ctx`` for the
        contextual regret of Section 5.2).
    expected_rewards : array_like, shape (T, R)
        ``Phi_s(q_s)``, the exact expected reward of the policy actually played each round
        (the simulator records it for policies that expose their routing distribution).
    at : array_like of int, optional
        1-based round counts in ``[1, T]``; default every round.

    Returns
    -------
    ndarray, shape (len(at), R)

    Examples
    --------
    >>> true_regret(2.0, [[1.0], [2.0], [3.0]]).tolist()
    [[1.0], [0.5], [0.0]]
    """
    phi = _as_trajectory(expected_rewards, "expected_rewards", 2)
    opt = as_float_array(opt_value, "opt_value", ndim_min=0, ndim_max=1)
    if opt.ndim == 1 and opt.shape[0] != phi.shape[1]:
        raise InvalidValueError(
            f"opt_value has {opt.shape[0]} entries but expected_rewards has R = {phi.shape[1]} runs"
        )
    return np.asarray(opt - running_average(phi, at), dtype=np.float64)


def objective_regret_proxy(
    rewards: ArrayLike,
    final_q: ArrayLike,
    skills: SkillsLike,
    m_draws: int,
    at: ArrayLike | None = None,
    *,
    method: str = "exact",
    n_samples: int = 200,
    seed: RngSeed = None,
    contexts: ArrayLike | None = None,
    context_weights: ArrayLike | None = None,
) -> FloatArray:
    """Section 6.2's ``R1(n) = (1/n) sum_{s <= n} (E_{A ~ q_T}[r(A, V_s)] - r_s)``.

    The final policy ``q_T`` stands in for the optimum of eq. (3): the proxy measures how much
    better ``q_T`` would have done from the start than the trajectory actually played. The
    expectation is computed exactly (``msroute.core.reward``'s closed form) unless
    ``method="monte_carlo"``, the paper's 200-draw estimate.

    Parameters
    ----------
    rewards : array_like, shape (T, R)
        Realized rewards ``r_s``.
    final_q : array_like, shape (R, K), or (R, X, K) with ``contexts``
        ``q_T`` of each run (one per context for contextual runs).
    skills : array_like, shape (T, R, N, K), or callable
        The skills ``V_s`` the runs faced, or ``skills(start, stop) -> (stop - start, R, N, K)``
        (e.g. a replayable environment's ``skills`` method) so that long runs are processed
        in blocks of 1,000 rounds without holding every round in memory.
    m_draws : int
        M.
    at : array_like of int, optional
        1-based round counts in ``[1, T]``; default every round.
    method : {"exact", "monte_carlo"}, default "exact"
    n_samples : int, default 200
        Monte Carlo draws of ``A ~ q_T`` per round and run.
    seed : int, SeedSequence or Generator, optional
        Randomness of the Monte Carlo estimate only. Pass a seed derived for this purpose,
        never the generator of a policy or environment (diagnostics do not draw from the
        decision stream). The estimate depends on the seed and on ``(T, R, N, K, M,
        n_samples)``, which fix the block sizes.
    contexts : array_like of int, shape (T,) or (T, R), optional
        Context ``x_s`` of each round (contextual runs, Section 5.2): round ``s`` is scored
        with ``final_q[:, x_s]`` on the skills scaled by ``context_weights[x_s]``.
    context_weights : array_like, shape (X, N), optional
        Required with ``contexts``; as in ``msroute.simulate.simulate``.

    Returns
    -------
    ndarray, shape (len(at), R)

    Examples
    --------
    >>> skills = np.array([[[[1.0, 0.0]]], [[[0.0, 1.0]]]])  # T = 2, R = 1, N = 1, K = 2
    >>> objective_regret_proxy([[1.0], [0.0]], [[0.5, 0.5]], skills, m_draws=1).tolist()
    [[-0.5], [0.0]]
    """
    r = _as_trajectory(rewards, "rewards", 2)
    t_len, n_runs = r.shape
    m = check_positive_int(m_draws, "m_draws")
    counts = _check_rounds(at, t_len)
    if method not in ("exact", "monte_carlo"):
        raise InvalidValueError(f"method == {method!r}, must be 'exact' or 'monte_carlo'")
    n_mc = check_positive_int(n_samples, "n_samples")
    ctx, weights = check_contexts(contexts, context_weights, t_len, n_runs)
    q = as_float_array(final_q, "final_q", ndim_min=2, ndim_max=3)
    want_ndim = 2 if ctx is None else 3
    if q.ndim != want_ndim or q.shape[0] != n_runs:
        want = "(R, K)" if ctx is None else "(R, X, K)"
        raise InvalidValueError(
            f"final_q must have shape {want} with R = {n_runs} runs, got {q.shape}"
            + ("" if ctx is not None or q.ndim == 2 else "; pass contexts= for per-context q")
        )
    check_simplex(q, "final_q")
    k = q.shape[-1]
    if weights is not None and (q.shape[1] != weights.shape[0]):
        raise InvalidValueError(
            f"final_q has {q.shape[1]} contexts but context_weights has {weights.shape[0]}"
        )
    fetch = _skill_fetcher(skills, t_len, n_runs, k)
    rng = as_generator(seed)

    phi = np.empty((t_len, n_runs))
    runs = np.arange(n_runs)
    for start in range(0, t_len, _EXACT_CHUNK):
        stop = min(start + _EXACT_CHUNK, t_len)
        v = fetch(start, stop)
        if ctx is not None and weights is not None:
            x = ctx[start:stop]  # (c, R)
            v = context_scaled(v, weights, x)
            q_rounds = q[runs[None, :], x]  # (c, R, K)
        else:
            q_rounds = np.broadcast_to(q[None], (stop - start, n_runs, k))
        if method == "exact":
            phi[start:stop] = expected_reward_core(q_rounds, v, m)
        else:
            per_round = n_runs * n_mc * max(m, v.shape[2]) * k
            step = max(1, _MC_ENTRIES // per_round)
            for a in range(0, stop - start, step):
                b = min(a + step, stop - start)
                phi[start + a : start + b] = monte_carlo_reward(
                    q_rounds[a:b], v[a:b], m, n_samples=n_mc, seed=rng
                )[0]
    return np.asarray(running_average(phi - r, counts), dtype=np.float64)


def _skill_fetcher(
    skills: SkillsLike, t_len: int, n_runs: int, k: int
) -> Callable[[int, int], FloatArray]:
    """A checked ``(start, stop) -> (stop - start, R, N, K)`` view of an array or callable."""

    def check(v: FloatArray, start: int, stop: int, what: str) -> FloatArray:
        if v.ndim != 4 or v.shape[0] != stop - start or v.shape[1] != n_runs or v.shape[3] != k:
            raise InvalidValueError(
                f"skills {what} must have shape ({stop - start}, R, N, K) with R = {n_runs}, "
                f"K = {k}, got {v.shape}"
            )
        if np.any(v < 0):
            raise InvalidValueError(f"skills must be >= 0 (sum-max rewards); min is {v.min():.3g}")
        return v

    if callable(skills):
        source = skills

        def fetch(start: int, stop: int) -> FloatArray:
            v = as_float_array(source(start, stop), "skills", ndim_min=4, ndim_max=4)
            return check(v, start, stop, f"({start}, {stop})")

        return fetch
    arr = as_float_array(skills, "skills", ndim_min=4, ndim_max=4)
    check(arr, 0, t_len, "array")

    def view(start: int, stop: int) -> FloatArray:
        return arr[start:stop]

    return view
