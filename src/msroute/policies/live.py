"""The configuration a live router runs, and the bench with it: one set of defaults.

A live router does not know its horizon and must keep its bounds in every run, so its policy
differs from the paper's Algorithm 1 with a known T: Corollary 2's anytime eta, the pacing layer
(``msroute.policies.pacing``) and the variant, multiplier and surrogate chosen over a generated
family of instances plus the real tables (``benchmarks/bench_budget_family.py``, docs/budgets.md).
``msroute.Router`` builds its policy with ``live_kwargs`` and ``msroute bench`` (``--outcomes``,
``llmrouter``) builds its batched policies with the same, so what the bench reports is what a
user of the live router gets.
"""

from __future__ import annotations

import inspect
from typing import Any

from msroute.policies.registry import get_policy_class

__all__ = ["DEFAULT_OMD_PARAMS", "IX_PER_DRAW", "TEAM_OMD_PARAMS", "live_kwargs"]

#: OMD in a live router: Corollary 2's anytime eta ``a sqrt(n)`` with ``eta_mult`` 0.003, the
#: model variant (``msroute.policies.omd_variants``: a fitted-model control variate and a
#: decaying floor) and a budget margin of 1 standard deviation of the time-averaged realized
#: cost (the pacer keeps the bounds; the margin keeps the learner from leaning on it). Chosen
#: with ``benchmarks/bench_budget_family.py`` over 200 generated instances (no run over a
#: bound, the best mean reward / OPT with the best tail) and checked on the packaged LLM table
#: and the paper's TREC pools (docs/budgets.md, "How the defaults were chosen").
DEFAULT_OMD_PARAMS: dict[str, Any] = {
    "eta_schedule": "anytime",
    "eta_mult": 0.003,
    "variant": "model",
    "budget_margin": 1.0,
}

#: OMD in a router that routes teams (M >= 2), on top of ``DEFAULT_OMD_PARAMS``: the exact
#: surrogate, which approaches the team's expected realized cost (each distinct expert paid
#: once) where the paper's ``C^T q <= u/M`` pays for M calls; at M = 1 the two are the same
#: routing, so one expert per query keeps the cheaper linear path.
TEAM_OMD_PARAMS: dict[str, Any] = {"surrogate": "exact"}

#: A team's implicit-exploration offset: ``ix = IX_PER_DRAW M / K`` (``ix_per_k`` of
#: ``IX_PER_DRAW M``). A round's residual is shared by its M draws, each weighted up to
#: ``1 / ix``: with this offset the M weights together stay within ``2K`` whatever M, where the
#: model variant's ``1/(2K)`` would let them reach ``2KM`` (the residual's variance ``M^2``
#: times a single expert's), so that one lucky draw of an expert at the floor would move a
#: team's q M times as far. At M = 1 it is the variant's own offset. Chosen with
#: ``benchmarks/bench_budget_family.py`` as the defaults above (docs/budgets.md).
IX_PER_DRAW = 0.5


def live_kwargs(
    policy: str, m_draws: int, n_contexts: int, *, pacing: bool = True
) -> dict[str, Any]:
    """The constructor arguments a live router gives policy ``policy`` (beside its horizon,
    runs and seed): ``pacing``, and for the OMD family ``DEFAULT_OMD_PARAMS``, for a team
    ``TEAM_OMD_PARAMS`` and the offset ``ix_per_k = IX_PER_DRAW M``, and the number of contexts
    (any policy that takes ``n_contexts`` gets it)."""
    from msroute.policies.omd import OMDApproachability

    cls = get_policy_class(policy)
    kwargs: dict[str, Any] = {"pacing": True} if pacing else {}
    if issubclass(cls, OMDApproachability):
        kwargs.update(DEFAULT_OMD_PARAMS)
        if m_draws > 1:
            kwargs.update(TEAM_OMD_PARAMS)
            kwargs["ix_per_k"] = IX_PER_DRAW * m_draws
    if "n_contexts" in inspect.signature(cls).parameters:
        kwargs["n_contexts"] = max(1, n_contexts)
    return kwargs
