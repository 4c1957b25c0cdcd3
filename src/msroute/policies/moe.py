"""Constrained online Mixture-of-Experts gating (Section 6.3, "MoE").

A logit vector ``theta`` (one per run) is the gate. Each round routes the Gumbel-top-M team,
the M largest entries of ``theta + xi`` with ``xi_i ~ Gumbel(0, 1)`` i.i.d. (sparse MoE's
stochastic routing), and then takes one REINFORCE step on the aggregate reward, with the
Lagrangian term folded into it:

    theta <- theta + lr * r_eff * (1_A - p),   r_eff = r_t + (lambda ⊙ sign)^T x_t,
    p = softmax(theta)

where ``x_t`` is the round's realized cost and ``lambda`` the multipliers of
``LagrangianDual``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from msroute._seeding import SeedArg
from msroute._validation import FloatArray, IntArray
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.policies.base import BasePolicy, check_hyper
from msroute.policies.lagrangian import Violation
from msroute.policies.team import TeamRounds

__all__ = ["MoEGating"]


def softmax(theta: FloatArray) -> FloatArray:
    """Row-wise softmax of logits (R, K)."""
    z = np.exp(theta - theta.max(axis=1, keepdims=True))
    return np.asarray(z / z.sum(axis=1, keepdims=True), dtype=np.float64)


class MoEGating(TeamRounds, BasePolicy):
    """Constrained online MoE gating with Gumbel-top-M routing and REINFORCE (Section 6.3).

    Readings, chosen so that the dual steers the gate as the paper says:

    * ``sign = -1`` for an upper bound, ``+1`` for a lower bound: while an upper bound is
      violated, rounds that load its coordinate get a smaller effective reward, so the gate
      reinforces the costly experts less; an unmet lower bound works the other way.
    * The dual's violation is that of the round's realized cost (``x_t - u``, ``l - x_t``;
      ``violation="round"``, docs/architecture.md); ``violation="average"`` uses the running
      average.
    * ``p = softmax(theta)`` and ``lambda`` are taken before the round's update (``theta`` first,
      then the dual steps); the update is the paper's ``1_A - p`` as written (no reward
      baseline). The whole shift of ``theta`` along the all-ones vector is immaterial.
    * No warm-up by default (the paper's warm-up is that of the UCB and TS families); with
      ``warmup > 0`` the gate and the dual also learn from the round-robin rounds.
    * The Gumbel noise is ``-log(-log U)`` with ``U`` uniform on ``[0, 1)`` from the policy's
      stream (the same law as ``Generator.gumbel``, several times faster).

    Parameters
    ----------
    problem : Problem, sequence of Problem or ProblemBatch
        One instance shared by all runs, or one per run.
    horizon : int
        T (unused by the default step sizes; part of the common constructor).
    n_runs : int, optional
    seed : int or SeedSequence, optional
    warmup : int, default 0
        Round-robin rounds before the gate routes.
    lr : float, default 0.01
        REINFORCE learning rate ``eta_lr``.
    dual_step : float, default 4e-4
        Dual subgradient step.
    violation : {"round", "average"}, default "round"

    Examples
    --------
    >>> from msroute import Constraints, Problem
    >>> p = Problem([[1.0], [0.0], [0.5]], m_draws=2, constraints=Constraints(upper=[1.0]))
    >>> MoEGating(p, horizon=100, n_runs=4, seed=0).select().draws.shape
    (4, 2)
    """

    name: ClassVar[str] = "moe"
    _dual_in_scores: ClassVar[bool] = False
    #: The gate beyond TeamRounds' state (persistence; ``_gate_dual`` is ``dual`` itself).
    _state_attrs: ClassVar[tuple[str, ...]] = ("theta",)
    #: The gate's weight of each expert, shape (R, K).
    _expert_axes: ClassVar[dict[str, int]] = {"theta": -1}

    def __init__(
        self,
        problem: Problem | Sequence[Problem] | ProblemBatch,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        warmup: int = 0,
        lr: float = 0.01,
        dual_step: float = 4e-4,
        violation: Violation = "round",
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self._setup_rounds(warmup)
        self.lr = check_hyper(lr, "lr")
        self._gate_dual = self._attach_dual(dual_step, violation, default=4e-4)
        self.theta: FloatArray = np.zeros((self.n_runs, self.n_experts))

    def _scores(self) -> FloatArray:
        u = self.streams.uniform(self.n_experts)
        with np.errstate(divide="ignore"):  # U == 0 (probability 2^-53) gives -inf: never routed
            return self.theta - np.log(-np.log(u))

    def _learn(self, routed: IntArray, reward: FloatArray, cost: FloatArray) -> None:
        step = (self.lr * (reward + self._gate_dual.value(cost)))[:, None]  # lr * r_eff
        self.theta -= step * softmax(self.theta)  # the -p part, p before the update
        self.theta.reshape(-1)[routed] += step  # the 1_A part: each routed expert once
