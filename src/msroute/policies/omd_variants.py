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
``"importance"`` (``ImportanceGradient``)
    The paper's ``g_i = (r_t - b_t) count_i / q_i`` with ``b_t`` the mean of the earlier
    rewards: unbiased, with ``E|g|^2 <= G^2 = K M (1/gamma + M - 1)`` (Corollary 2's proof).
``"model"`` (``ModelGradient``)
    A control variate. A reward model ``rhat(A) = beta_0 + sum_{i in A} beta_i`` is fitted by
    least squares (ridge 1) to the rewards seen so far; its expected reward under ``q`` is exact,
    ``Phihat(q) = beta_0 + sum_i beta_i (1 - (1 - q_i)^M)``, and so is its gradient
    ``beta_i M (1 - q_i)^(M-1)``. The estimate is that exact gradient plus the importance-weighted
    residual:

        g_i = beta_i M (1 - q_i)^(M-1) + (r_t - rhat(A_t)) count_i / (q_i + ix)

    The model is refitted at QP steps only, from rounds before the current one, so with
    ``ix = 0`` the estimate is unbiased for ``grad Phi`` (up to the all-ones shift that the
    projection ignores, see ``msroute.core.reward.expected_reward_grad``) and its variance is that
    of the residual, not of the reward. With ``ix > 0`` the residual term is the implicit
    exploration estimator (Neu, 2015): its weights are at most ``1/ix`` whatever the floor, at
    the price of shrinking the residual's mean by ``q_i / (q_i + ix)``. The model's own gradient
    is not shrunk, so where the model fits, the estimate is nearly exact.

    The unbiasedness holds for *any* coefficients that depend on earlier rounds only, so the fit
    need not be an exact solve; it only has to be a good one to cut the variance. Two fits,
    chosen by ``model_fit`` (default ``"auto"``: dense up to ``DENSE_FIT_MAX_EXPERTS``
    experts, sparse above):

    * dense (``ModelGradient``): a (K + 1)^2 Gram matrix per run and context, solved
      exactly at each QP step. Its memory grows as K^2 (0.8 GB per run at K = 10,000) and its
      solve as K^3;
    * sparse (``SparseModelGradient``): the Gram matrix as co-occurrence counts of the
      routed experts (at most ``min((K + 1)^2, T (M + 1)^2)`` entries, in practice the pairs
      of the experts ``q`` keeps routing), solved by a Jacobi-preconditioned conjugate gradient
      on the experts ever routed, warm-started from the previous coefficients, to a relative
      residual of 1e-8: the same least-squares solution up to that tolerance, at a cost per
      QP step that grows with the pairs seen, not with K.

    The threshold of 80 experts is where the dense solve stops being the cheaper one, and
    above it the dense solve's cost depends on the BLAS threading while the sparse fit's does
    not (measured with ``benchmarks/bench_scale.py``: docs/benchmarks.md, "The model fit's
    threshold"). The paper's experiments (K = 50) keep the dense exact fit, bit for bit.

Floor schedules
---------------
``gamma`` is the policy's floor: by default ``1/(10K)``, or half the largest feasible floor
where that is too much for the bounds (``msroute.Problem.exploration_floor``).

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
(docs/reproduction.md, "OMD variants").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from msroute._validation import FloatArray, IntArray
from msroute.errors import InvalidValueError
from msroute.policies.reward_model import ModelGradient, Prior, SparseModelGradient

__all__ = [
    "DENSE_FIT_MAX_EXPERTS",
    "ESTIMATORS",
    "FITS",
    "FLOORS",
    "VARIANTS",
    "GradientEstimator",
    "ImportanceGradient",
    "ModelGradient",
    "OMDVariant",
    "SparseModelGradient",
    "floor_at",
    "make_estimator",
]

#: Floor schedules of the QP step.
FLOORS: tuple[str, ...] = ("fixed", "decay")

#: The model estimator's fit is the dense exact solve (``ModelGradient``) up to this many
#: experts and the sparse conjugate-gradient one (``SparseModelGradient``) above.
DENSE_FIT_MAX_EXPERTS = 80

#: The model estimator's fits: ``"auto"`` picks by ``DENSE_FIT_MAX_EXPERTS``.
FITS: tuple[str, ...] = ("auto", "dense", "sparse")

#: Gradient estimators.
ESTIMATORS: tuple[str, ...] = ("importance", "model")


class GradientEstimator(Protocol):
    """What OMD asks of a gradient estimator (state per run and context)."""

    #: Whether ``estimate`` reads ``baseline`` (OMD computes it only then).
    uses_baseline: ClassVar[bool]

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
        """The round's gradient estimate (R, K) at the played ``q`` (R, K), then learn from it.

        ``draws`` (R, M) are the round's draws and ``counts`` (R, K) how often each expert was
        drawn (``msroute.policies.base.draw_counts`` of ``draws``); ``baseline`` (R,) the
        mean of the earlier rewards of each run's context, None for no baseline (0);
        ``damp`` (R, K) the factor of each expert's importance-weighted residual around a
        model (an anchored warm start's, ``msroute.policies.warm``; None: 1)."""
        ...

    def refit(self, runs: IntArray, ctx: IntArray, prior: Prior | None = None) -> None:
        """At a QP step of ``runs`` (in contexts ``ctx``): refresh what the next rounds use;
        ``prior``: the cells' pseudo-rounds (``msroute.policies.reward_model.Prior``)."""
        ...


class ImportanceGradient:
    """The paper's estimator (step g): ``(r_t - b_t) count_i / q_i``; no state of its own.

    ``E[count_i / q_i] = M`` for every expert, so the baseline ``b_t`` shifts every coordinate
    by the same ``-M b_t``, which the projection onto ``{sum q = 1}`` ignores: it lowers the
    variance and changes no step in expectation.
    """

    #: No learned state (persistence).
    _state_attrs: ClassVar[tuple[str, ...]] = ()
    uses_baseline: ClassVar[bool] = True

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
        """See ``GradientEstimator``. Experts not drawn (among them any masked out, with
        ``q_i = 0``) contribute nothing. ``damp`` is not read: without a model there is no
        prior for the residual to be damped toward."""
        centred = reward if baseline is None else reward - baseline
        return np.divide(centred[:, None] * counts, q, out=np.zeros(counts.shape), where=counts > 0)

    def refit(self, runs: IntArray, ctx: IntArray, prior: Prior | None = None) -> None:
        """Nothing to refit (a prior has no model to enter)."""


def make_estimator(
    name: str,
    n_runs: int,
    n_contexts: int,
    n_experts: int,
    m_draws: int,
    ix: float,
    fit: str = "auto",
) -> ImportanceGradient | ModelGradient | SparseModelGradient:
    """The estimator called ``name`` (one of ``ESTIMATORS``); the model's ``fit`` (one of
    ``FITS``) is by default dense up to ``DENSE_FIT_MAX_EXPERTS`` experts, sparse
    above."""
    if fit not in FITS:
        raise InvalidValueError(f"model_fit == {fit!r}, must be one of {', '.join(FITS)}")
    if name == "importance":
        return ImportanceGradient()
    if name == "model":
        if fit == "dense" or (fit == "auto" and n_experts <= DENSE_FIT_MAX_EXPERTS):
            return ModelGradient(n_runs, n_contexts, n_experts, m_draws, ix)
        return SparseModelGradient(n_runs, n_contexts, n_experts, m_draws, ix)
    raise InvalidValueError(f"estimator == {name!r}, must be one of {', '.join(ESTIMATORS)}")


def floor_at(gamma: float, schedule: str, step: float) -> float:
    """The QP floor of the ``step``-th step (1-based; a warm start's count may be fractional)
    under ``schedule``."""
    if schedule == "decay":
        return gamma / float(np.sqrt(max(step, 1)))
    return gamma


@dataclass(frozen=True)
class OMDVariant:
    """A named choice of pieces and their default multipliers.

    Attributes
    ----------
    estimator : str
        One of ``ESTIMATORS``.
    floor : str
        One of ``FLOORS``.
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
