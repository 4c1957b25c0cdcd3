"""Sum-max rewards and the exact expected reward of a multinomial routing policy.

The reward of a routed subset ``A`` on skills ``V`` (N dimensions x K experts) is the sum-max
``r(A) = sum_n max_{i in A} V[n, i]`` (Section 1). A multinomial policy ``q`` draws M experts
i.i.d.; its expected reward ``Phi(q) = E[r(A)]`` (the paper's ``Phi^r``) has a closed form.
Sort one dimension's skills in decreasing order ``v(1) >= v(2) >= ... >= v(K)`` and let ``Q_j``
be the total probability of the top ``j`` experts. The routed maximum is at least ``v(j)``
exactly when some draw falls in the top ``j``, so with ``v(K+1) = 0``:

    Phi(q) = sum_n sum_j (v(j) - v(j+1)) * (1 - (1 - Q_j)^M)

which equals ``sum_j v(j) [(1 - Q_{j-1})^M - (1 - Q_j)^M]`` of docs/concepts.md. Each term is a
non-negative weight times a concave function of a linear map of ``q``: ``Phi`` is concave
(Lemma 6.7 of the paper's reference 37). Its gradient is, for the expert at rank ``r``,
``dPhi/dq = sum_{j >= r} (v(j) - v(j+1)) M (1 - Q_j)^(M-1)``. Both cost ``O(N K log K)``.

The paper estimates ``Phi`` with 200 Monte Carlo draws (Section 6.2);
``monte_carlo_reward`` keeps that estimator to reproduce its figure and to test the formula.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from msroute._seeding import RngSeed, as_generator
from msroute._validation import (
    FloatArray,
    IntArray,
    as_float_array,
    check_positive_int,
    check_simplex,
)
from msroute.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "batch_sum_max_reward",
    "context_scaled",
    "draw_counts",
    "draws_to_mask",
    "expected_reward",
    "expected_reward_grad",
    "monte_carlo_reward",
    "sum_max_reward",
]


def _check_skills(skills: ArrayLike) -> FloatArray:
    v = as_float_array(skills, "skills", ndim_min=2)
    if v.shape[-1] == 0 or v.shape[-2] == 0:
        raise InvalidValueError(
            f"skills must have at least one dimension and one expert, got shape {v.shape}"
        )
    if np.any(v < 0):
        raise InvalidValueError(
            f"skills must be >= 0 (the sum-max reward assumes it); min is {v.min():.3g}"
        )
    return v


def sum_max_reward(skills: ArrayLike, subset: ArrayLike) -> float:
    """Sum-max reward ``r(A) = sum_n max_{i in A} V[n, i]`` of one routed subset.

    Parameters
    ----------
    skills : array_like, shape (N, K)
    subset : array_like of int
        Expert indices; repeats are allowed (the M draws) and count once.

    Examples
    --------
    >>> round(sum_max_reward([[0.9, 0.1, 0.5], [0.2, 0.8, 0.3]], [0, 1, 1]), 12)
    1.7
    """
    v = _check_skills(skills)
    if v.ndim != 2:
        raise InvalidValueError(
            f"skills must have shape (N, K), got {v.shape}; see batch_sum_max_reward"
        )
    idx = np.asarray(subset)
    if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise InvalidValueError("subset must be a non-empty 1-d array of expert indices")
    k = v.shape[1]
    if idx.min() < 0 or idx.max() >= k:
        raise InvalidValueError(f"subset has indices outside [0, {k - 1}]: {idx.tolist()}")
    return float(v[:, idx].max(axis=1).sum())


def draw_counts(draws: IntArray, n_experts: int) -> FloatArray:
    """How often each expert was drawn: draws (R, M) -> counts (R, K) as floats."""
    r = draws.shape[0]
    if draws.shape == (1, 1) and 0 <= draws[0, 0] < n_experts:  # one run, one draw: one-hot
        out = np.zeros((1, n_experts))
        out[0, draws[0, 0]] = 1.0
        return out
    flat = draws.ravel() if r == 1 else (draws + (np.arange(r) * n_experts)[:, None]).ravel()
    return np.bincount(flat, minlength=r * n_experts).reshape(r, n_experts).astype(np.float64)


def draws_to_mask(draws: IntArray, n_experts: int) -> np.ndarray:
    """Membership mask (..., K) of the distinct experts among draws (..., M)."""
    rows = draws.reshape(-1, draws.shape[-1])
    mask = np.zeros((rows.shape[0], n_experts), dtype=bool)
    mask[np.arange(rows.shape[0])[:, None], rows] = True
    return mask.reshape(*draws.shape[:-1], n_experts)


def context_scaled(skills: FloatArray, weights: FloatArray, contexts: IntArray | int) -> FloatArray:
    """Skills (..., N, K) as scored in their contexts (...): context ``x`` weighs dimension ``n``
    by ``weights[x, n] >= 0`` (Section 5.2). Scaling a dimension scales its maximum exactly, so
    the sum-max reward of the scaled skills is the context's reward."""
    return np.asarray(skills * weights[contexts][..., None], dtype=np.float64)


def batch_sum_max_reward(skills: FloatArray, mask: np.ndarray) -> FloatArray:
    """Sum-max rewards of many subsets at once (a hot path: the values are not checked).

    Only the mask's type and width are checked, in constant time: an integer array (the
    draws' indices, or counts) would otherwise be read as weights on the skills and give a
    wrong reward without an error.

    Parameters
    ----------
    skills : ndarray, shape (..., N, K), entries >= 0
    mask : ndarray of bool, shape (..., K)
        Membership of each expert in the routed subset (non-empty per row); from draws,
        ``msroute.core.reward.draws_to_mask(draws, K)``.

    Returns
    -------
    ndarray, shape (...)

    Examples
    --------
    >>> batch_sum_max_reward(np.array([[[0.5, 0.2, 0.1]]]), np.array([[True, False, True]]))
    array([0.5])
    """
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        kind = mask.dtype if isinstance(mask, np.ndarray) else type(mask).__name__
        raise InvalidTypeError(
            f"mask must be a boolean array (..., K) of the routed experts, got {kind}; "
            "for draws (expert indices) use draws_to_mask(draws, K)"
        )
    if mask.ndim < 1 or mask.shape[-1] != np.shape(skills)[-1]:
        raise InvalidValueError(
            f"mask has shape {mask.shape}; its last axis must be the K = "
            f"{np.shape(skills)[-1]} experts of skills {np.shape(skills)}"
        )
    return np.asarray((skills * mask[..., None, :]).max(axis=-1).sum(axis=-1), dtype=np.float64)


def draws_sum_max_reward(
    skills: FloatArray, draws: IntArray, runs: IntArray | None = None
) -> FloatArray:
    """Sum-max rewards of each run's draws (the simulation hot path; no validation).

    The same floats as ``batch_sum_max_reward(skills, draws_to_mask(draws, K))`` for skills
    ``>= 0``: a dimension's maximum over the routed experts is the maximum of the masked row
    (whose other entries are 0), and a repeated draw changes no maximum; it reads ``R N M``
    skills instead of multiplying all ``R N K``.

    Parameters
    ----------
    skills : ndarray, shape (R, N, K), entries >= 0
        Or (R', N, K) with ``runs``.
    draws : ndarray of int, shape (R, M)
        Expert indices in ``[0, K)``.
    runs : ndarray of int, shape (R,), optional
        Run ``r`` reads the skills ``skills[runs[r]]`` (runs sharing a skill stream): the
        same floats as ``draws_sum_max_reward(skills[runs], draws)`` without copying every
        run's skills.

    Returns
    -------
    ndarray, shape (R,)
    """
    if runs is None:
        picked = np.take_along_axis(skills, draws[:, None, :], axis=-1)
    else:
        dims = np.arange(skills.shape[-2])[:, None]
        picked = skills[runs[:, None, None], dims, draws[:, None, :]]
    return np.asarray(picked.max(axis=-1).sum(axis=-1), dtype=np.float64)


class SortedRows:
    """Skill rows sorted once, for repeated exact evaluations of ``Phi``, its gradient and its
    Hessian (the oracle's objective, ``expected_reward_grad``).

    Row ``r`` (one dimension ``V[n, :]`` of one skill matrix) is scored against the policy of
    its group ``group[r]``; the function is ``F(q) = sum_r Phi_r(q[group[r]]) / divisor``, so
    that one group with ``divisor = T`` is the average ``(1/T) sum_t Phi_t(q)`` of eq. (3).
    Each row keeps its sort order and the gaps ``v(j) - v(j+1)`` (module docstring); rows are
    stored transposed, shape (K, rows), so that the running sums along the sorted experts are
    K vectorised row operations instead of one short scan per row. All-zero rows contribute
    nothing and are dropped.
    """

    def __init__(
        self,
        rows: FloatArray,
        m_draws: int,
        *,
        group: IntArray | None = None,
        n_groups: int = 1,
        divisor: float = 1.0,
    ) -> None:
        k = rows.shape[1]
        keep = rows.max(axis=1) > 0.0
        rows = rows[keep]
        order = np.argsort(-rows, axis=1, kind="stable")
        v_sorted = np.take_along_axis(rows, order, axis=1)
        gaps = np.empty_like(v_sorted)
        np.subtract(v_sorted[:, :-1], v_sorted[:, 1:], out=gaps[:, :-1])
        gaps[:, -1] = v_sorted[:, -1]
        gaps /= divisor
        self.k = k
        self.m = m_draws
        self.n_groups = n_groups
        self.order = np.ascontiguousarray(order.T)
        # Index of the policy entry of the expert at each rank, into q flattened (G, K).
        self.q_index = self.order if group is None else self.order + group[keep] * k
        self.q_index_flat = self.q_index.ravel()
        self.gaps = np.ascontiguousarray(gaps.T)
        self.total = float(self.gaps.sum())
        self._tail = np.empty_like(self.gaps)
        self._work = np.empty_like(self.gaps)
        self._rank: np.ndarray | None = None

    @classmethod
    def average(cls, skills: FloatArray, m_draws: int) -> SortedRows:
        """``F(q) = (1/T) sum_t Phi_t(q)`` of one policy over skills (T, N, K), eq. (3)."""
        t, n_dims, k = skills.shape
        return cls(skills.reshape(t * n_dims, k), m_draws, divisor=t)

    def _fill_tail(self, q: FloatArray) -> FloatArray:
        """``1 - Q_j`` of every row into the buffer ``_tail`` (K, rows), rank by rank."""
        tail = self._tail
        np.take(q, self.q_index, out=tail)  # q of the expert at each rank
        np.subtract(1.0, tail[0], out=tail[0])
        for j in range(1, self.k):
            np.subtract(tail[j - 1], tail[j], out=tail[j])
        np.maximum(tail, 0.0, out=tail)
        return tail

    def _reverse_cumsum_rows(self, work: FloatArray) -> None:
        for j in range(self.k - 2, -1, -1):  # the expert at rank r collects every j >= r
            np.add(work[j], work[j + 1], out=work[j])

    def value_and_grad(self, q: FloatArray) -> tuple[float, FloatArray]:
        """``F(q)`` and its exact gradient, of the shape of ``q``: (K,) or (G, K).

        The gradient is the closed form of the module docstring, summed per group.
        """
        m = self.m
        if self.gaps.shape[1] == 0:
            return 0.0, np.zeros(q.shape)
        tail, work = self._fill_tail(q), self._work
        _int_power(tail, m - 1, out=work)  # (1 - Q_j)^(M-1)
        np.multiply(tail, work, out=tail)  # (1 - Q_j)^M
        np.multiply(tail, self.gaps, out=tail)  # no BLAS dot: its threads stall on busy CPUs
        value = self.total - float(tail.sum())
        np.multiply(work, self.gaps, out=work)
        np.multiply(work, float(m), out=work)  # per-rank terms of the gradient
        self._reverse_cumsum_rows(work)
        grad = np.bincount(
            self.q_index_flat, weights=work.ravel(), minlength=self.n_groups * self.k
        )
        return value, np.asarray(grad, dtype=np.float64).reshape(q.shape)

    def hessian(self, q: FloatArray, idx: np.ndarray) -> FloatArray:
        """Exact Hessian of ``F`` restricted to the experts ``idx``, shape (f, f); one group.

        ``d2 Phi / dq_a dq_b = -sum_{j >= max(r_a, r_b)} (v(j) - v(j+1)) M (M-1) (1-Q_j)^(M-2)``
        per row; the inner sum ``S(r)`` is non-increasing in the rank ``r``, so the entry is
        ``-min(S(r_a), S(r_b))``. Negative semi-definite (``F`` is concave).
        """
        k, m, f = self.k, self.m, idx.shape[0]
        if m == 1 or self.gaps.shape[1] == 0 or f == 0:
            return np.zeros((f, f))
        if self._rank is None:
            rank = np.empty_like(self.order)
            np.put_along_axis(
                rank, self.order, np.broadcast_to(np.arange(k)[:, None], rank.shape), axis=0
            )
            self._rank = rank
        tail, work = self._fill_tail(q), self._work
        _int_power(tail, m - 2, out=work)
        np.multiply(work, self.gaps, out=work)
        np.multiply(work, float(m * (m - 1)), out=work)
        self._reverse_cumsum_rows(work)  # S(r) per row
        s_idx = np.take_along_axis(work, self._rank[idx], axis=0)  # (f, rows)
        hess = np.empty((f, f))
        buf = np.empty_like(s_idx)
        for a in range(f):
            np.minimum(s_idx[a][None, :], s_idx, out=buf)
            hess[a] = -buf.sum(axis=1)
        return hess


#: Up to this M the closed form raises to the M-th power by repeated products (beyond, pow).
_LOOP_POWER_MAX = 64


def _int_power(x: FloatArray, p: int, out: FloatArray) -> FloatArray:
    """``out = x ** p`` for an integer ``p >= 0`` (repeated products are faster than pow)."""
    if p == 0:
        out.fill(1.0)
    elif p <= 8:
        np.copyto(out, x)
        for _ in range(p - 1):
            np.multiply(out, x, out=out)
    else:
        np.power(x, float(p), out=out)
    return out


def expected_reward_core(q: FloatArray, v: FloatArray, m: int) -> FloatArray:
    """``Phi(q)`` for q (c, R, K) against skills v (c, R, N, K) -> (c, R), unchecked: the closed
    form of the module docstring, sorted by packed integer keys instead of an argsort.

    A non-negative float's bit pattern, read as an int64, orders like the float; its lowest
    ``b`` bits (``2^b >= K``) are replaced by the expert index and the keys sorted in place,
    several times faster than ``argsort``. The skills themselves are then gathered exactly.
    Two skills equal to within ``2^(b-52)`` relative may come out in either order, which
    changes ``Phi`` by at most their difference (rounding level). In ascending order, with
    ``u_1 <= ... <= u_K`` and ``B_i`` the mass of ``q`` strictly below position ``i``,
    ``Phi = sum_n sum_i (u_i - u_{i-1}) (1 - B_i^M)``. Rounds are processed in blocks of
    about 2^17 entries so that the temporaries stay in cache.
    """
    c, n_runs, n_dims, k = v.shape
    bits = max(1, (k - 1).bit_length())
    low = np.int64((1 << bits) - 1)
    experts = np.arange(k, dtype=np.int64)
    out = np.empty((c, n_runs))
    step = max(1, (1 << 17) // (n_runs * n_dims * k))
    for a in range(0, c, step):
        b = min(a + step, c)
        vb = np.ascontiguousarray(v[a:b]).reshape(-1, k)  # rows (round, run, dim)
        qb = np.ascontiguousarray(np.broadcast_to(q[a:b], (b - a, n_runs, k))).reshape(-1)
        rows = vb.shape[0]
        keys = vb.view(np.int64) & ~low
        keys |= experts
        keys.sort(axis=-1)
        keys &= low  # expert at each ascending position
        qidx = keys + (np.arange(rows, dtype=np.int64) // n_dims * k)[:, None]
        keys += (np.arange(rows, dtype=np.int64) * k)[:, None]
        u = np.take(vb.reshape(-1), keys)
        qs = np.take(qb, qidx)
        below = np.cumsum(qs, axis=-1)
        below -= qs
        np.clip(below, 0.0, 1.0, out=below)
        if m <= _LOOP_POWER_MAX:  # repeated products: the floats every table was made with
            power = below.copy()
            for _ in range(m - 1):
                power *= below
        else:  # a large M: pow, not M products
            power = np.power(below, float(m))
        du = np.empty_like(u)
        du[:, 0] = u[:, 0]
        np.subtract(u[:, 1:], u[:, :-1], out=du[:, 1:])
        power *= du
        per_row = du.sum(axis=-1) - power.sum(axis=-1)
        out[a:b] = per_row.reshape(b - a, n_runs, n_dims).sum(axis=-1)
    return out


def _check_pair(
    q: ArrayLike, skills: ArrayLike, m_draws: int
) -> tuple[FloatArray, FloatArray, int]:
    qa = as_float_array(q, "q", ndim_min=1)
    v = _check_skills(skills)
    m = check_positive_int(m_draws, "m_draws")
    if qa.shape[-1] != v.shape[-1]:
        hint = ""
        if v.shape[-2] == qa.shape[-1]:
            hint = "; skills look transposed: they must be (dimensions, experts), so pass skills.T"
        raise InvalidValueError(
            f"q has {qa.shape[-1]} experts on its last axis but skills has {v.shape[-1]}{hint}"
        )
    check_simplex(qa)
    try:
        np.broadcast_shapes(qa.shape[:-1], v.shape[:-2])
    except ValueError as exc:
        raise InvalidValueError(
            f"leading axes of q {qa.shape[:-1]} and skills {v.shape[:-2]} do not broadcast"
        ) from exc
    return qa, v, m


def expected_reward(q: ArrayLike, skills: ArrayLike, m_draws: int) -> FloatArray:
    """Exact expected sum-max reward ``Phi(q)`` of drawing M experts i.i.d. from ``q``.

    Implements the closed form in the module docstring (the exact value of what the paper's
    Section 6.2 estimates with 200 Monte Carlo draws).

    Parameters
    ----------
    q : array_like, shape (..., K)
        Routing policies on the simplex.
    skills : array_like, shape (..., N, K)
        Skill matrices; leading axes broadcast against those of ``q`` (runs, rounds, ...).
    m_draws : int
        M, the number of draws.

    Returns
    -------
    ndarray, shape (broadcast of the leading axes)
        A 0-d array for one policy and one skill matrix.

    Examples
    --------
    >>> float(expected_reward([0.5, 0.5], [[1.0, 0.0]], m_draws=2))
    0.75
    """
    qa, v, m = _check_pair(q, skills, m_draws)
    lead = np.broadcast_shapes(qa.shape[:-1], v.shape[:-2])
    n_dims, k = v.shape[-2:]
    size = int(np.prod(lead, dtype=np.int64))
    q_flat = np.broadcast_to(qa, (*lead, k)).reshape(size, 1, k)
    v_flat = np.broadcast_to(v, (*lead, n_dims, k)).reshape(size, 1, n_dims, k)
    return expected_reward_core(q_flat, v_flat, m).reshape(lead)


def expected_reward_grad(q: ArrayLike, skills: ArrayLike, m_draws: int) -> FloatArray:
    """Exact gradient of ``expected_reward`` with respect to ``q``.

    This is the gradient of the closed form above. The paper's estimator ``r(A) count_i / q_i``
    (Lemma 6.7 of its reference 37) is unbiased for the gradient of another extension of
    ``Phi`` off the simplex, the degree-M polynomial ``E[r(A)]``; the two agree on the simplex,
    so their gradients differ by a multiple of the all-ones vector. Only the differences
    ``g_i - g_j`` are intrinsic, and the projection step (6) ignores such a shift.

    Returns
    -------
    ndarray, shape (broadcast leading axes..., K)
    """
    qa, v, m = _check_pair(q, skills, m_draws)
    lead = np.broadcast_shapes(qa.shape[:-1], v.shape[:-2])
    n_dims, k = v.shape[-2:]
    size = int(np.prod(lead, dtype=np.int64))
    rows = np.broadcast_to(v, (*lead, n_dims, k)).reshape(size * n_dims, k)
    group = np.repeat(np.arange(size, dtype=np.int64), n_dims)
    q_flat = np.ascontiguousarray(np.broadcast_to(qa, (*lead, k))).reshape(size, k)
    _, grad = SortedRows(rows, m, group=group, n_groups=size).value_and_grad(q_flat)
    return grad.reshape(*lead, k)


def monte_carlo_reward(
    q: ArrayLike,
    skills: ArrayLike,
    m_draws: int,
    n_samples: int = 200,
    seed: RngSeed = None,
) -> tuple[FloatArray, FloatArray]:
    """Monte Carlo estimate of ``Phi(q)`` with its standard error (the paper's 200 draws).

    Parameters
    ----------
    q : array_like, shape (..., K)
    skills : array_like, shape (..., N, K)
    m_draws : int
    n_samples : int, default 200
        Number of sampled teams per skill matrix.
    seed : int, SeedSequence or Generator, optional
        Randomness of the estimate (never the caller's decision stream).

    Returns
    -------
    mean, stderr : ndarray, shape (broadcast leading axes)
    """
    qa, v, m = _check_pair(q, skills, m_draws)
    n = check_positive_int(n_samples, "n_samples")
    rng = as_generator(seed)
    lead = np.broadcast_shapes(qa.shape[:-1], v.shape[:-2])
    k = qa.shape[-1]
    cdf = np.cumsum(np.broadcast_to(qa, (*lead, k)), axis=-1)
    cdf[..., -1] = 1.0
    u = rng.random((*lead, n, m))
    draws = np.minimum((u[..., None] >= cdf[..., None, None, :]).sum(axis=-1), k - 1)
    mask = draws_to_mask(draws, k)
    v_b = np.broadcast_to(v, (*lead, *v.shape[-2:]))
    rewards = batch_sum_max_reward(v_b[..., None, :, :], mask)
    mean = rewards.mean(axis=-1)
    stderr = rewards.std(axis=-1, ddof=1) / np.sqrt(n) if n > 1 else np.full_like(mean, np.inf)
    return np.asarray(mean, dtype=np.float64), np.asarray(stderr, dtype=np.float64)
