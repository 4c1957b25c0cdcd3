"""Machinery shared by the baselines of Section 6.3: warm-up, top-M, shared-reward statistics.

The baselines route a *team* of M distinct experts each round (unlike the multinomial policies,
which draw M times with replacement). What they have in common is written once here:

* ``round_robin`` — the warm-up schedule: round ``t < warmup`` routes experts
  ``(t*M + j) mod K`` for ``j < M``, so 10 rounds of M = 5 cycle once through K = 50 experts.
* ``top_m`` — the M highest scores of each run, ties to the lower expert index.
* ``SharedRewardStats`` — per-expert counts ``n_i`` and running means of the *shared*
  reward: the paper's heuristic credits the whole team reward ``r_t`` to every routed expert
  (the sum-max reward does not decompose per expert), and the UCB index built on them.
* ``BetaPosterior`` — Thompson sampling's Beta posteriors, updated the same way.
* ``TeamRounds`` — the round skeleton (warm-up, then top-M of the family's scores plus
  the Lagrangian penalty when there is a dual; feedback to the statistics, the family's own
  learner and the dual), a mixin placed before ``BasePolicy``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray, check_positive_int
from msroute.core.problem_batch import ProblemBatch
from msroute.errors import InvalidValueError
from msroute.policies.base import Decision, check_hyper
from msroute.policies.costs import CostEstimate
from msroute.policies.duals import cost_scale
from msroute.policies.lagrangian import LagrangianDual, Violation
from msroute.policies.streams import GammaConstants, RunStreams

__all__ = [
    "BetaPosterior",
    "SharedRewardStats",
    "TeamRounds",
    "default_bwk_step",
    "round_robin",
    "routed_index",
    "run_offsets",
    "top_m",
]

#: Up to this M, ``top_m`` takes M successive argmaxes; above it, one stable sort.
_ARGMAX_LIMIT = 8


def round_robin(t: int, n_runs: int, n_experts: int, m_draws: int) -> IntArray:
    """The warm-up team of round ``t`` (0-based): experts ``(t*M + j) mod K``, j < M.

    Returns
    -------
    ndarray of int, shape (R, M)
        The same row for every run (a fresh array).

    Examples
    --------
    >>> round_robin(3, 1, 5, 2).tolist()
    [[1, 2]]
    """
    row = (t * m_draws + np.arange(m_draws, dtype=np.int64)) % n_experts
    return np.tile(row, (n_runs, 1))


def top_m(scores: FloatArray, m: int, eligible: BoolArray | None = None) -> IntArray:
    """Indices of the M largest scores of each row, best first; ties go to the lower index.

    Deterministic tie-breaking keeps the policies' random streams for their own sampling (a
    deterministic index policy such as CUCB then does not depend on its seed at all) and makes
    CUCB's infinite indices of never-routed experts a round-robin in index order.

    Parameters
    ----------
    scores : ndarray, shape (R, K)
        Finite or infinite scores (no NaN).
    m : int
        M <= K.
    eligible : ndarray of bool, shape (R, K), optional
        Only these experts are picked (at least one per row). A row with fewer than M eligible
        experts gets all of them, best first, and repeats its best one in the remaining slots.

    Returns
    -------
    ndarray of int, shape (R, M)
        Distinct indices per row (but for the repeats of a short eligible row).

    Examples
    --------
    >>> top_m(np.array([[0.5, 2.0, 0.5, 1.0]]), 3).tolist()
    [[1, 3, 0]]
    >>> top_m(np.array([[0.5, 2.0, 0.5, 1.0]]), 3, np.array([[True, False, False, True]])).tolist()
    [[3, 0, 3]]
    """
    if eligible is not None:
        # Eligible scores lifted to finite-or-+inf, ineligible ones at -inf: one stable sort.
        work = np.where(eligible, np.maximum(scores, -np.finfo(np.float64).max), -np.inf)
        order = np.argsort(-work, axis=1, kind="stable")[:, :m].astype(np.int64, copy=False)
        short = np.arange(m) >= eligible.sum(axis=1)[:, None]
        return np.where(short, order[:, :1], order)
    if scores.shape[0] > 1:  # a batch: one compiled loop, the same teams (numba on first use)
        from msroute.policies._compiled.top import top_rows

        out = np.empty((scores.shape[0], m), dtype=np.int64)
        top_rows(np.asarray(scores, dtype=np.float64), m <= _ARGMAX_LIMIT, out)
        return out
    if m > _ARGMAX_LIMIT:
        return np.argsort(-scores, axis=1, kind="stable")[:, :m].astype(np.int64, copy=False)
    # Lift -inf to the lowest finite float so the -inf marking a taken expert stays below it.
    work = np.maximum(scores, -np.finfo(np.float64).max)
    rows = np.arange(scores.shape[0])
    out = np.empty((scores.shape[0], m), dtype=np.int64)
    for j in range(m):
        best = work.argmax(axis=1)  # the first maximum: lower index on ties
        out[:, j] = best
        work[rows, best] = -np.inf
    return out


def run_offsets(n_runs: int, n_experts: int) -> IntArray:
    """The offsets ``r * K`` of each run's row in a raveled (R, K) array, shape (R, 1)."""
    return (np.arange(n_runs, dtype=np.int64) * n_experts)[:, None]


def routed_index(draws: IntArray, n_experts: int, offsets: IntArray | None = None) -> IntArray:
    """Flat indices ``r * K + i`` of the routed experts, into a raveled (R, K) array.

    The statistics update only the R x M routed entries through these indices. A run whose
    draws repeat an expert (a multinomial policy's draws) has that index twice; an
    ``a.ravel()[idx] += v`` update then applies once to it (numpy's buffered fancy-index
    assignment), which is exactly "each distinct routed expert once".

    ``offsets``: ``run_offsets`` of the draws' shape, for a caller that keeps them.

    Examples
    --------
    >>> routed_index(np.array([[0, 2], [1, 1]]), 3).tolist()
    [[0, 2], [4, 4]]
    """
    if offsets is None:
        offsets = run_offsets(draws.shape[0], n_experts)
    return np.asarray(draws + offsets, dtype=np.int64)


class SharedRewardStats:
    """Per-run, per-expert counts and running means of the shared team reward.

    The shared-reward heuristic of Section 6.3: the team reward ``r_t`` is credited to every
    distinct expert routed in round ``t``.

    Parameters
    ----------
    n_runs, n_experts : int

    Attributes
    ----------
    counts : ndarray, shape (R, K)
        ``n_i``, the number of rounds each expert was routed (floats).
    means : ndarray, shape (R, K)
        ``mu_i``, the mean shared reward over those rounds (0 while ``n_i = 0``).
    """

    #: The learned state (persistence).
    _state_attrs: ClassVar[tuple[str, ...]] = ("counts", "means", "_rsqrt")
    #: Each of them per expert, shape (R, K).
    _expert_axes: ClassVar[dict[str, int]] = {"counts": -1, "means": -1, "_rsqrt": -1}
    #: What a loaded state must satisfy (``check_state``): +inf is 1/sqrt(0) of an expert never
    #: routed.
    _state_rules: ClassVar[dict[str, str]] = {"counts": "nonnegative", "_rsqrt": "inf_allowed"}

    def __init__(self, n_runs: int, n_experts: int) -> None:
        self.counts: FloatArray = np.zeros((n_runs, n_experts))
        self.means: FloatArray = np.zeros((n_runs, n_experts))
        # 1 / sqrt(n_i), +inf while n_i = 0: kept up to date so the UCB index costs two ops.
        self._rsqrt: FloatArray = np.full((n_runs, n_experts), np.inf)

    def update(self, routed: IntArray, reward: FloatArray) -> None:
        """Credit ``reward`` (R,) to the routed experts (flat indices from ``routed_index``).

        A batch of runs is credited in one compiled loop (the same floats; numba is imported on
        first use), a single run (a live router) by numpy.
        """
        counts, means = self.counts.reshape(-1), self.means.reshape(-1)
        if routed.shape[0] > 1:
            from msroute.policies._compiled.credit import credit_shared

            credit_shared(counts, means, self._rsqrt.reshape(-1), routed, reward)
            return
        n = counts[routed] + 1.0  # an index routed twice gets the same n twice: counted once
        counts[routed] = n
        mu = means[routed]
        means[routed] = mu + (reward[:, None] - mu) / n
        self._rsqrt.reshape(-1)[routed] = 1.0 / np.sqrt(n)

    def ucb(self, t: int, c: float) -> FloatArray:
        """The CUCB index ``mu_i + c sqrt(2 log t / n_i)``, ``+inf`` where ``n_i = 0``.

        ``t`` is floored at 1 (so ``log t >= 0``); an expert never routed has an infinite index
        and is routed before any other (ties to the lower index), the UCB convention.
        """
        scale = c * float(np.sqrt(2.0 * np.log(max(t, 1))))
        if scale == 0.0:  # t = 1 or c = 0: no bonus, but unrouted experts still come first
            return np.where(self.counts > 0, self.means, np.inf)
        return self.means + scale * self._rsqrt


class BetaPosterior:
    """Per-run, per-expert ``Beta(alpha_i, beta_i)`` posteriors of Thompson sampling.

    Parameters
    ----------
    n_runs, n_experts : int
    prior_alpha, prior_beta : float
        The prior, ``Beta(1, 1)`` in the paper.
    """

    #: The learned state (persistence).
    _state_attrs: ClassVar[tuple[str, ...]] = ("alpha", "beta")
    #: Both per expert, shape (R, K).
    _expert_axes: ClassVar[dict[str, int]] = {"alpha": -1, "beta": -1}
    #: Beta parameters are positive (``check_state``).
    _state_rules: ClassVar[dict[str, str]] = {"alpha": "positive", "beta": "positive"}

    def __init__(
        self, n_runs: int, n_experts: int, prior_alpha: float = 1.0, prior_beta: float = 1.0
    ) -> None:
        self.alpha: FloatArray = np.full((n_runs, n_experts), prior_alpha, dtype=np.float64)
        self.beta: FloatArray = np.full((n_runs, n_experts), prior_beta, dtype=np.float64)
        #: The sampler's constants of [alpha | beta]: derived, not state; kept current by the
        #: sampler, and by a batch's update for the entries it changes (so that the sampler
        #: finds those rows current without looking at each entry).
        self.constants = GammaConstants(n_runs, 2 * n_experts)

    def update(self, routed: IntArray, success: FloatArray) -> None:
        """``alpha += s``, ``beta += 1 - s`` for the routed experts; ``success`` (R,) in [0, 1].

        A batch in one compiled loop, a single run by numpy (as ``SharedRewardStats.update``).
        """
        if routed.shape[0] > 1:
            from msroute.policies._compiled.credit import credit_beta

            kept = self.constants
            alpha, beta = self.alpha.reshape(-1), self.beta.reshape(-1)
            seen, d, c = kept.seen.reshape(-1), kept.d.reshape(-1), kept.c.reshape(-1)
            credit_beta(alpha, beta, routed, success, seen, d, c)
            return
        self.alpha.reshape(-1)[routed] += success[:, None]
        self.beta.reshape(-1)[routed] += (1.0 - success)[:, None]

    def sample(self, streams: RunStreams) -> FloatArray:
        """One posterior draw per run and expert, shape (R, K), each run from its own stream."""
        return streams.beta(self.alpha, self.beta, self.constants)

    def top(self, streams: RunStreams, m: int, offset: FloatArray | None) -> IntArray:
        """The M experts of largest posterior draw plus ``offset`` (R, K) per run, best first:
        ``top_m`` of ``sample(streams) + offset``, the same draws (shape (R, M))."""
        return streams.beta_top(self.alpha, self.beta, m, offset, self.constants)


def default_bwk_step(horizon: int) -> float:
    """The paper's dual step ``10 / sqrt(T)`` for CBwK and TS-BwK."""
    return 10.0 / math.sqrt(horizon)  # math: also for a horizon beyond int64


class TeamRounds:
    """Round skeleton of the baselines: a mixin that goes before ``BasePolicy`` in the bases.

    ``select``: while ``t < warmup`` (``t`` counts decisions, so the warm-up advances on
    select) the ``round_robin`` team; afterwards ``top_m`` of the family's
    ``_scores``, plus the Lagrangian penalty ``(lambda ⊙ sign)^T C_hat[:, i]`` when the
    policy has a dual that acts on scores (``C_hat``: the costs per call learned from the realized
    costs, ``msroute.policies.costs``). With an eligibility mask the warm-up team is the first M
    eligible experts in round-robin order from ``t M mod K``, and the top M is taken among the
    eligible experts. ``update``: the shared-reward statistics, then the family's
    ``_learn``, then one dual step; all three also learn from the warm-up rounds.

    Subclasses call ``_setup_rounds`` after ``BasePolicy.__init__`` and implement
    ``_scores`` (and ``_learn`` when they learn more than the shared statistics);
    constraint-aware ones call ``_attach_dual``. Being a mixin rather than a level of the
    class tree keeps every baseline within two levels of ``BasePolicy`` while CBwK and TS-BwK
    still subclass CUCB and TS and add nothing but the dual.
    """

    # Provided by BasePolicy.
    problem_batch: ProblemBatch
    streams: RunStreams
    horizon: int
    t: int
    n_runs: int
    n_experts: int
    m_draws: int

    #: Whether the dual's penalty is added to the selection scores (False: MoE uses it on the
    #: reward instead).
    _dual_in_scores: ClassVar[bool] = True
    #: The learned state (persistence): the shared statistics and the dual (None without one).
    _state_attrs: ClassVar[tuple[str, ...]] = ("stats", "dual", "cost_est")
    #: The Lagrangian dual is learned against the bounds: it restarts when they change.
    _constraint_attrs: ClassVar[tuple[str, ...]] = ("dual",)

    warmup: int
    stats: SharedRewardStats
    dual: LagrangianDual | None = None
    #: Online cost estimates used in the penalty (None without a dual).
    cost_est: CostEstimate | None = None

    def _setup_rounds(self, warmup: int) -> None:
        if self.m_draws > self.n_experts:
            raise InvalidValueError(
                f"m_draws == {self.m_draws} with {self.n_experts} experts: "
                f"{type(self).__name__} routes M distinct experts, so it needs M <= K"
            )
        self.warmup = check_positive_int(warmup, "warmup", minimum=0)
        self.stats = SharedRewardStats(self.n_runs, self.n_experts)
        self._offsets = run_offsets(self.n_runs, self.n_experts)

    def _attach_dual(
        self, dual_step: float | None, violation: Violation, default: float
    ) -> LagrangianDual:
        step = default if dual_step is None else check_hyper(dual_step, "dual_step")
        b = self.problem_batch
        scale = cost_scale(b.costs, b.lo_ori, b.hi_ori)
        self.dual = LagrangianDual(b.lo_ori, b.hi_ori, step=step, violation=violation, scale=scale)
        # The penalty prices experts at their learned cost per call (M distinct experts).
        self.cost_est = CostEstimate(b.costs, scale, mode="distinct")
        return self.dual

    # ------------------------------------------------------------------ diagnostics
    @property
    def counts(self) -> FloatArray:
        """How often each expert has been routed, shape (R, K) (a copy)."""
        return self.stats.counts.copy()

    @property
    def lambda_(self) -> FloatArray:
        """The Lagrangian multipliers, shape (R, B) (empty for unconstrained policies)."""
        if self.dual is None:
            return np.zeros((self.n_runs, 0))
        return self.dual.lam.copy()

    # ------------------------------------------------------------------ the round
    def _select(
        self, context: IntArray | None, eligible: BoolArray | None
    ) -> tuple[IntArray, None]:
        k, m = self.n_experts, self.m_draws
        if self.t < self.warmup:
            if eligible is None:
                return round_robin(self.t, self.n_runs, k, m), None
            # Score = minus the position in the round-robin order that starts at t M mod K.
            position = (np.arange(k) - self.t * m) % k
            scores = np.broadcast_to(-position.astype(np.float64), (self.n_runs, k))
            return top_m(scores, m, eligible), None
        penalty = None
        # Multipliers all at 0 would add 0 to every score, which changes no order: no penalty.
        if self.dual is not None and self._dual_in_scores and np.count_nonzero(self.dual.lam):
            assert self.cost_est is not None
            penalty = self.dual.penalty(self.cost_est.costs)
        return self._top(penalty, eligible), None

    def _top(self, penalty: FloatArray | None, eligible: BoolArray | None) -> IntArray:
        """The top M of the family's scores plus ``penalty`` (R, K; None: no dual in them)."""
        scores = self._scores()
        if penalty is not None:
            scores = scores + penalty
        return top_m(scores, self.m_draws, eligible)

    def _update(self, decision: Decision, reward: FloatArray, cost: FloatArray) -> None:
        routed = routed_index(decision.draws, self.n_experts, self._offsets)
        self.stats.update(routed, reward)
        self._learn(routed, reward, cost)
        if self.dual is not None:
            self.dual.step(cost)
        if self.cost_est is not None:  # counts each distinct routed expert once
            self.cost_est.update(decision.draws, cost)

    def _scores(self) -> FloatArray:
        """The family's selection scores after the warm-up, shape (R, K)."""
        raise NotImplementedError

    def _learn(self, routed: IntArray, reward: FloatArray, cost: FloatArray) -> None:
        """Family-specific learning from one round (the shared statistics are already updated).

        ``routed`` holds the flat indices of ``routed_index``, shape (R, M).
        """
