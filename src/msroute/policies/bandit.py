"""The bandit baselines of Section 6.3: Random, Greedy, CUCB, CBwK, TS and TS-BwK.

Each routes a team of M *distinct* experts per round and differs from the others only in its
scores; the warm-up, the top-M selection, the shared-reward statistics and the Lagrangian dual
are shared (``msroute.policies.team``, ``msroute.policies.lagrangian``):

========  ==========================================================  ========  ==========
policy    score of expert i after the warm-up                          warm-up   dual
========  ==========================================================  ========  ==========
Random    i.i.d. uniform (a uniformly random team)                     0         --
Greedy    ``mu_i``, mean shared reward                                 10        --
CUCB      ``mu_i + c sqrt(2 log t / n_i)``                             10        --
CBwK      CUCB's index ``+ (lambda ⊙ sign)^T C[:, i]``                 10        average
TS        ``s_i ~ Beta(alpha_i, beta_i)``                              10        --
TS-BwK    TS's sample ``+ (lambda ⊙ sign)^T C[:, i]``                  10        average
========  ==========================================================  ========  ==========

CBwK is CUCB plus a dual and TS-BwK is TS plus a dual: each subclasses its unconstrained twin
and only attaches a ``LagrangianDual``, so with bounds that
never bind (the multipliers stay at 0) it makes exactly the twin's decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from msroute._seeding import SeedArg
from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.policies.base import BasePolicy, check_hyper
from msroute.policies.lagrangian import Violation
from msroute.policies.team import BetaPosterior, TeamRounds, default_bwk_step

__all__ = [
    "CUCB",
    "CBwK",
    "GreedyPolicy",
    "RandomPolicy",
    "ThompsonSampling",
    "ThompsonSamplingBwK",
]

ProblemLike = Problem | Sequence[Problem] | ProblemBatch


class RandomPolicy(TeamRounds, BasePolicy):
    """Uniformly random team of M distinct experts each round (Section 6.3, "Random").

    No learning and no constraint awareness: the lower reference. The team is the top M of K
    i.i.d. uniform scores, which is uniform over the M-subsets.

    Parameters
    ----------
    problem : Problem, sequence of Problem or ProblemBatch
        One instance shared by all runs, or one per run.
    horizon : int
        T (unused by this policy; part of the common constructor).
    n_runs : int, optional
    seed : int or SeedSequence, optional
    warmup : int, default 0
        Round-robin rounds before the random teams (the paper gives Random none).

    Examples
    --------
    >>> from msroute import Constraints, Problem
    >>> p = Problem([[1.0], [0.0], [0.5]], m_draws=2, constraints=Constraints(upper=[1.0]))
    >>> RandomPolicy(p, horizon=100, n_runs=4, seed=0).select().draws.shape
    (4, 2)
    """

    name: ClassVar[str] = "random"
    ignores_constraints: ClassVar[bool] = True

    def __init__(
        self,
        problem: ProblemLike,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        warmup: int = 0,
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self._setup_rounds(warmup)

    def _scores(self) -> FloatArray:
        return self.streams.uniform(self.n_experts)


class GreedyPolicy(TeamRounds, BasePolicy):
    """The M experts with the highest mean shared reward (Section 6.3, "Greedy").

    After the round-robin warm-up, route the top M by ``mu_i``, the running average of the
    team rewards of the rounds in which expert ``i`` was routed (the shared-reward heuristic).
    Pure exploitation, no constraint awareness.

    Readings: an expert never routed has ``mu_i = 0`` (with the default warm-up, 10 rounds of M
    cover K <= 10 M experts, so none is left); ties go to the lower expert index, so the policy
    draws nothing from its random stream.

    Parameters
    ----------
    problem, horizon, n_runs, seed
        As in ``RandomPolicy``.
    warmup : int, default 10
        Round-robin rounds (Section 6.3); statistics are updated during them too.

    Examples
    --------
    >>> from msroute import Constraints, Problem
    >>> p = Problem([[1.0], [0.0], [0.5]], m_draws=2, constraints=Constraints(upper=[1.0]))
    >>> GreedyPolicy(p, horizon=100).select().draws.tolist()  # warm-up round 0
    [[0, 1]]
    """

    name: ClassVar[str] = "greedy"
    ignores_constraints: ClassVar[bool] = True

    def __init__(
        self,
        problem: ProblemLike,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        warmup: int = 10,
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self._setup_rounds(warmup)

    def _scores(self) -> FloatArray:
        return self.stats.means


class CUCB(TeamRounds, BasePolicy):
    """Combinatorial UCB on the shared reward (Section 6.3, "CUCB").

    After the round-robin warm-up, route the top M by ``mu_i + c sqrt(2 log t / n_i)``, with
    ``mu_i`` the mean shared reward and ``n_i`` the number of rounds expert ``i`` was routed.

    Readings: ``t`` is the number of decisions made before this one (warm-up included; with
    immediate feedback, the rounds completed), floored at 1 — UCB1's "plays so far"; an
    expert with ``n_i = 0`` has an infinite index, so unrouted experts are tried first (in
    index order); ``mu_i`` is the unnormalized team reward
    (in ``[0, N]`` for skills in ``[0, 1]``), as the paper writes it. Ties go to the lower
    expert index, so the policy draws nothing from its random stream.

    Parameters
    ----------
    problem, horizon, n_runs, seed
        As in ``RandomPolicy``.
    warmup : int, default 10
        Round-robin rounds (Section 6.3).
    c : float, default 2.0
        Exploration constant, ``>= 0``.
    """

    name: ClassVar[str] = "cucb"
    ignores_constraints: ClassVar[bool] = True

    def __init__(
        self,
        problem: ProblemLike,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        warmup: int = 10,
        c: float = 2.0,
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self._setup_rounds(warmup)
        self.c = check_hyper(c, "c", strict=False)

    def _scores(self) -> FloatArray:
        return self.stats.ucb(self.t, self.c)


class CBwK(CUCB):
    """Combinatorial bandits with knapsacks: CUCB plus a Lagrangian dual (Section 6.3, "CBwK").

    Score of expert ``i``: ``UCB_i + (lambda ⊙ sign)^T C[:, i]``, with ``lambda >= 0`` (one entry
    per bound of ``S_ori``) starting at 0 and updated every round, warm-up included, by
    ``lambda <- max(0, lambda + dual_step * violation)``.

    Readings (see ``msroute.policies.lagrangian``): ``sign = -1`` for an upper bound and
    ``+1`` for a lower bound, so a violated upper bound lowers the score of the experts that
    carry its cost and an unmet lower bound raises it — "steering away from constraint-violating
    arms as lambda grows"; the violation is that of the *running average* of the realized cost
    (``avg - u``, ``l - avg``), as the paper writes, with ``violation="round"`` for the per-round
    reading.

    Parameters
    ----------
    problem, horizon, n_runs, seed, warmup, c
        As in ``CUCB``.
    dual_step : float, optional
        Default ``10 / sqrt(horizon)``.
    violation : {"average", "round"}, default "average"
    """

    name: ClassVar[str] = "cbwk"
    lagrangian_dual: ClassVar[bool] = True

    def __init__(
        self,
        problem: ProblemLike,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        warmup: int = 10,
        c: float = 2.0,
        dual_step: float | None = None,
        violation: Violation = "average",
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed, warmup=warmup, c=c)
        self._attach_dual(dual_step, violation, default_bwk_step(self.horizon))


class ThompsonSampling(TeamRounds, BasePolicy):
    """Thompson sampling on Beta posteriors of the shared reward (Section 6.3, "TS").

    After the round-robin warm-up, draw ``s_i ~ Beta(alpha_i, beta_i)`` and route the top M.
    Update for every routed expert: ``alpha_i += r_t / N``, ``beta_i += 1 - r_t / N`` (the
    warm-up rounds included).

    Reading of the normalization: the policy does not see N (bandit feedback gives only
    ``r_t``), so the normalizer is ``reward_scale``: pass the number of reward dimensions N, the
    paper's setting (skills in ``[0, 1]`` make ``r_t <= N``). When it is not given, each run
    divides by the largest reward it has seen so far (this one included), which makes the
    increment a number in ``[0, 1]`` without knowledge of N. ``r_t / reward_scale`` is clipped
    to ``[0, 1]``. Ties between samples (probability 0) go to the lower index.

    Parameters
    ----------
    problem, horizon, n_runs, seed
        As in ``RandomPolicy``.
    warmup : int, default 10
        Round-robin rounds (Section 6.3).
    reward_scale : float, optional
        Normalizer of the reward, the paper's N; default: the running maximum reward.
    prior_alpha, prior_beta : float, default 1.0
        The ``Beta(1, 1)`` prior.
    """

    name: ClassVar[str] = "ts"
    thompson: ClassVar[bool] = True
    ignores_constraints: ClassVar[bool] = True
    #: The learned state beyond TeamRounds' (persistence).
    _state_attrs: ClassVar[tuple[str, ...]] = ("posterior", "_reward_max")
    #: The largest reward seen is ``>= 0`` (``check_state``).
    _state_rules: ClassVar[dict[str, str]] = {"_reward_max": "nonnegative"}

    def __init__(
        self,
        problem: ProblemLike,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        warmup: int = 10,
        reward_scale: float | None = None,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self._setup_rounds(warmup)
        self.reward_scale = (
            None if reward_scale is None else check_hyper(reward_scale, "reward_scale")
        )
        self.posterior = BetaPosterior(
            self.n_runs,
            self.n_experts,
            check_hyper(prior_alpha, "prior_alpha"),
            check_hyper(prior_beta, "prior_beta"),
        )
        self._reward_max: FloatArray = np.zeros(self.n_runs)

    def _scores(self) -> FloatArray:
        return self.posterior.sample(self.streams)

    def _top(self, penalty: FloatArray | None, eligible: BoolArray | None) -> IntArray:
        if eligible is not None:
            return super()._top(penalty, eligible)
        return self.posterior.top(self.streams, self.m_draws, penalty)  # one compiled loop

    def _learn(self, routed: IntArray, reward: FloatArray, cost: FloatArray) -> None:
        if routed.shape[0] > 1:  # a batch: one compiled loop, the same floats (numba on first use)
            from msroute.policies._compiled.credit import credit_thompson

            post, kept = self.posterior, self.posterior.constants
            scale = 0.0 if self.reward_scale is None else self.reward_scale
            alpha, beta = post.alpha.reshape(-1), post.beta.reshape(-1)
            seen, d, c = kept.seen.reshape(-1), kept.d.reshape(-1), kept.c.reshape(-1)
            credit_thompson(alpha, beta, routed, reward, scale, self._reward_max, seen, d, c)
            return
        if self.reward_scale is not None:
            success = reward / self.reward_scale
        else:
            np.maximum(self._reward_max, reward, out=self._reward_max)
            success = reward / np.where(self._reward_max > 0.0, self._reward_max, 1.0)
        # Clipped to [0, 1] in place (np.clip's wrapper costs more than the two ufuncs).
        self.posterior.update(
            routed, np.minimum(np.maximum(success, 0.0, out=success), 1.0, out=success)
        )


class ThompsonSamplingBwK(ThompsonSampling):
    """Thompson sampling with knapsacks: TS plus a Lagrangian dual (Section 6.3, "TS-BwK").

    Score of expert ``i``: ``s_i + (lambda ⊙ sign)^T C[:, i]`` with TS's posterior sample
    ``s_i`` and the same dual, dual update and readings as ``CBwK`` (sign ``-1`` for an
    upper bound and ``+1`` for a lower bound; violation of the running-average realized cost
    by default, ``violation="round"`` for the per-round reading; step ``10 / sqrt(T)``).

    Parameters
    ----------
    problem, horizon, n_runs, seed, warmup, reward_scale, prior_alpha, prior_beta
        As in ``ThompsonSampling``.
    dual_step : float, optional
        Default ``10 / sqrt(horizon)``.
    violation : {"average", "round"}, default "average"
    """

    name: ClassVar[str] = "ts-bwk"
    thompson: ClassVar[bool] = True
    lagrangian_dual: ClassVar[bool] = True

    def __init__(
        self,
        problem: ProblemLike,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        warmup: int = 10,
        reward_scale: float | None = None,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        dual_step: float | None = None,
        violation: Violation = "average",
    ) -> None:
        super().__init__(
            problem,
            horizon=horizon,
            n_runs=n_runs,
            seed=seed,
            warmup=warmup,
            reward_scale=reward_scale,
            prior_alpha=prior_alpha,
            prior_beta=prior_beta,
        )
        self._attach_dual(dual_step, violation, default_bwk_step(self.horizon))
