"""A team's answer as it is really combined: best (sum-max), judge:P and random."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from msroute import Constraints, Problem
from msroute.cli import main
from msroute.core.oracle import contextual_opt
from msroute.core.reward import expected_reward
from msroute.errors import InvalidValueError
from msroute.outcome_env import OutcomeEnv, best_pick
from msroute.policies.registry import make_policy
from msroute.simulate import simulate
from test_outcomes import small_table, write_csv


@pytest.mark.parametrize("bad", ["judge", "judge:", "judge:1.5", "judge:-0.1", "judge:x", "max"])
def test_a_team_answer_is_best_judge_or_random(bad):
    assert best_pick("judge:0.25") == 0.25 and best_pick("judge:1") == 1.0
    with pytest.raises(InvalidValueError, match=r"team_answer == .*'judge:P'"):
        best_pick(bad)
    with pytest.raises(InvalidValueError, match="team_answer"):
        OutcomeEnv(small_table(), horizon=5, team_answer=bad)


def test_the_judge_keeps_the_best_answer_with_probability_p_else_a_random_draws():
    t = small_table(1, p=30, k=4)
    horizon, p = 4000, 0.7
    problem = Problem(t.mean_costs(), 2, Constraints(upper=[None]))
    q = [0.1, 0.2, 0.3, 0.4]
    trajectories = {}
    for answer in ("best", f"judge:{p}", "random"):
        env = OutcomeEnv(t, horizon=horizon, n_runs=2, seed=[3, 4], team_answer=answer)
        pol = make_policy("fixed", problem, horizon=horizon, q=q, n_runs=2, seed=0)
        trajectories[answer] = (env, simulate({"f": pol}, env, problem, horizon)["f"])
    env, best = trajectories["best"]
    assert env.judge is None
    judged_env, judged = trajectories[f"judge:{p}"]
    assert judged_env.judge is not None
    scores = t.scores[env.prompts, 0]  # (T, R, K)
    coins = judged_env.judge.coins  # (T, R, 2)
    # Every round, replayed by hand: the best member's score where the coin says so, else the
    # score of the draw the second coin picks. The policy's draws are the same in each env
    # (one seed), so the best member's score is the sum-max trajectory's.
    for r in range(2):
        picked = coins[:, r, 0] < p
        np.testing.assert_array_equal(judged.rewards[picked, r], best.rewards[picked, r])
        others = judged.rewards[~picked, r]
        assert np.all(others <= best.rewards[~picked, r])
        assert set(np.unique(others)) <= {0.0, 1.0}
    assert 0.6 < np.mean(coins[:, :, 0] < p) < 0.8
    # In expectation: P times the sum-max plus (1 - P) times one draw's score, q . v.
    one_draw = float(np.mean(scores @ np.asarray(q)))
    _, rand = trajectories["random"]
    assert abs(rand.rewards.mean() - one_draw) < 0.02
    expected = p * best.rewards.mean() + (1 - p) * one_draw
    assert abs(judged.rewards.mean() - expected) < 0.02
    assert rand.rewards.mean() < judged.rewards.mean() < best.rewards.mean()


def test_opt_ctx_under_a_judge_mixes_the_team_and_one_draw():
    rng = np.random.default_rng(0)
    skills = (rng.random((300, 1, 4)) < [0.3, 0.5, 0.6, 0.7]).astype(float)
    contexts = rng.integers(0, 2, 300)
    costs = np.array([[0.1], [0.2], [0.5], [1.0]])
    problem = Problem(costs, 2, Constraints(upper=[0.8]))
    ones = np.ones((2, 1))
    best = contextual_opt(skills, contexts, ones, problem, floor=0.0)
    judged = contextual_opt(skills, contexts, ones, problem, floor=0.0, pick=0.8)
    rand = contextual_opt(skills, contexts, ones, problem, floor=0.0, pick=0.0)
    one = contextual_opt(skills, contexts, ones, Problem(costs, 1, problem.constraints), floor=0.0)
    assert rand.value <= judged.value <= best.value
    # A random draw's answer is one draw's: its optimum is M = 1's under the same box.
    lo, hi = problem.surrogate_box()
    assert rand.value <= one.value + 1e-6
    # The reported value is the judge's expected reward of its routing, computed afresh.
    mine = [contexts == x for x in range(2)]
    value = sum(
        float(
            np.sum(
                0.8 * expected_reward(judged.q[x], skills[mine[x]], 2)
                + 0.2 * expected_reward(judged.q[x], skills[mine[x]], 1)
            )
        )
        for x in range(2)
    ) / len(skills)
    assert value == pytest.approx(judged.value, abs=1e-9)
    assert judged.gap <= 1e-6 and np.all(judged.cost <= hi + 1e-9) and lo[0] <= judged.cost[0]
    with pytest.raises(InvalidValueError, match=r"pick == 1\.5"):
        contextual_opt(skills, contexts, ones, problem, floor=0.0, pick=1.5)


def test_bench_scores_teams_by_the_answer_asked(tmp_path, capsys):
    path = tmp_path / "mine.csv"
    write_csv(path, small_table(3, p=60))
    out = tmp_path / "out"
    args = ["bench", "--outcomes", str(path), "--seeds", "1", "--horizon", "300", "--m-draws"]
    args += ["2", "--policies", "omd", "--budgets", "2", "--out", str(out), "--jobs", "1"]
    rows = {}
    for answer in ("best", "judge:0.5"):
        assert main([*args, "--team-answer", answer, "--quiet", "--no-plot"]) == 0
        with (out / "bench-mine.csv").open() as fh:
            rows[answer] = next(iter(csv.DictReader(fh)))
    assert rows["judge:0.5"]["team_answer"] == "judge:0.5"
    assert float(rows["judge:0.5"]["opt_reward"]) < float(rows["best"]["opt_reward"])
    assert main(["bench", "web", "--team-answer", "random", "--quiet"]) == 2
    assert "--team-answer applies to outcome tables" in capsys.readouterr().err
