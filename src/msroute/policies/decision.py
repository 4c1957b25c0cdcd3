"""A policy's decision: the value ``select`` returns and ``update`` takes back
(``msroute.policies.base``, which exports it).

The decision is a value (docs/architecture.md, "The decision is a value"): a policy keeps no
hidden "last decision", so many decisions may be pending and their feedback may arrive in any
order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msroute._records import quick_init
from msroute._validation import BoolArray, FloatArray, IntArray

__all__ = ["Decision"]


@quick_init
@dataclass(frozen=True, eq=False)
class Decision:
    """One call of ``select``: what was routed, from which distribution, in which context.

    A value handed back to ``update`` with the feedback, so that the policy needs no memory of
    its pending decisions. Its arrays are read-only.

    Attributes
    ----------
    draws : ndarray of int, shape (R, M)
        Each run's M draws (expert indices); the routed team is the set of distinct draws.
    probs : ndarray, shape (R, K), or None
        The distribution the draws were sampled from i.i.d. (the propensities), after the
        eligibility mask; None for policies without a closed form (the index policies, TS, MoE).
    context : ndarray of int, shape (R,), or None
        Each run's context (contextual policies), None for a context-free decision.
    round : int
        How many decisions the policy had made before this one (0 for the first).
    cost : ndarray, shape (R, d), or None
        What the decision was booked at, its team's table cost (each distinct expert once),
        when the policy is paced (``BasePolicy.pace``); the realized cost fed back replaces it
        in the pacer's spend. None for a policy that is not paced.
    allowed : ndarray of bool, shape (R, K), or None
        The experts the pacer left eligible (within the mask), when it narrowed the decision;
        None when it did not (or the policy is not paced). Off-policy evaluation plays a
        candidate within it, as the router would have.
    """

    draws: IntArray
    probs: FloatArray | None
    context: IntArray | None
    round: int
    cost: FloatArray | None = None
    allowed: BoolArray | None = None

    def __post_init__(self) -> None:
        for arr in (self.draws, self.probs, self.context, self.cost, self.allowed):
            if isinstance(arr, np.ndarray):
                arr.setflags(write=False)

    def with_cost(self, cost: FloatArray | None) -> Decision:
        """This decision booked at ``cost`` instead: ``dataclasses.replace(self, cost=cost)``
        without its walk over the fields (a live router rebooks a decision at every reported
        cost)."""
        return Decision(self.draws, self.probs, self.context, self.round, cost, self.allowed)

    @classmethod
    def of_read_only(
        cls,
        draws: IntArray,
        probs: FloatArray | None,
        context: IntArray | None,
        round: int,
        cost: FloatArray | None,
    ) -> Decision:
        """``Decision(draws, probs, context, round, cost)`` of arrays its maker has made
        read-only already (the live step's: one shared draws array per expert, its distribution
        and booking as computed): the same value, without the constructor's pass over them."""
        decision = cls.__new__(cls)
        items = {"draws": draws, "probs": probs, "context": context, "round": round}
        object.__setattr__(decision, "__dict__", {**items, "cost": cost, "allowed": None})
        return decision
