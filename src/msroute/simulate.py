"""Run policies on a skill environment, batched over runs, and record their trajectories.

One round (docs/architecture.md): the environment gives ``skills (R, N, K)``; each policy's
``select`` gives the M draws; the routed subset is the distinct draws; the reward is the sum-max of
the subset (a recorded-outcome environment with a judge, ``OutcomeEnv.judge``, may keep another
member's answer) and the realized cost the sum of the distinct routed experts' cost vectors;
``update`` sees only these. Every policy steps on the *same* skills each round (common random
numbers), so comparisons between policies are paired.

For policies whose decisions carry their sampling distribution (``Decision.probs``, e.g.
OMD-Approachability) the simulator can also record the exact expected reward ``Phi_t(q_t)`` of
the policy actually played each round, which the true regret of eq. (4) needs; it is computed in
vectorized blocks, never in the per-round loop.

``simulate`` keeps every round's reward and cost; ``simulate_summary`` keeps only their
time averages and the running average cost at chosen rounds, streamed as the rounds arrive
(``msroute.streaming``), in memory independent of the horizon and equal bit for bit to the
metrics computed from the full arrays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

from msroute._memory import check_memory
from msroute._validation import FloatArray, IntArray, check_contexts, check_positive_int
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.core.reward import context_scaled, expected_reward
from msroute.envs import SkillEnv
from msroute.errors import InvalidTypeError, InvalidValueError
from msroute.outcome_env import OutcomeEnv
from msroute.policies.base import BasePolicy, Decision, Policy, draw_counts, draws_to_mask
from msroute.streaming import PairwiseSum

__all__ = ["RunSummary", "Trajectory", "simulate", "simulate_summary"]


@dataclass
class Trajectory:
    """What one policy did over a simulation, for every run.

    Attributes
    ----------
    policy : str
        The name the policy was given.
    rewards : ndarray, shape (T, R)
        Realized sum-max reward of each round.
    costs : ndarray, shape (T, R, d)
        Realized cost vector of each round (each distinct routed expert counted once).
    expected_rewards : ndarray, shape (T, R), or None
        ``Phi_t(q_t)``, the exact expected reward of the routing distribution played, for
        policies whose decisions carry it (``Decision.probs``); None otherwise.
    final_q : ndarray, shape (R, K) or (R, X, K), or None
        The policy's final routing distribution (``q_T``), when it has one.
    wall_time : float
        Seconds spent in this policy's ``select``/``update`` calls.
    """

    policy: str
    rewards: FloatArray
    costs: FloatArray
    expected_rewards: FloatArray | None = None
    final_q: FloatArray | None = None
    wall_time: float = 0.0

    @property
    def horizon(self) -> int:
        """Number of rounds T recorded."""
        return int(self.rewards.shape[0])


@dataclass
class RunSummary:
    """What one policy did, for every run, without the per-round arrays.

    Attributes
    ----------
    policy : str
    avg_reward : ndarray, shape (R,)
        Time-averaged reward (``msroute.metrics.time_averaged`` of the rewards, bit for bit).
    avg_cost : ndarray, shape (R, d)
        Time-averaged realized cost (likewise).
    checkpoints : ndarray of int
        1-based round counts at which the running average cost was kept.
    running_cost : ndarray, shape (len(checkpoints), R, d)
        Running average cost at the checkpoints (``msroute.metrics.running_average``).
    rewards : ndarray, shape (T, R), or None
        Every round's reward, when asked for (``keep_rewards``).
    final_q : ndarray or None
    wall_time : float
        Seconds spent in this policy's ``select``/``update`` calls.
    """

    policy: str
    avg_reward: FloatArray
    avg_cost: FloatArray
    checkpoints: IntArray
    running_cost: FloatArray
    rewards: FloatArray | None = None
    final_q: FloatArray | None = None
    wall_time: float = 0.0


class _Rounds:
    """Keeps every round's reward (T, R) and cost (T, R, d)."""

    def __init__(self, horizon: int, n_runs: int, n_costs: int) -> None:
        self.rewards: FloatArray = np.empty((horizon, n_runs))
        self.costs: FloatArray = np.empty((horizon, n_runs, n_costs))

    def add(self, t: int, reward: FloatArray, cost: FloatArray) -> None:
        self.rewards[t] = reward
        self.costs[t] = cost


class _Sums:
    """Streams the time sums (pairwise, as the metrics) and the running cost sum (cumulative,
    as ``running_average``), saving the running average at the checkpoints.

    The rounds are kept in blocks of up to 128 and added a block at a time (the same sums:
    the pairwise sums take their rounds in order, and the running sum is accumulated round
    after round by ``np.add.accumulate``)."""

    def __init__(
        self, horizon: int, n_runs: int, n_costs: int, checkpoints: IntArray, keep: bool
    ) -> None:
        self.horizon = horizon
        self.reward_sum = PairwiseSum(horizon, (n_runs,))
        self.cost_sum = PairwiseSum(horizon, (n_runs, n_costs))
        self.running: FloatArray = np.zeros((n_runs, n_costs))
        self.checkpoints = checkpoints
        self.at_checkpoints: FloatArray = np.empty((checkpoints.size, n_runs, n_costs))
        self._marks: list[int] = checkpoints.tolist()
        self._next = 0
        self.rewards: FloatArray | None = np.empty((horizon, n_runs)) if keep else None
        block = min(128, horizon)
        self._block_rewards: FloatArray = np.empty((block, n_runs))
        # Row 0 holds the running sum before the block, rows 1.. the block's costs.
        self._block_costs: FloatArray = np.empty((block + 1, n_runs, n_costs))
        self._filled = 0

    def add(self, t: int, reward: FloatArray, cost: FloatArray) -> None:
        i = self._filled
        self._block_rewards[i] = reward
        self._block_costs[i + 1] = cost
        self._filled = i + 1
        if self._filled == self._block_rewards.shape[0] or t + 1 == self.horizon:
            self._flush(t + 1)

    def _flush(self, done: int) -> None:
        """Add the block's rounds, the last of which is round ``done`` (1-based)."""
        n, self._filled = self._filled, 0
        first = done - n  # rounds before the block
        rewards, costs = self._block_rewards[:n], self._block_costs[: n + 1]
        self.reward_sum.add_rounds(rewards)
        self.cost_sum.add_rounds(costs[1:])
        costs[0] = self.running
        running = np.add.accumulate(costs, axis=0)  # running[j]: the sum after round first + j
        while self._next < len(self._marks) and self._marks[self._next] <= done:
            mark = self._marks[self._next]
            self.at_checkpoints[self._next] = running[mark - first] / mark
            self._next += 1
        self.running = running[n]
        if self.rewards is not None:
            self.rewards[first:done] = rewards


def _selector(
    pol: BasePolicy | Policy, contexts: IntArray | None
) -> Callable[[IntArray | None], Decision]:
    """How ``_play`` asks ``pol`` for a decision in context ``contexts[t]`` (or None).

    The simulator validated every round's context (``check_contexts``); a policy that keeps
    ``BasePolicy.select`` and whose contexts all lie in its range then skips ``select``'s
    per-round checks (``BasePolicy.select_trusted``, the same decisions). Any other policy (one
    with a ``select`` of its own), or contexts out of the policy's range, goes through
    ``select``, which raises at the first bad round."""
    if (
        not isinstance(pol, BasePolicy)
        or type(pol).select is not BasePolicy.select
        or "select" in vars(pol)
        or contexts is None
        or (pol.n_contexts > 1 and int(contexts.max()) >= pol.n_contexts)
    ):
        return pol.select
    return lambda ctx: pol.select_trusted(ctx, None)


def _learner(
    pol: BasePolicy | Policy, built: bool
) -> Callable[[Decision, FloatArray, FloatArray], None]:
    """How ``_play`` feeds a round back to ``pol``.

    The simulator's outcome (``built``: not a recorded environment's costs or its judge's
    reward) is a float64 reward (R,) and cost (R, d) of the draws that ``select``
    just returned: a policy that keeps ``BasePolicy.select`` and ``BasePolicy.update`` then
    learns through ``update_built`` (the range checks only, the same learning). Any other
    policy or outcome goes through ``update``."""
    if (
        built
        and isinstance(pol, BasePolicy)
        and type(pol).select is BasePolicy.select
        and type(pol).update is BasePolicy.update
        and not {"select", "update"} & vars(pol).keys()
    ):
        return pol.update_built
    return pol.update


def _check_run_map(run_map: ArrayLike | None, n_runs: int, env_runs: int) -> IntArray | None:
    if run_map is None:
        return None
    rm = np.asarray(run_map)
    if rm.shape != (n_runs,) or not np.issubdtype(rm.dtype, np.integer):
        raise InvalidValueError(f"run_map must be ints of shape (R,) = ({n_runs},), got {rm.shape}")
    if rm.min() < 0 or rm.max() >= env_runs:
        raise InvalidValueError(f"run_map entries must be environment runs in [0, {env_runs - 1}]")
    return np.ascontiguousarray(rm, dtype=np.int64)


def simulate(
    policies: Mapping[str, BasePolicy],
    env: SkillEnv,
    batch: ProblemBatch | Problem,
    horizon: int,
    *,
    contexts: ArrayLike | None = None,
    context_weights: ArrayLike | None = None,
    chunk: int = 1000,
    run_map: ArrayLike | None = None,
    cost_count: str = "distinct",
    track_expected: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Trajectory]:
    """Run every policy for ``horizon`` rounds on the same skill stream.

    Parameters
    ----------
    policies : mapping of name -> policy
        Each with ``n_runs == env.n_runs == batch.n_runs``; they are advanced in place.
    env : SkillEnv
        The skill environment (replayable: metrics can ask it for the same rounds again).
    batch : ProblemBatch or Problem
        The instance of each run (costs for the realized cost vectors); a single Problem is
        shared by every run of the environment.
    horizon : int
        T, the number of rounds.
    contexts : array_like of int, shape (T,) or (T, R), optional
        The context of each round (contextual runs); passed to ``select``. A recorded-outcome
        environment (``msroute.outcome_env.OutcomeEnv``) gives its prompts' categories
        when neither ``contexts`` nor ``context_weights`` is given, and its prompts' recorded
        costs are the realized costs (the batch's cost table stays the policies' prior).
    context_weights : array_like, shape (X, N), optional
        Context ``x`` scores dimension ``n`` with weight ``context_weights[x, n] >= 0``: its
        reward is the sum-max on the skills with rows scaled by those weights (0/1 weights
        pick the case type's own dimensions).
    chunk : int, default 1000
        Rounds of skills fetched from the environment at a time.
    run_map : array_like of int, shape (R,), optional
        Run ``r`` of the batch reads the skills of run ``run_map[r]`` of the environment (the
        levels of a sweep share their seed's skill stream); default: run r reads run r.
    cost_count : {"distinct", "draws"}, default "distinct"
        How the realized cost of a round counts the routed experts: each distinct expert once
        (docs/architecture.md, the paper's ``l_t = sum_i 1[i in A_t] c_i``), or once per draw (an
        expert drawn twice costs twice; then ``E[l_t] = M C^T q_t`` and the surrogate box is exact).
        The two differ only for policies that may draw an expert more than once (OMD).
    track_expected : bool, default False
        Record ``Phi_t(q_t)`` for the policies whose decisions carry ``probs`` (the true regret
        needs it); it costs a sort of every round's skills, so it is off unless asked for.
    progress : callable, optional
        Called with the number of rounds done after each chunk.

    Returns
    -------
    dict of name -> Trajectory
    """
    t_total = check_positive_int(horizon, "horizon")
    batch = _as_batch(batch, env, run_map)
    per_round = len(policies) * batch.n_runs * (1 + batch.n_costs + int(track_expected)) * 8.0
    check_memory(
        per_round * t_total,
        f"simulate: the trajectories of {len(policies)} policy(ies) x {batch.n_runs} run(s) x "
        f"T = {t_total}",
        "use a smaller horizon or fewer runs, or simulate_summary (memory independent of T)",
    )
    played = _play(
        policies,
        env,
        batch,
        t_total,
        _Rounds,
        contexts=contexts,
        context_weights=context_weights,
        chunk=chunk,
        run_map=run_map,
        cost_count=cost_count,
        track_expected=track_expected,
        progress=progress,
    )
    recorders, expected, clock = played
    out: dict[str, Trajectory] = {}
    for name, pol in policies.items():
        final_q = pol.q
        rec = recorders[name]
        out[name] = Trajectory(
            policy=name,
            rewards=rec.rewards,
            costs=rec.costs,
            expected_rewards=expected.get(name),
            final_q=None if final_q is None else np.asarray(final_q, dtype=np.float64),
            wall_time=clock[name],
        )
    return out


def simulate_summary(
    policies: Mapping[str, BasePolicy],
    env: SkillEnv,
    batch: ProblemBatch | Problem,
    horizon: int,
    *,
    checkpoints: ArrayLike | None = None,
    keep_rewards: bool = False,
    contexts: ArrayLike | None = None,
    context_weights: ArrayLike | None = None,
    chunk: int = 1000,
    run_map: ArrayLike | None = None,
    cost_count: str = "distinct",
    progress: Callable[[int], None] | None = None,
) -> dict[str, RunSummary]:
    """``simulate`` without the per-round arrays: memory that does not grow with T.

    Every policy's time-averaged reward and cost, and its running average cost at the
    ``checkpoints``, are streamed as the rounds arrive; they equal, bit for bit, what
    ``msroute.metrics.time_averaged`` and ``msroute.metrics.running_average`` give on
    ``simulate``'s arrays.

    Parameters
    ----------
    policies, env, batch, horizon, contexts, context_weights, chunk, run_map, cost_count, progress
        As in ``simulate``.
    checkpoints : array_like of int, optional
        1-based round counts in ``[1, T]``, increasing (R2 at batch ends: ``B, 2B, ...``);
        default ``[T]``.
    keep_rewards : bool, default False
        Also keep every round's reward (T, R), e.g. for a rolling average.

    Returns
    -------
    dict of name -> RunSummary
    """
    t_total = check_positive_int(horizon, "horizon")
    batch = _as_batch(batch, env, run_map)
    cp = np.asarray([t_total] if checkpoints is None else checkpoints)
    if cp.ndim != 1 or cp.size == 0 or not np.issubdtype(cp.dtype, np.integer):
        raise InvalidValueError("checkpoints must be a non-empty 1-d array of round counts")
    if cp[0] < 1 or cp[-1] > t_total or np.any(np.diff(cp) <= 0):
        raise InvalidValueError(f"checkpoints must increase within [1, {t_total}]")
    marks = np.asarray(cp, dtype=np.int64)
    if keep_rewards:
        check_memory(
            len(policies) * batch.n_runs * 8.0 * t_total,
            f"simulate_summary: the rewards of {len(policies)} policy(ies) x {batch.n_runs} "
            f"run(s) x T = {t_total}",
            "use a smaller horizon or fewer runs, or keep_rewards=False",
        )
    recorders, _, clock = _play(
        policies,
        env,
        batch,
        t_total,
        lambda t, r, d: _Sums(t, r, d, marks, keep_rewards),
        contexts=contexts,
        context_weights=context_weights,
        chunk=chunk,
        run_map=run_map,
        cost_count=cost_count,
        track_expected=False,
        progress=progress,
    )
    out: dict[str, RunSummary] = {}
    for name, pol in policies.items():
        rec = recorders[name]
        final_q = pol.q
        out[name] = RunSummary(
            policy=name,
            avg_reward=rec.reward_sum.total() / t_total,
            avg_cost=rec.cost_sum.total() / t_total,
            checkpoints=marks,
            running_cost=rec.at_checkpoints,
            rewards=rec.rewards,
            final_q=None if final_q is None else np.asarray(final_q, dtype=np.float64),
            wall_time=clock[name],
        )
    return out


RecT = TypeVar("RecT", _Rounds, _Sums)


def _as_batch(
    batch: ProblemBatch | Problem, env: SkillEnv, run_map: ArrayLike | None
) -> ProblemBatch:
    """One instance shared by every run of the environment, or the batch given; the
    environment and the batch are checked by type first (``InvalidTypeError``), as both
    entry points read them before anything else."""
    if not isinstance(env, SkillEnv):
        raise InvalidTypeError(
            f"env must be a skill environment (StochasticEnv, RegimeSwitchingEnv, SequenceEnv, "
            f"OutcomeEnv or another SkillEnv), got {type(env).__name__}"
        )
    if not isinstance(batch, Problem | ProblemBatch):
        raise InvalidTypeError(
            f"batch must be a Problem or a ProblemBatch, got {type(batch).__name__}"
        )
    if isinstance(batch, Problem):
        n = env.n_runs if run_map is None else int(np.asarray(run_map).shape[0])
        return ProblemBatch(batch, n)
    return batch


class _Outcome:
    """A round's reward and realized cost of every run, from the policy's draws: the floats
    of ``msroute.core.reward.draws_sum_max_reward`` and of the batch's ``realized_cost`` (or
    ``draws_cost``), in one compiled pass (``msroute._outcome``)."""

    def __init__(self, batch: ProblemBatch, cost_count: str) -> None:
        from msroute import _outcome  # numba: imported on first use

        if cost_count not in ("distinct", "draws"):
            raise InvalidValueError(f"cost_count == {cost_count!r}, must be 'distinct' or 'draws'")
        self._kernel = _outcome.round_outcome
        self._no_cost = _outcome.NO_COST
        self.batch = batch
        self.costs = np.ascontiguousarray(batch.costs, dtype=np.float64)
        self.shape = (batch.n_runs, batch.m_draws)
        if cost_count == "draws":
            self.mode = _outcome.DRAW_COSTS
        elif batch.n_costs in (2, 3) and _outcome.blas_pairs_order():
            self.mode = _outcome.PAIR_COSTS
        else:  # summed by the batch (numpy's BLAS) after the pass
            self.mode = _outcome.NO_COST
        self.by_batch = self.mode == _outcome.NO_COST
        self.per_draw = cost_count == "draws"

    def __call__(
        self,
        policy: str,
        skills: FloatArray,
        rows: IntArray,
        draws: IntArray,
        recorded: FloatArray | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """Rewards (R,) and costs (R, d) of the draws (R, M); run r reads ``skills[rows[r]]``.

        ``recorded`` (R, K, d): the round's own cost of each expert in each run (a recorded
        outcome environment), used in place of the batch's cost table."""
        if draws.shape != self.shape or draws.dtype.kind not in "iu":
            raise InvalidValueError(
                f"policy {policy!r} returned draws of {draws.dtype} {draws.shape}, expected "
                f"integers of shape (R, M) = {self.shape}"
            )
        draws = np.ascontiguousarray(draws, dtype=np.int64)
        reward = np.empty(self.shape[0])
        cost = np.empty((self.shape[0], self.batch.n_costs))
        mode = self.mode if recorded is None else self._no_cost
        bad = self._kernel(skills, rows, draws, self.costs, mode, reward, cost)
        if bad >= 0:
            raise InvalidValueError(
                f"policy {policy!r} drew {draws[bad].tolist()} in run {bad}: expert indices "
                f"must be in [0, {self.batch.n_experts - 1}]"
            )
        if recorded is not None:
            k = self.batch.n_experts
            if self.per_draw:
                counted = draw_counts(draws, k)
            else:
                counted = draws_to_mask(draws, k).astype(np.float64)
            cost = np.einsum("rk,rkd->rd", counted, recorded)
        elif self.by_batch:
            cost = self.batch.realized_cost(draws_to_mask(draws, self.batch.n_experts))
        return reward, cost


def _play(
    policies: Mapping[str, BasePolicy],
    env: SkillEnv,
    batch: ProblemBatch,
    t_total: int,
    recorder: Callable[[int, int, int], RecT],
    *,
    contexts: ArrayLike | None,
    context_weights: ArrayLike | None,
    chunk: int,
    run_map: ArrayLike | None,
    cost_count: str,
    track_expected: bool,
    progress: Callable[[int], None] | None,
) -> tuple[dict[str, RecT], dict[str, FloatArray], dict[str, float]]:
    """The rounds of ``simulate`` and ``simulate_summary``: each policy's outcomes go to
    its recorder; returns the recorders, the expected rewards tracked and the seconds spent."""
    chunk = check_positive_int(chunk, "chunk")
    r, k, d = batch.n_runs, batch.n_experts, batch.n_costs
    runs = _check_run_map(run_map, r, env.n_runs)
    if env.n_experts != k or (runs is None and env.n_runs != r):
        hint = ""
        if env.n_experts != k and env.n_dims == k:
            hint = (
                "; the skills look transposed: they must be (dimensions, experts), so pass skills.T"
            )
        raise InvalidValueError(
            f"the environment has (R, K) = {(env.n_runs, env.n_experts)} but the problem batch "
            f"has {(r, k)}{hint}"
        )
    if progress is not None and not callable(progress):
        raise InvalidTypeError(f"progress must be a callable or None, got {progress!r:.80}")
    if not isinstance(policies, Mapping):
        raise InvalidTypeError(
            f"policies must be a mapping of name -> policy, got {type(policies).__name__}"
        )
    seen: dict[int, str] = {}
    for name, pol in policies.items():
        if id(pol) in seen:  # it would be stepped twice a round, both trajectories wrong
            raise InvalidValueError(
                f"policies {seen[id(pol)]!r} and {name!r} are the same object; build one each"
            )
        seen[id(pol)] = name
        if pol.n_runs != r or pol.n_experts != k or pol.m_draws != batch.m_draws:
            raise InvalidValueError(
                f"policy {name!r} has (R, K, M) = {(pol.n_runs, pol.n_experts, pol.m_draws)}, "
                f"the batch has {(r, k, batch.m_draws)}"
            )
        own = getattr(pol, "problem_batch", batch)  # a third-party policy may keep none
        if not (
            np.array_equal(own.costs, batch.costs)
            and np.array_equal(own.lo_ori, batch.lo_ori, equal_nan=True)
            and np.array_equal(own.hi_ori, batch.hi_ori, equal_nan=True)
        ):
            raise InvalidValueError(
                f"policy {name!r} was built for other costs or bounds than the batch it runs on"
            )
    outcome = _Outcome(batch, cost_count)
    recorded = getattr(env, "round_costs", None)  # a recorded-outcome environment's own costs
    judge = getattr(env, "judge", None)  # its team's answer, where not the best member's
    if contexts is None and context_weights is None and isinstance(env, OutcomeEnv):
        recorded_ctx = env.contexts(0, t_total)
        contexts = recorded_ctx if runs is None else recorded_ctx[:, runs]
        context_weights = env.context_weights()
    ctx_all, weights = check_contexts(contexts, context_weights, t_total, r, env.n_dims)
    every_run = np.arange(r, dtype=np.int64)
    env_runs = every_run if runs is None else runs  # each run's environment run
    names = list(policies)
    select = {n: _selector(policies[n], ctx_all) for n in names}
    learn = {n: _learner(policies[n], recorded is None and judge is None) for n in names}
    recorders = {n: recorder(t_total, r, d) for n in names}
    # Filled for the policies whose decisions carry their distribution (known at the first).
    expected: dict[str, FloatArray] = {}
    q_buf: dict[str, FloatArray] = {}
    clock = dict.fromkeys(names, 0.0)
    for start in range(0, t_total, chunk):
        stop = min(start + chunk, t_total)
        skills = np.ascontiguousarray(env.skills(start, stop), dtype=np.float64)
        if skills.shape != (stop - start, env.n_runs, env.n_dims, k):
            raise InvalidValueError(
                f"the environment gave skills of shape {skills.shape} for rounds [{start}, "
                f"{stop}), expected (rounds, R, N, K) = {(stop - start, env.n_runs, env.n_dims, k)}"
            )
        paid = None if recorded is None else np.asarray(recorded(start, stop), dtype=np.float64)
        for step in range(stop - start):
            t = start + step
            v, rows = skills[step], every_run if runs is None else runs  # run r reads v[rows[r]]
            round_cost = None if paid is None else paid[step, rows]
            ctx = None if ctx_all is None else ctx_all[t]
            if weights is not None and ctx is not None:
                v = context_scaled(v if runs is None else v[runs], weights, ctx)
                rows = every_run
            for name in names:
                pol = policies[name]
                tic = time.perf_counter()
                decision = select[name](ctx)
                draws = decision.draws
                if track_expected and decision.probs is not None:
                    if name not in q_buf:
                        q_buf[name] = np.empty((chunk, r, k))
                        expected[name] = np.empty((t_total, r))
                    q_buf[name][step] = decision.probs
                reward, cost = outcome(name, v, rows, draws, round_cost)
                if judge is not None:
                    reward = judge(t, env_runs, v, rows, draws, reward)
                learn[name](decision, reward, cost)
                clock[name] += time.perf_counter() - tic
                recorders[name].add(t, reward, cost)
        if q_buf:
            scored = skills if runs is None else skills[:, runs]
            if weights is not None and ctx_all is not None:
                scored = context_scaled(scored, weights, ctx_all[start:stop])
            for name in q_buf:
                expected[name][start:stop] = expected_reward(
                    q_buf[name][: stop - start], scored, batch.m_draws
                )
        if progress is not None:
            progress(stop)
    return recorders, expected, clock
