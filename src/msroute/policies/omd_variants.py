"""The composable pieces of OMD-Approachability's primal step, and its named variants.

Algorithm 1's primal player needs two things a variant may choose:

* a **gradient estimator**: each round, an estimate ``g_t`` of the gradient of the expected
  reward ``Phi_t`` at the played ``q_t`` from bandit feedback only (step g);
* a **floor schedule**: the exploration floor of each QP step (6).

Everything else (the approachability dual and the cut(s) of every QP step, the batching, the eta
schedule) is shared, so every variant keeps the feasibility guarantee: each ``q_t`` satisfies
the cut of the current dual whatever the gradient was, which is all Lemma 5 needs to drive the
time-averaged cost into ``S``.

Gradient estimators
-------------------
``"importance"`` (:class:`ImportanceGradient`)
    The paper's ``g_i = (r_t - b_t) count_i / q_i`` with ``b_t`` the mean of the earlier
    rewards: unbiased, with ``E|g|^2 <= G^2 = K M (1/gamma + M - 1)`` (Corollary 2's proof).
``"model"`` (:class:`ModelGradient`)
    A control variate. A reward model ``rhat(A) = beta_0 + sum_{i in A} beta_i`` is fitted by
    least squares (ridge 1) to the rewards seen so far; its expected reward under ``q`` is exact,
    ``Phihat(q) = beta_0 + sum_i beta_i (1 - (1 - q_i)^M)``, and so is its gradient
    ``beta_i M (1 - q_i)^(M-1)``. The estimate is that exact gradient plus the importance-weighted
    residual::

        g_i = beta_i M (1 - q_i)^(M-1) + (r_t - rhat(A_t)) count_i / (q_i + ix)

    The model is refitted at QP steps only, from rounds before the current one, so with
    ``ix = 0`` the estimate is unbiased for ``grad Phi`` (up to the all-ones shift that the
    projection ignores, see :func:`msroute.reward.expected_reward_grad`) and its variance is that
    of the residual, not of the reward. With ``ix > 0`` the residual term is the implicit
    exploration estimator (Neu, 2015): its weights are at most ``1/ix`` whatever the floor, at
    the price of shrinking the residual's mean by ``q_i / (q_i + ix)``. The model's own gradient
    is not shrunk, so where the model fits, the estimate is nearly exact.

Floor schedules
---------------
``"fixed"``
    ``gamma`` at every step (the paper).
``"decay"``
    ``gamma / sqrt(n)`` at the n-th QP step of a run (and context): anytime, it needs no
    horizon. A fixed floor ``gamma = 1/(10K)`` costs a constant share of the reward (on the web
    data about 0.02 of OPT, whatever T); a decaying one does not. The feasible set only grows as
    the floor shrinks, so Assumption 1 checked at ``gamma`` holds at every step. Use it with an
    estimator whose weights stay bounded (``"model"`` with ``ix > 0``): the paper's weights
    ``1/q_i`` grow as the floor falls.

Variants
--------
``"paper"``: importance + fixed floor, Algorithm 1 as printed (default ``eta_mult`` 0.05).
``"model"``: model (``ix = 1/(2K)``) + decaying floor, ``eta_mult`` 0.001 with the fixed eta
schedule and 0.0003 with the anytime one. Measured in ``benchmarks/bench_omd_variants.py``
(README, "OMD variants").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from msroute._validation import FloatArray, IntArray
from msroute.errors import InvalidValueError

__all__ = [
    "ESTIMATORS",
    "FLOORS",
    "VARIANTS",
    "GradientEstimator",
    "ImportanceGradient",
    "ModelGradient",
    "OMDVariant",
    "floor_at",
    "make_estimator",
]

#: Floor schedules of the QP step.
FLOORS: tuple[str, ...] = ("fixed", "decay")

#: Gradient estimators.
ESTIMATORS: tuple[str, ...] = ("importance", "model")


class GradientEstimator(Protocol):
    """What OMD asks of a gradient estimator (state per run and context)."""

    def estimate(
        self,
        rows: IntArray,
        ctx: IntArray,
        q: FloatArray,
        counts: FloatArray,
        reward: FloatArray,
        baseline: FloatArray,
    ) -> FloatArray:
        """The round's gradient estimate (R, K) at the played ``q`` (R, K), then learn from it."""
        ...

    def refit(self, runs: IntArray, ctx: IntArray) -> None:
        """At a QP step of ``runs`` (in contexts ``ctx``): refresh what the next rounds use."""
        ...


class ImportanceGradient:
    """The paper's estimator (step g): ``(r_t - b_t) count_i / q_i``; no state of its own.

    ``E[count_i / q_i] = M`` for every expert, so the baseline ``b_t`` shifts every coordinate
    by the same ``-M b_t``, which the projection onto ``{sum q = 1}`` ignores: it lowers the
    variance and changes no step in expectation.
    """

    #: No learned state (persistence).
    _state_attrs: ClassVar[tuple[str, ...]] = ()

    def estimate(
        self,
        rows: IntArray,
        ctx: IntArray,
        q: FloatArray,
        counts: FloatArray,
        reward: FloatArray,
        baseline: FloatArray,
    ) -> FloatArray:
        """See :class:`GradientEstimator`. Experts not drawn (among them any masked out, with
        ``q_i = 0``) contribute nothing."""
        return np.divide(
            (reward - baseline)[:, None] * counts, q, out=np.zeros(counts.shape), where=counts > 0
        )

    def refit(self, runs: IntArray, ctx: IntArray) -> None:
        """Nothing to refit."""


class ModelGradient:
    """Control variate from a fitted additive reward model (see the module docstring).

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
        p = n_experts + 1
        self.m_draws = m_draws
        self.ix = ix
        self.gram: FloatArray = np.broadcast_to(
            ridge * np.eye(p), (n_runs, n_contexts, p, p)
        ).copy()
        self.moment: FloatArray = np.zeros((n_runs, n_contexts, p))
        self.coef: FloatArray = np.zeros((n_runs, n_contexts, p))

    def estimate(
        self,
        rows: IntArray,
        ctx: IntArray,
        q: FloatArray,
        counts: FloatArray,
        reward: FloatArray,
        baseline: FloatArray,
    ) -> FloatArray:
        """See :class:`GradientEstimator`; ``baseline`` is not used (the model's intercept is
        the baseline). The (run, context) pairs of ``rows, ctx`` are distinct (one decision)."""
        m = self.m_draws
        coef = self.coef[rows, ctx]
        x = np.empty_like(coef)
        x[:, 0] = 1.0
        x[:, 1:] = counts > 0
        predicted = np.einsum("rp,rp->r", coef, x)
        model_grad = coef[:, 1:] * (m * (1.0 - q) ** (m - 1))
        residual = (reward - predicted)[:, None] * counts
        grad = model_grad + np.divide(
            residual, q + self.ix, out=np.zeros_like(residual), where=counts > 0
        )
        self._accumulate(rows, ctx, counts, reward)
        return np.asarray(grad, dtype=np.float64)

    def _accumulate(
        self, rows: IntArray, ctx: IntArray, counts: FloatArray, reward: FloatArray
    ) -> None:
        """``gram += x x^T`` and ``moment += reward x`` at ``rows, ctx`` for the round's
        features ``x = (1, counts > 0)``.

        ``x`` is 0/1, so the dense updates add ``1.0`` (resp. ``reward``) at the intercept and
        the routed experts and ``0.0`` elsewhere, which leaves an entry as it is. Updating only
        the intercept and the M largest counts of each run (the routed experts are among them;
        an entry with ``x = 0`` gets ``0.0``) gives the same floats at a fraction of the cost:
        ``(M + 1)^2`` Gram entries per run instead of ``(K + 1)^2``.
        """
        r, k = counts.shape
        n = min(self.m_draws, k)  # at most this many distinct experts were routed
        top = np.argpartition(counts, k - n, axis=1)[:, k - n :]  # distinct
        idx = np.zeros((r, n + 1), dtype=np.int64)  # feature 0 is the intercept
        idx[:, 1:] = top + 1
        x = np.ones((r, n + 1))
        x[:, 1:] = np.take_along_axis(counts, top, 1) > 0
        p = k + 1
        cell = rows * self.gram.shape[1] + ctx  # the (run, context) pair
        if not (self.gram.flags.c_contiguous and self.moment.flags.c_contiguous):
            self.gram = np.ascontiguousarray(self.gram)  # e.g. a loaded state: the flat views
            self.moment = np.ascontiguousarray(self.moment)  # below must alias the arrays
        # Distinct entries per update, so plain fancy-indexed adds are exact (no np.add.at).
        flat = (cell * (p * p))[:, None, None] + (idx[:, :, None] * p + idx[:, None, :])
        self.gram.reshape(-1)[flat] += x[:, :, None] * x[:, None, :]
        self.moment.reshape(-1)[(cell * p)[:, None] + idx] += reward[:, None] * x

    def refit(self, runs: IntArray, ctx: IntArray) -> None:
        """Least squares on every round so far (the ridge keeps the Gram matrix invertible)."""
        rhs = self.moment[runs, ctx][:, :, None]
        self.coef[runs, ctx] = np.linalg.solve(self.gram[runs, ctx], rhs)[:, :, 0]


def make_estimator(
    name: str, n_runs: int, n_contexts: int, n_experts: int, m_draws: int, ix: float
) -> ImportanceGradient | ModelGradient:
    """The estimator called ``name`` (one of :data:`ESTIMATORS`)."""
    if name == "importance":
        return ImportanceGradient()
    if name == "model":
        return ModelGradient(n_runs, n_contexts, n_experts, m_draws, ix)
    raise InvalidValueError(f"estimator == {name!r}, must be one of {', '.join(ESTIMATORS)}")


def floor_at(gamma: float, schedule: str, step: int) -> float:
    """The QP floor of the ``step``-th step (1-based) under ``schedule``."""
    if schedule == "decay":
        return gamma / float(np.sqrt(max(step, 1)))
    return gamma


@dataclass(frozen=True)
class OMDVariant:
    """A named choice of pieces and their default multipliers.

    Attributes
    ----------
    estimator : str
        One of :data:`ESTIMATORS`.
    floor : str
        One of :data:`FLOORS`.
    eta_mult : float or None
        Default ``eta_mult`` with the fixed eta schedule (None: the policy class's default).
    anytime_eta_mult : float or None
        Default ``eta_mult`` with the anytime schedule (None: the policy class's default).
    ix_per_k : float
        Default implicit-exploration offset, times ``1/K`` (model estimator only).
    """

    estimator: str
    floor: str
    eta_mult: float | None = None
    anytime_eta_mult: float | None = None
    ix_per_k: float = 0.0


#: The named variants; ``"paper"`` is Algorithm 1 as printed.
VARIANTS: dict[str, OMDVariant] = {
    "paper": OMDVariant(estimator="importance", floor="fixed"),
    "model": OMDVariant(
        estimator="model", floor="decay", eta_mult=1e-3, anytime_eta_mult=3e-4, ix_per_k=0.5
    ),
}
