"""Run policies on a skill environment, batched over runs, and record their trajectories.

One round (docs/architecture.md): the environment gives ``skills (R, N, K)``; each policy's
``select`` gives the M draws; the routed subset is the distinct draws; the reward is the sum-max of
the subset and the realized cost the sum of the distinct routed experts' cost vectors; ``update``
sees only these. Every policy steps on the *same* skills each round (common random numbers),
so comparisons between policies are paired.

For policies whose decisions carry their sampling distribution (``Decision.probs``, e.g.
OMD-Approachability) the simulator can also record the exact expected reward ``Phi_t(q_t)`` of
the policy actually played each round, which the true regret of eq. (4) needs; it is computed in
vectorized blocks, never in the per-round loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from msroute._memory import check_memory
from msroute._validation import FloatArray, IntArray, check_contexts, check_positive_int
from msroute.errors import InvalidValueError
from msroute.policies.base import BasePolicy, draws_to_mask
from msroute.problem import Problem, ProblemBatch
from msroute.reward import batch_sum_max_reward, expected_reward

__all__ = ["SkillSource", "Trajectory", "simulate"]


class SkillSource(Protocol):
    """What the simulator needs of an environment: replayable skills of any round range."""

    n_runs: int
    n_dims: int
    n_experts: int

    def skills(self, start: int, stop: int) -> FloatArray:
        """Skills of rounds ``[start, stop)``, shape (stop - start, R, N, K)."""
        ...


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


def _check_run_map(run_map: ArrayLike | None, n_runs: int, env_runs: int) -> IntArray | None:
    if run_map is None:
        return None
    rm = np.asarray(run_map)
    if rm.shape != (n_runs,) or not np.issubdtype(rm.dtype, np.integer):
        raise InvalidValueError(f"run_map must be ints of shape (R,) = ({n_runs},), got {rm.shape}")
    if rm.min() < 0 or rm.max() >= env_runs:
        raise InvalidValueError(f"run_map entries must be environment runs in [0, {env_runs - 1}]")
    return np.asarray(rm, dtype=np.int64)


def simulate(
    policies: Mapping[str, BasePolicy],
    env: SkillSource,
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
    env : SkillSource
        The skill environment (replayable: metrics can ask it for the same rounds again).
    batch : ProblemBatch or Problem
        The instance of each run (costs for the realized cost vectors); a single Problem is
        shared by every run of the environment.
    horizon : int
        T, the number of rounds.
    contexts : array_like of int, shape (T,) or (T, R), optional
        The context of each round (contextual runs); passed to ``select``.
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
    chunk = check_positive_int(chunk, "chunk")
    if isinstance(batch, Problem):  # one instance shared by every run of the environment
        n = env.n_runs if run_map is None else int(np.asarray(run_map).shape[0])
        batch = ProblemBatch(batch, n)
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
    for name, pol in policies.items():
        if pol.n_runs != r or pol.n_experts != k or pol.m_draws != batch.m_draws:
            raise InvalidValueError(
                f"policy {name!r} has (R, K, M) = {(pol.n_runs, pol.n_experts, pol.m_draws)}, "
                f"the batch has {(r, k, batch.m_draws)}"
            )
    if cost_count not in ("distinct", "draws"):
        raise InvalidValueError(f"cost_count == {cost_count!r}, must be 'distinct' or 'draws'")
    by_draw = cost_count == "draws"
    ctx_all, weights = check_contexts(contexts, context_weights, t_total, r, env.n_dims)
    names = list(policies)
    per_round = len(names) * r * (1 + d + (1 if track_expected else 0)) * 8.0
    check_memory(
        per_round * t_total,
        f"simulate: the trajectories of {len(names)} policy(ies) x {r} run(s) x T = {t_total}",
        "use a smaller horizon or fewer runs",
    )
    rewards = {n: np.empty((t_total, r)) for n in names}
    costs = {n: np.empty((t_total, r, d)) for n in names}
    # Filled for the policies whose decisions carry their distribution (known at the first).
    expected: dict[str, FloatArray] = {}
    q_buf: dict[str, FloatArray] = {}
    clock = dict.fromkeys(names, 0.0)
    for start in range(0, t_total, chunk):
        stop = min(start + chunk, t_total)
        skills = env.skills(start, stop)
        for step in range(stop - start):
            t = start + step
            v = skills[step] if runs is None else skills[step][runs]
            ctx = None if ctx_all is None else ctx_all[t]
            if weights is not None and ctx is not None:
                v = v * weights[ctx][:, :, None]
            for name in names:
                pol = policies[name]
                tic = time.perf_counter()
                decision = pol.select(ctx)
                draws = decision.draws
                if track_expected and decision.probs is not None:
                    if name not in q_buf:
                        q_buf[name] = np.empty((chunk, r, k))
                        expected[name] = np.empty((t_total, r))
                    q_buf[name][step] = decision.probs
                mask = draws_to_mask(draws, k)
                reward = batch_sum_max_reward(v, mask)
                cost = batch.draws_cost(draws) if by_draw else batch.realized_cost(mask)
                pol.update(decision, reward, cost)
                clock[name] += time.perf_counter() - tic
                rewards[name][t] = reward
                costs[name][t] = cost
        if q_buf:
            scored = skills if runs is None else skills[:, runs]
            if weights is not None and ctx_all is not None:
                scored = scored * weights[ctx_all[start:stop]][..., None]
            for name in q_buf:
                expected[name][start:stop] = expected_reward(
                    q_buf[name][: stop - start], scored, batch.m_draws
                )
        if progress is not None:
            progress(stop)
    out: dict[str, Trajectory] = {}
    for name in names:
        pol = policies[name]
        final_q = getattr(pol, "q", None)
        out[name] = Trajectory(
            policy=name,
            rewards=rewards[name],
            costs=costs[name],
            expected_rewards=expected.get(name),
            final_q=None if final_q is None else np.asarray(final_q, dtype=np.float64),
            wall_time=clock[name],
        )
    return out
