"""The fits of OMD's model gradient estimator (``msroute.policies.omd_variants``, "model").

A reward model ``rhat(A) = beta_0 + sum_{i in A} beta_i`` fitted by ridge least squares to the
rewards seen so far, per run and context, whose exact gradient is the control variate of the
estimate (the module docstring of ``msroute.policies.omd_variants`` derives it). Two fits:
``ModelGradient`` (a dense (K + 1)^2 Gram matrix, solved exactly) and ``SparseModelGradient``
(co-occurrence counts solved by conjugate gradient). Either may also take a prior on the
experts' coefficients at a refit: ``weight`` pseudo-rounds of each expert alone at reward
``mean`` (a warm start's eval table, ``msroute.policies.warm``), added to the fit's statistics
at the solve only, so the counts stay counts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from msroute._validation import FloatArray, IntArray
from msroute.errors import InvalidStateError, InvalidValueError
from msroute.policies._gesv import solver

__all__ = ["ModelGradient", "Prior", "SparseModelGradient"]

#: A prior on the experts' coefficients of some cells: (weight, mean), each (R', K).
Prior = tuple[FloatArray, FloatArray]


class _AdditiveModel(ABC):
    """What the two fits of the model estimator share: the coefficients, the moment vector and
    the estimate (see the module docstring); a subclass keeps the Gram matrix and solves it."""

    uses_baseline: ClassVar[bool] = False

    def __init__(
        self,
        n_runs: int,
        n_contexts: int,
        n_experts: int,
        m_draws: int,
        ix: float,
        ridge: float = 1.0,
    ) -> None:
        p = n_experts + 1
        self.m_draws = m_draws
        self.ix = ix
        self.ridge = ridge
        self.n_contexts = n_contexts
        self.moment: FloatArray = np.zeros((n_runs, n_contexts, p))
        self.coef: FloatArray = np.zeros((n_runs, n_contexts, p))
        # (q, M (1 - q)^(M-1)) of the last q played: derived, not learned state.
        self._slope_at: tuple[FloatArray, FloatArray] | None = None
        self._unit_slope: FloatArray = np.ones((0, n_experts))  # M = 1: derived, not state

    def estimate(
        self,
        rows: IntArray,
        ctx: IntArray,
        q: FloatArray,
        draws: IntArray,
        counts: FloatArray,
        reward: FloatArray,
        baseline: FloatArray | None,
        damp: FloatArray | None = None,
    ) -> FloatArray:
        """See ``GradientEstimator``; ``baseline`` is not used (the model's intercept is
        the baseline). The (run, context) pairs of ``rows, ctx`` are distinct (one decision)."""
        if rows.size == 1 and self.m_draws == 1:
            drawn = int(draws[0, 0])
            factor = 1.0 if damp is None else float(damp[0, drawn])
            return self._estimate_one(int(rows[0]), int(ctx[0]), q, drawn, reward, factor)
        return self._estimate_rows(rows, ctx, q, draws, counts, reward, baseline, damp)

    def _estimate_rows(
        self,
        rows: IntArray,
        ctx: IntArray,
        q: FloatArray,
        draws: IntArray,
        counts: FloatArray,
        reward: FloatArray,
        baseline: FloatArray | None = None,
        damp: FloatArray | None = None,
    ) -> FloatArray:
        """``estimate`` of a batch, in numpy (``baseline``: not used)."""
        coef = self.coef[rows, ctx]
        x = np.empty_like(coef)
        x[:, 0] = 1.0
        x[:, 1:] = counts > 0
        predicted = np.einsum("rp,rp->r", coef, x)
        model_grad = coef[:, 1:] * self._slope(q)
        # The residual term is 0 off the drawn entries: compute it at the draws only (a
        # repeated draw computes and writes the same value again).
        at = draws + (np.arange(0, counts.size, counts.shape[1]))[:, None]  # flat (R, K) indices
        weighted = np.zeros(counts.shape)
        weighted.reshape(-1)[at] = (
            (reward - predicted)[:, None] * counts.take(at) / (q.take(at) + self.ix)
        )
        if damp is not None:
            weighted.reshape(-1)[at] *= damp.take(at)
        idx = np.empty((draws.shape[0], draws.shape[1] + 1), dtype=np.int64)
        idx[:, 0] = 0
        np.add(draws, 1, out=idx[:, 1:])
        self._accumulate(rows, ctx, idx, reward)
        return np.asarray(model_grad + weighted, dtype=np.float64)

    def _estimate_one(
        self, run: int, ctx: int, q: FloatArray, drawn: int, reward: FloatArray, damp: float
    ) -> FloatArray:
        """``estimate`` of one run with one draw (a live router's round at M = 1), in Python
        floats: the same floats as the batched form.

        With ``x = (1, e_a)`` the model's prediction has two nonzero terms, so every order of
        the batched form's sum gives ``fl(beta_0 + beta_a)``; the slope is 1, the count 1, and
        the batched form's additions of 0.0 are kept (``-0.0 + 0.0`` is ``+0.0``)."""
        coef: FloatArray = self.coef[run, ctx]
        c_a = float(coef[drawn + 1])
        predicted = float(coef[0]) + c_a
        out: FloatArray = coef[1:] + 0.0
        residual = (float(reward[0]) - predicted) * 1.0 / (float(q[0, drawn]) + self.ix)
        out[drawn] = c_a * 1.0 + (residual if damp == 1.0 else residual * damp)
        self._accumulate_one(run * self.n_contexts + ctx, drawn + 1, float(reward[0]))
        return out[None, :]

    def _accumulate_one(self, cell: int, feature: int, reward: float) -> None:
        """``_accumulate`` of one round whose features are the intercept and ``feature``."""
        idx = np.array([[0, feature]], dtype=np.int64)
        run, ctx = divmod(cell, self.n_contexts)
        self._accumulate(np.array([run]), np.array([ctx]), idx, np.array([reward]))

    def _slope(self, q: FloatArray) -> FloatArray:
        """``M (1 - q)^(M-1)`` (R, K), the gradient of each expert's hit probability.

        ``q`` moves only at QP steps, so the last value is kept and reused while the played
        ``q`` is the same (the same floats: the power is the costliest piece of a round). With
        M = 1 the slope is 1 whatever ``q`` (``(1 - q)^0``), so one array of ones serves."""
        if self.m_draws == 1:
            if self._unit_slope.shape != q.shape:
                self._unit_slope = np.ones(q.shape)
            return self._unit_slope
        if self._slope_at is None or not np.array_equal(q, self._slope_at[0]):
            m = self.m_draws
            self._slope_at = (q.copy(), m * (1.0 - q) ** (m - 1))
        return self._slope_at[1]

    def _add_moment(self, at: IntArray, reward: FloatArray) -> None:
        """``moment += reward x`` at the flat indices ``at`` (R, n) of each run's features in
        the moment array (``cell (K + 1) + feature``, distinct cells).

        A feature repeated in a row of ``at`` (a repeated draw) is written once by a
        fancy-indexed add (every copy holds the same sum), so no mask is needed."""
        self.moment.reshape(-1)[at] += reward[:, None]

    def _check_pairs(self, prefix: str, name: str, keys: IntArray, counts: FloatArray) -> None:
        """Check co-occurrence counts as the fit makes them (for ``validate_state``).

        ``keys`` encode ``(cell, i, j)`` as ``(cell (K + 1) + i) (K + 1) + j`` (the flat index
        into a (cells, K + 1, K + 1) Gram array). The rules: keys increase strictly and lie
        in range, counts are >= 1, the pairs are symmetric, each feature of a pair has its
        diagonal entry and its entry with the intercept, both counting the rounds that had
        it, a pair counts at most as many rounds as each of its features, a feature at most
        as many as the intercept, and the moment is 0 at a feature never seen.
        """
        p = self.coef.shape[-1]
        cells = self.coef.shape[0] * self.coef.shape[1]
        entry = f"state entry {prefix + name!r}"
        if keys.size and (keys[0] < 0 or keys[-1] >= cells * p * p or np.any(np.diff(keys) <= 0)):
            raise InvalidStateError(f"{entry}: pair keys must increase in [0, {cells * p * p})")
        if counts.size and counts.min() < 1:
            raise InvalidStateError(f"{entry}: co-occurrence counts must be >= 1")
        cell, pair = np.divmod(keys, p * p)
        i, j = np.divmod(pair, p)
        base = cell * (p * p)
        mirror = base + j * p + i
        order = np.argsort(mirror)
        if not (np.array_equal(mirror[order], keys) and np.array_equal(counts[order], counts)):
            raise InvalidStateError(f"{entry}: the co-occurrence counts are not symmetric")

        def count_at(at: IntArray) -> FloatArray:
            if not at.size:
                return counts[:0]
            pos = np.minimum(np.searchsorted(keys, at), max(keys.size - 1, 0))
            if not np.array_equal(keys[pos], at):
                raise InvalidStateError(
                    f"{entry}: a feature of a pair lacks its diagonal entry or its entry with "
                    "the intercept"
                )
            return counts[pos]

        feature, with_intercept = count_at(base + j * (p + 1)), count_at(base + j)
        rounds = count_at(base)
        if not np.array_equal(with_intercept, feature) or np.any(counts > feature):
            raise InvalidStateError(
                f"{entry}: a pair counts more rounds than one of its features, or a feature's "
                "count with the intercept is not its own count"
            )
        if np.any(feature > rounds):
            raise InvalidStateError(f"{entry}: a feature counts more rounds than the intercept")
        seen = np.zeros(cells * p, dtype=bool)
        seen[cell * p + j] = True
        if np.any(self.moment.reshape(-1)[~seen] != 0.0):
            raise InvalidStateError(
                f"state entry {prefix + 'moment'!r} is nonzero at a feature never seen"
            )

    @abstractmethod
    def validate_state(self, prefix: str) -> None:
        """Check the fit's statistics (``msroute.policies.check_state``; ``prefix``: the
        dotted name of this component in the policy's state)."""

    @abstractmethod
    def _accumulate(self, rows: IntArray, ctx: IntArray, idx: IntArray, reward: FloatArray) -> None:
        """Add the round's ``x x^T`` to the Gram matrix and ``reward x`` to the moment.

        ``idx`` (R, M + 1) holds the indices of ``x``'s nonzero features: the intercept (0)
        first, then each draw's expert + 1, repeated where a draw is."""

    @abstractmethod
    def refit(self, runs: IntArray, ctx: IntArray, prior: Prior | None = None) -> None:
        """See ``GradientEstimator``."""


class ModelGradient(_AdditiveModel):
    """Control variate from a fitted additive reward model (see the module docstring), with
    the dense exact fit: a (K + 1)^2 Gram matrix per run and context, solved exactly.

    Parameters
    ----------
    n_runs, n_contexts, n_experts, m_draws : int
    ix : float
        Implicit-exploration offset of the residual's importance weights (>= 0; 0: unbiased).
    ridge : float, default 1.0
        Ridge of the least-squares fit (the Gram matrix starts at ``ridge * I``).
    """

    #: The fit's sufficient statistics and coefficients (persistence).
    _state_attrs: ClassVar[tuple[str, ...]] = ("gram", "moment", "coef")

    def __init__(
        self,
        n_runs: int,
        n_contexts: int,
        n_experts: int,
        m_draws: int,
        ix: float,
        ridge: float = 1.0,
    ) -> None:
        super().__init__(n_runs, n_contexts, n_experts, m_draws, ix, ridge)
        p = n_experts + 1
        self.gram: FloatArray = np.broadcast_to(
            ridge * np.eye(p), (n_runs, n_contexts, p, p)
        ).copy()

    def _accumulate(self, rows: IntArray, ctx: IntArray, idx: IntArray, reward: FloatArray) -> None:
        """``gram += x x^T`` and ``moment += reward x`` at ``rows, ctx`` for the round's
        features ``x = (1, counts > 0)``.

        ``x`` is 0/1, so the dense updates add ``1.0`` (resp. ``reward``) at the intercept and
        the routed experts and ``0.0`` elsewhere, which leaves an entry as it is. Updating only
        the nonzero features (``idx``) gives the same floats at a fraction of the cost: at most
        ``(M + 1)^2`` Gram entries per run instead of ``(K + 1)^2``.
        """
        p = self.coef.shape[-1]
        cell = rows * self.n_contexts + ctx  # the (run, context) pair
        if not (self.gram.flags.c_contiguous and self.moment.flags.c_contiguous):
            self.gram = np.ascontiguousarray(self.gram)  # e.g. a loaded state: the views
            self.moment = np.ascontiguousarray(self.moment)  # below must alias the arrays
        from msroute.policies._compiled.gram import add_rounds  # numba, on first use

        add_rounds(
            self.gram.reshape(-1, p, p),
            self.moment.reshape(-1, p),
            cell.astype(np.int64, copy=False),
            idx,
            np.asarray(reward, dtype=np.float64),
        )

    def _accumulate_one(self, cell: int, feature: int, reward: float) -> None:
        """``_accumulate`` of one round with the features 0 and ``feature``, entry by entry."""
        if not (self.gram.flags.c_contiguous and self.moment.flags.c_contiguous):
            super()._accumulate_one(cell, feature, reward)
            return
        p = self.coef.shape[-1]
        gram, moment = self.gram.reshape(-1, p, p)[cell], self.moment.reshape(-1, p)[cell]
        gram[0, 0] += 1.0
        gram[0, feature] += 1.0
        gram[feature, 0] += 1.0
        gram[feature, feature] += 1.0
        moment[0] += reward
        moment[feature] += reward

    def validate_state(self, prefix: str) -> None:
        """See ``_AdditiveModel._check_pairs``: ``gram - ridge I`` holds the counts."""
        p = self.coef.shape[-1]
        counts = (self.gram - self.ridge * np.eye(p)).reshape(-1)
        keys = np.flatnonzero(counts)
        if np.any(counts[keys] != np.round(counts[keys])):
            raise InvalidStateError(
                f"state entry {prefix + 'gram'!r}: gram - ridge * I must hold integer counts"
            )
        self._check_pairs(prefix, "gram", keys, counts[keys])

    def refit(self, runs: IntArray, ctx: IntArray, prior: Prior | None = None) -> None:
        """Least squares on every round so far (the ridge keeps the Gram matrix invertible),
        with ``prior``'s pseudo-rounds of each expert alone added where given.

        When every run refits in one context (a batch in step), the cells are a view: the
        solve reads the Gram matrices in place instead of a gathered copy (the same floats).
        The solver copies each matrix into column-major order; a Gram matrix is symmetric
        (its transpose is itself, entry for entry), so it is handed over transposed, whose
        columns are contiguous rows: a cheaper copy of the same matrix. One cell without a
        prior (a live router's QP step) goes to ``refit_one``."""
        if prior is None and runs.size == 1 and self.refit_one(int(runs[0]), int(ctx[0])):
            return
        every = runs.size == self.coef.shape[0] and bool(
            np.array_equal(runs, np.arange(runs.size)) and np.all(ctx == ctx[0])
        )
        at = (slice(None), int(ctx[0])) if every else (runs, ctx)
        gram = np.swapaxes(self.gram[at], 1, 2)
        moment = self.moment[at][:, :, None]
        if prior is not None:
            gram, moment = _with_prior(gram, moment[:, :, 0], prior)
        self.coef[at] = np.linalg.solve(gram, moment)[:, :, 0]

    def refit_one(self, run: int, ctx: int) -> bool:
        """``refit`` of the cell ``(run, ctx)`` without a prior by the LAPACK routine numpy's
        solve calls, called directly (``msroute.policies._gesv``): the same floats without
        numpy's fixed cost a call. False, with nothing changed, where the direct call is not
        numpy's or does not settle the system (a singular or overflowing one): ``refit``
        then asks numpy, which raises or answers as it does."""
        solve = solver(self.coef.shape[-1])
        return solve is not None and solve(
            self.gram[run, ctx], self.moment[run, ctx], self.coef[run, ctx]
        )


class SparseModelGradient(_AdditiveModel):
    """The model estimator of ``ModelGradient`` with a fit that scales in K.

    The Gram matrix ``ridge I + sum_t x_t x_t^T`` is kept as the co-occurrence counts of the
    features (intercept and routed experts) of each round, one entry per pair seen: at most
    ``min((K + 1)^2, T (M + 1)^2)`` per run and context, never a (K + 1)^2 array. An expert
    never routed has a zero moment and no off-diagonal entry, so its coefficient is 0; the
    others are solved by a Jacobi-preconditioned conjugate gradient on the routed experts only,
    warm-started from the previous coefficients, to a relative residual of ``rtol`` (at most
    ``max_iter`` iterations). Its limit is the same least-squares solution as the dense fit's;
    where it stops short the estimate stays unbiased (module docstring), since the
    coefficients still depend on earlier rounds only.

    Parameters
    ----------
    n_runs, n_contexts, n_experts, m_draws, ix, ridge
        As in ``ModelGradient``.
    rtol : float, default 1e-8
        Relative residual ``|G beta - moment| / |moment|`` at which a refit stops.
    max_iter : int, default 100
        Conjugate-gradient iterations per refit at most (the next refit continues from there).

    Attributes
    ----------
    pair_key : ndarray of int64, shape (n,)
        The pairs seen, increasing: ``(cell (K + 1) + i) (K + 1) + j`` for features ``i, j``
        of the (run, context) cell ``cell = run X + context`` (both orders of a pair).
    pair_count : ndarray of int64, shape (n,)
        In how many rounds of its cell each pair occurred together (> 0).
    """

    #: The fit's sufficient statistics and coefficients (persistence).
    _state_attrs: ClassVar[tuple[str, ...]] = ("pair_key", "pair_count", "moment", "coef")
    #: State arrays whose length grows with the pairs seen (persistence).
    _variable_attrs: ClassVar[tuple[str, ...]] = ("pair_key", "pair_count")

    def __init__(
        self,
        n_runs: int,
        n_contexts: int,
        n_experts: int,
        m_draws: int,
        ix: float,
        ridge: float = 1.0,
        rtol: float = 1e-8,
        max_iter: int = 100,
    ) -> None:
        super().__init__(n_runs, n_contexts, n_experts, m_draws, ix, ridge)
        p = n_experts + 1
        if n_runs * n_contexts * p * p >= 2**63:
            raise InvalidValueError(
                f"n_runs * n_contexts * (K + 1)^2 == {n_runs * n_contexts * p * p}: the "
                "model's sparse fit keys its pairs by int64, must be < 2^63"
            )
        self.rtol = rtol
        self.max_iter = max_iter
        self.pair_key: IntArray = np.zeros(0, dtype=np.int64)
        self.pair_count: IntArray = np.zeros(0, dtype=np.int64)

    def _accumulate(self, rows: IntArray, ctx: IntArray, idx: IntArray, reward: FloatArray) -> None:
        """One more co-occurrence for every pair of the round's nonzero features, and
        ``moment += reward x`` (as ``ModelGradient``, the same floats)."""
        p = self.coef.shape[-1]
        cell = rows * self.n_contexts + ctx
        self._add_moment((cell * p)[:, None] + idx, reward)
        # A feature counts at its first place in its row only (a repeated draw repeats it).
        real = ~np.tril(idx[:, :, None] == idx[:, None, :], -1).any(axis=2)
        keys = ((cell * p)[:, None, None] + idx[:, :, None]) * p + idx[:, None, :]
        new = np.sort(keys[real[:, :, None] & real[:, None, :]])  # distinct
        at = np.searchsorted(self.pair_key, new)
        seen = at < self.pair_key.size
        seen[seen] = self.pair_key[at[seen]] == new[seen]
        self.pair_count[at[seen]] += 1
        fresh = ~seen
        if fresh.any():
            self.pair_key = np.insert(self.pair_key, at[fresh], new[fresh])
            self.pair_count = np.insert(self.pair_count, at[fresh], 1)

    def validate_state(self, prefix: str) -> None:
        """See ``_AdditiveModel._check_pairs``."""
        if self.pair_key.shape != self.pair_count.shape:
            raise InvalidStateError(
                f"state entries {prefix + 'pair_key'!r} and {prefix + 'pair_count'!r} must have "
                f"the same length, got {self.pair_key.size} and {self.pair_count.size}"
            )
        self._check_pairs(prefix, "pair_key", self.pair_key, self.pair_count.astype(np.float64))

    def refit(self, runs: IntArray, ctx: IntArray, prior: Prior | None = None) -> None:
        """Least squares on every round so far, by preconditioned conjugate gradient, with
        ``prior``'s pseudo-rounds of each expert alone added where given."""
        for i, (run, c) in enumerate(zip(runs.tolist(), ctx.tolist(), strict=True)):
            self._refit_cell(run, c, None if prior is None else (prior[0][i], prior[1][i]))

    def _cell_pairs(self, cell: int) -> tuple[IntArray, IntArray, IntArray]:
        """The pairs of one (run, context) cell: features ``i``, ``j`` and counts."""
        p = self.coef.shape[-1]
        lo, hi = np.searchsorted(self.pair_key, [cell * p * p, (cell + 1) * p * p])
        feat_i, feat_j = np.divmod(self.pair_key[lo:hi] - cell * p * p, p)
        return feat_i, feat_j, self.pair_count[lo:hi]

    def _refit_cell(self, run: int, c: int, prior: Prior | None = None) -> None:
        feat_i, feat_j, count = self._cell_pairs(run * self.n_contexts + c)
        active = feat_j[: np.searchsorted(feat_i, 1)]  # the intercept's row: every feature
        if prior is not None:
            self._refit_with_prior(run, c, feat_i, feat_j, count, prior)
            return
        if not active.size:
            return  # no round yet: the coefficients are still 0
        rows, cols, weights, counts = _pair_counts(
            feat_i, feat_j, count, active, self.coef.shape[-1]
        )
        ridge = self.ridge

        def gram_times(v: FloatArray) -> FloatArray:
            return np.asarray(ridge * v + counts @ v, dtype=np.float64)

        coef = self.coef[run, c]
        diag = ridge + weights[rows == cols]  # one diagonal entry per feature, in order
        coef[active] = _pcg(
            gram_times, self.moment[run, c, active], coef[active], diag, self.rtol, self.max_iter
        )

    def _refit_with_prior(
        self,
        run: int,
        c: int,
        feat_i: IntArray,
        feat_j: IntArray,
        count: IntArray,
        prior: Prior,
    ) -> None:
        """``_refit_cell`` with pseudo-rounds: the prior's experts join the solve (an expert of
        the prior never routed has no pair: its row is its prior alone)."""
        p = self.coef.shape[-1]
        weight, mean = np.zeros(p), np.zeros(p)
        weight[1:], mean[1:] = prior
        seen = feat_j[: np.searchsorted(feat_i, 1)]
        active = np.union1d(seen, np.flatnonzero(weight))
        if not active.size:
            return
        rows, cols, weights, counts = _pair_counts(feat_i, feat_j, count, active, p)
        extra = self.ridge + weight[active]

        def gram_times(v: FloatArray) -> FloatArray:
            return np.asarray(extra * v + counts @ v, dtype=np.float64)

        diag = extra.copy()
        on_diag = rows == cols
        diag[rows[on_diag]] += weights[on_diag]
        rhs = self.moment[run, c, active] + (weight * mean)[active]
        coef = self.coef[run, c]
        coef[active] = _pcg(gram_times, rhs, coef[active], diag, self.rtol, self.max_iter)


def _pair_counts(
    feat_i: IntArray, feat_j: IntArray, count: IntArray, active: IntArray, p: int
) -> tuple[IntArray, IntArray, FloatArray, Any]:
    """A cell's co-occurrence counts (``SparseModelGradient._cell_pairs``) as a sparse matrix
    on the features ``active`` (increasing, ``p`` features in all): each pair's row and column
    among ``active``, its count as a float, and the (A, A) CSR matrix they make."""
    from scipy.sparse import csr_array  # scipy loads with OMD's feasibility LP anyway

    where = np.zeros(p, dtype=np.int64)
    where[active] = np.arange(active.size)
    rows, cols = where[feat_i], where[feat_j]  # increasing rows, increasing cols in a row
    weights = count.astype(np.float64)
    starts = np.searchsorted(rows, np.arange(active.size + 1))
    counts = csr_array((weights, cols, starts), shape=(active.size, active.size))
    return rows, cols, weights, counts


def _with_prior(
    gram: FloatArray, moment: FloatArray, prior: Prior
) -> tuple[FloatArray, FloatArray]:
    """Gram matrices (R', P, P) and moments (R', P) with ``weight`` pseudo-rounds of each expert
    alone at reward ``mean`` added to the experts' diagonal and moments (the intercept gets no
    prior): returned as new arrays, (R', P, P) and (R', P, 1)."""
    weight, mean = prior
    idx = np.arange(1, gram.shape[-1])
    out = np.array(gram)
    out[:, idx, idx] += weight
    rhs = np.array(moment)
    rhs[:, 1:] += weight * mean
    return out, rhs[:, :, None]


def _pcg(
    matvec: Callable[[FloatArray], FloatArray],
    rhs: FloatArray,
    start: FloatArray,
    diag: FloatArray,
    rtol: float,
    max_iter: int,
) -> FloatArray:
    """Jacobi-preconditioned conjugate gradient for ``A x = rhs`` (A symmetric positive
    definite, ``diag`` its diagonal) from ``start``, until ``|A x - rhs| <= rtol |rhs|`` or
    ``max_iter`` iterations."""
    x = start.copy()
    r = rhs - matvec(x)
    stop = rtol * float(np.linalg.norm(rhs))
    z = r / diag
    d = z.copy()
    rz = float(r @ z)
    for _ in range(max_iter):
        if float(np.linalg.norm(r)) <= stop:
            break
        ad = matvec(d)
        step = rz / float(d @ ad)
        x += step * d
        r -= step * ad
        z = r / diag
        rz, rz_old = float(r @ z), rz
        d = z + (rz / rz_old) * d
    return x
