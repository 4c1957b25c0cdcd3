"""A tiny simulation loop for the policy tests (independent of msroute.simulate)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msroute import batch_sum_max_reward
from msroute.policies.base import BasePolicy, draws_to_mask


@dataclass
class Record:
    draws: np.ndarray  # (T, R, M)
    rewards: np.ndarray  # (T, R)
    costs: np.ndarray  # (T, R, d)


def beta_skills(
    means: np.ndarray, n_runs: int, rounds: int, seed: int, kappa: float = 20.0
) -> np.ndarray:
    """Stochastic Beta skills around ``means`` (N, K): shape (T, R, N, K), one seeded stream."""
    rng = np.random.default_rng(seed)
    a, b = kappa * means, kappa * (1.0 - means)
    return rng.beta(a, b, size=(rounds, n_runs, *means.shape))


def run(policy: BasePolicy, skills: np.ndarray) -> Record:
    """Play ``policy`` on the skill sequence (T, R, N, K) with bandit feedback."""
    rounds, n_runs = skills.shape[:2]
    k, m, d = policy.n_experts, policy.m_draws, policy.n_costs
    rec = Record(
        draws=np.empty((rounds, n_runs, m), dtype=np.int64),
        rewards=np.empty((rounds, n_runs)),
        costs=np.empty((rounds, n_runs, d)),
    )
    for t in range(rounds):
        decision = policy.select()
        draws = decision.draws
        mask = draws_to_mask(draws, k)
        reward = batch_sum_max_reward(skills[t], mask)
        cost = policy.problem_batch.realized_cost(mask)
        policy.update(decision, reward, cost)
        rec.draws[t], rec.rewards[t], rec.costs[t] = draws, reward, cost
    return rec
