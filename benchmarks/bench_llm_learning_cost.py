"""What learning costs on the packaged LLM table: OMD against per-context Thompson sampling.

``OPT^ctx`` knows every task's best model in hindsight; an online policy has to find it from
bandit feedback, about 1,400 queries per task (14 tasks, 9 models) at T = 20,000. This script
measures that learning cost with a reference that is known to be near-optimal for independent
Bernoulli arms: Thompson sampling with one ``Beta(1, 1)`` posterior per (task, model), and no
budget at all (so it can only do better than a budgeted policy). It runs beside contextual OMD
in the live router's configuration (``msroute.policies.live``, as ``msroute bench`` runs it) at
the generous budget ($0.0002 per query, where OMD spends about two thirds of it, so the budget
does not bind) on the same prompt sequences (the bench's seeds), and prints each policy's gap to the
best model per task in hindsight. It also prints how much of that reference is in-sample luck:
the best model per task in the whole table, scored on the sequence.

For a team of two (M = 2) it runs two unconstrained learners against the best pair of distinct
models per task in hindsight: Thompson sampling over the 36 pairs with the team's reward only
(what msroute observes), and Thompson sampling that routes the two best of per-model samples
and sees *each* member's score (semi-bandit feedback: more than msroute observes).

Usage: ``python benchmarks/bench_llm_learning_cost.py [T ...]`` (default 20000 80000).
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from msroute.experiments import outcomes
from msroute.outcome_env import OutcomeEnv
from msroute.policies.live import live_kwargs
from msroute.policies.registry import make_policy
from msroute.problem_batch import ProblemBatch
from msroute.simulate import simulate_summary

BUDGET = 2e-4
SEEDS = 5


def hindsight_best(skills: np.ndarray, contexts: np.ndarray, n_contexts: int) -> float:
    """Mean reward of the best model per context on this sequence (unconstrained OPT^ctx)."""
    total = 0.0
    for x in range(n_contexts):
        rows = skills[contexts == x]
        if rows.size:
            total += rows.mean(axis=0).max() * rows.shape[0]
    return total / skills.shape[0]


def thompson(skills: np.ndarray, contexts: np.ndarray, n_contexts: int, seed: int) -> float:
    """Per-context Thompson sampling on 0/1-graded scores (fractional scores as Bernoulli
    means), no budget: the mean reward over the sequence."""
    rng = np.random.default_rng(seed)
    k = skills.shape[1]
    alpha = np.ones((n_contexts, k))
    beta = np.ones((n_contexts, k))
    total = 0.0
    for t in range(skills.shape[0]):
        x = contexts[t]
        i = int(np.argmax(rng.beta(alpha[x], beta[x])))
        y = float(skills[t, i])
        total += y
        alpha[x, i] += y
        beta[x, i] += 1.0 - y
    return total / skills.shape[0]


def population_best(skills: np.ndarray, contexts: np.ndarray, table_means: np.ndarray) -> float:
    """Mean reward on this sequence of the model that is best per context in the whole table
    (``table_means`` (X, K)): the hindsight reference without its in-sample luck."""
    total = 0.0
    for x in range(table_means.shape[0]):
        rows = skills[contexts == x]
        if rows.size:
            total += rows[:, int(table_means[x].argmax())].sum()
    return total / skills.shape[0]


def pair_skills(skills: np.ndarray) -> np.ndarray:
    """The team reward of every pair of distinct models, round by round: (T, K) -> (T, pairs).
    A pair is then one arm, for ``hindsight_best`` and ``thompson`` alike."""
    pairs = itertools.combinations(range(skills.shape[1]), 2)
    return np.stack([np.maximum(skills[:, i], skills[:, j]) for i, j in pairs], axis=1)


def thompson_top2(skills: np.ndarray, contexts: np.ndarray, n_contexts: int, seed: int) -> float:
    """Per-context Thompson sampling that routes the two best per-model samples and learns
    from each member's own score (semi-bandit feedback); no budget."""
    rng = np.random.default_rng(seed)
    k = skills.shape[1]
    alpha = np.ones((n_contexts, k))
    beta = np.ones((n_contexts, k))
    total = 0.0
    for t in range(skills.shape[0]):
        x = contexts[t]
        i, j = np.argsort(-rng.beta(alpha[x], beta[x]))[:2]
        yi, yj = float(skills[t, i]), float(skills[t, j])
        total += max(yi, yj)
        alpha[x, [i, j]] += [yi, yj]
        beta[x, [i, j]] += [1.0 - yi, 1.0 - yj]
    return total / skills.shape[0]


def main(horizons: list[int]) -> None:
    table = outcomes.load_table(outcomes.LLMROUTER)
    x_n = table.n_contexts
    for horizon in horizons:
        cfg = outcomes.OutcomeBenchConfig(
            table=outcomes.LLMROUTER, seeds=SEEDS, horizon=horizon, m_draws=(1,)
        )
        env = OutcomeEnv(
            table,
            horizon=horizon,
            n_runs=SEEDS,
            seed=[np.random.SeedSequence(s) for s in cfg.seed_list],
        )
        skills = env.skills(0, horizon).sum(axis=2)  # (T, R, K): one reward dimension
        contexts = env.contexts(0, horizon)
        best = [
            hindsight_best(skills[:, r], contexts[:, r], table.n_contexts) for r in range(SEEDS)
        ]
        ts = [thompson(skills[:, r], contexts[:, r], table.n_contexts, r) for r in range(SEEDS)]
        batch = ProblemBatch(outcomes._problems(table, 1, [BUDGET], SEEDS, 0))
        seeds = [np.random.SeedSequence([s, outcomes._POLICY_KEY]) for s in cfg.seed_list]
        kwargs = live_kwargs("omd", 1, table.n_contexts)
        pol = make_policy("omd", batch, horizon=horizon, seed=seeds, **kwargs)
        run = simulate_summary({"omd": pol}, env, batch, horizon)["omd"]
        omd = np.asarray(run.avg_reward)
        spend = np.asarray(run.avg_cost)[:, 0] / BUDGET
        b = float(np.mean(best))
        means = np.array(
            [table.scores[table.category == x].sum(axis=1).mean(axis=0) for x in range(x_n)]
        )
        pop = [population_best(skills[:, r], contexts[:, r], means) for r in range(SEEDS)]
        print(
            f"T = {horizon}, M = 1: best per task in hindsight {b:.4f} (the table's best per "
            f"task, scored on the sequence: {np.mean(pop):.4f}); "
            f"per-context TS (no budget) {np.mean(ts):.4f} (gap {b - np.mean(ts):.4f}); "
            f"contextual OMD at ${BUDGET:g} {omd.mean():.4f} (gap {b - omd.mean():.4f}, "
            f"spend {spend.min():.2f}-{spend.max():.2f} of the budget)",
            flush=True,
        )
        # The best pair per task in hindsight, and Thompson sampling over the pairs from the
        # team's reward only: the M = 1 functions on the pairs' team rewards.
        teams = [pair_skills(skills[:, r]) for r in range(SEEDS)]
        pair = np.mean([hindsight_best(teams[r], contexts[:, r], x_n) for r in range(SEEDS)])
        team = np.mean([thompson(teams[r], contexts[:, r], x_n, r) for r in range(SEEDS)])
        semi = np.mean([thompson_top2(skills[:, r], contexts[:, r], x_n, r) for r in range(SEEDS)])
        print(
            f"T = {horizon}, M = 2: best pair per task in hindsight {pair:.4f}; TS over pairs, "
            f"team reward (no budget) {team:.4f} (gap {pair - team:.4f}); TS top two, each "
            f"member's score seen (no budget) {semi:.4f} (gap {pair - semi:.4f})",
            flush=True,
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [20000, 80000])
