"""Contextual OMD with Approachability constraints (Algorithm 2 as printed).

``OMDApproachability`` keeps one routing per context whenever it is given ``n_contexts``; this
class is the paper's Algorithm 2 with its own defaults (Corollary 2's anytime eta, one visit
per step, the importance-weighted estimator, the linear surrogate).
"""

from __future__ import annotations

from typing import ClassVar

from msroute.policies.duals import Surrogate
from msroute.policies.omd import EtaSchedule, OMDApproachability

__all__ = ["ContextualOMD"]


class ContextualOMD(OMDApproachability):
    """Contextual OMD with Approachability constraints (Algorithm 2).

    One routing policy per context (case type), updated only on that context's rounds with
    its own gradient, and one shared approachability dual fed with the policy actually played
    (Remark 2), so the constraints hold on the aggregate over all contexts.

    The default proximal parameter is Corollary 2's anytime ``eta = a sqrt(n_x)`` with
    ``a = 2 sqrt(K M (1/gamma + M - 1))`` (times ``eta_mult``, default 1) and ``n_x`` the
    context's step count; ``eta_schedule="fixed"`` uses Algorithm 1's constant instead. The
    default variant is Algorithm 2 as printed (``variant="paper"``); the pieces of
    ``msroute.policies.omd_variants`` apply per context too.

    Reading of Algorithm 2: it refreshes ``q^(x)`` at the *start* of context ``x``'s next
    visit with the gradient stored at the previous one; we apply the same step at the *end*
    of the visit (with ``eta = a sqrt(n + 1)``, the value the next visit would use), using the
    dual of that moment — Algorithm 1's batch-end convention. The two differ only by the dual's
    drift between visits. ``batch`` averages B visits of a context per step (default 1, as in
    Algorithm 2).

    Parameters
    ----------
    problem, horizon, n_runs, seed, gamma, eta, batch, dual_step, check_feasible, variant,
    estimator, floor, ix, ix_per_k, model_fit
        As in ``OMDApproachability``.
    n_contexts : int
        Number of contexts X; ``select(context)`` takes (R,) ints in ``[0, X)``.
    eta_mult : float, default 1.0
    eta_schedule : {"anytime", "fixed"}, default "anytime"
    """

    name: ClassVar[str] = "omd-contextual"
    has_propensity: ClassVar[bool] = True
    _default_schedule: ClassVar[EtaSchedule] = "anytime"
    _default_batch: ClassVar[int] = 1
    _default_eta_mult: ClassVar[float] = 1.0
    _default_variant: ClassVar[str] = "paper"
    _default_surrogate: ClassVar[Surrogate | None] = "linear"  # Algorithm 2 as printed
