"""A recorded-outcome environment: each round one prompt of an outcome table arrives.

Real LLM traffic is not a Beta simulation: every query belongs to one task, the models' graded
answers to it are recorded, models fail together on hard prompts, and a call's price depends on
the prompt. ``OutcomeEnv`` replays an ``OutcomeTable``:

* each round draws one prompt per run (seeded; with replacement, or ``mode="permutation"``:
  passes over the table, each a fresh permutation);
* the prompt's category is the round's context, known before the decision
  (``OutcomeEnv.contexts``);
* the skills of the round are the prompt's recorded scores ``(N, K)``, so the sum-max reward of
  a team is the sum over dimensions of its best member's score;
* how a team's answer is combined (``team_answer``): ``"best"``, the paper's sum-max, is an
  oracle picker that always keeps the best member's answer, an upper bound for a team of LLMs
  whose answer comes from a judge, a vote or a verifier; ``"judge:P"`` keeps the best member's
  answer with probability ``P``, else a member drawn at random (one of the M draws, so a member
  drawn twice is twice as likely); ``"random"`` is ``"judge:0"`` (``TeamJudge``);
* the realized cost of the round is the prompt's recorded cost of each distinct model called
  (``OutcomeEnv.round_costs``: ``msroute.simulate.simulate`` uses it in place of the
  problem's cost table, which stays the policies' prior).

Run ``r``'s prompt sequence depends only on its own seed, as in the other environments.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from msroute._memory import check_memory
from msroute._seeding import SeedArg, child_seed, run_seed_sequences
from msroute._validation import FloatArray, IntArray, check_positive_int, parse_decimal
from msroute.datasets.outcomes import OutcomeTable
from msroute.envs import check_range
from msroute.errors import InvalidValueError

__all__ = ["TEAM_ANSWERS", "OutcomeEnv", "SampleMode", "TeamJudge", "best_pick"]

#: Spawn-key domain of the prompt streams ("msop").
_PROMPT_DOMAIN = 0x6D736F70
#: Spawn-key domain of the team judge's coins ("msjd"), apart from the prompts'.
_JUDGE_DOMAIN = 0x6D736A64

#: How a team's answer is combined: the forms ``team_answer`` takes.
TEAM_ANSWERS = ("best", "judge:P", "random")


def best_pick(team_answer: str) -> float:
    """The probability that a team's answer is its best member's: 1 for ``"best"`` (sum-max),
    0 for ``"random"``, ``P`` for ``"judge:P"`` (``P`` in ``[0, 1]``).

    Examples
    --------
    >>> best_pick("best"), best_pick("judge:0.8"), best_pick("random")
    (1.0, 0.8, 0.0)
    """
    if team_answer == "best":
        return 1.0
    if team_answer == "random":
        return 0.0
    head, colon, tail = str(team_answer).partition(":")
    if head == "judge" and colon:
        try:
            p = parse_decimal(tail.strip())
        except ValueError:
            p = math.nan
        if 0.0 <= p <= 1.0:
            return p
    raise InvalidValueError(
        f"team_answer == {team_answer!r}, must be 'best' (the best member answers: sum-max), "
        "'judge:P' (the best member with probability P in [0, 1], else a random one) or 'random'"
    )


class TeamJudge:
    """A team's answer as a judge picks it: the best member's with probability ``pick``, else
    that of one of the M draws at random (``OutcomeEnv.judge``).

    The coins are drawn per (round, environment run) from the environment's seed, apart from
    the prompts' stream: every policy and every budget level of a run meets the same judge.
    """

    def __init__(self, pick: float, seeds: tuple[np.random.SeedSequence, ...], horizon: int):
        self.pick = pick
        coins = np.empty((horizon, len(seeds), 2))
        for i, s in enumerate(seeds):
            coins[:, i] = np.random.default_rng(child_seed(s, _JUDGE_DOMAIN)).random((horizon, 2))
        coins.setflags(write=False)
        self.coins = coins

    def __call__(
        self,
        t: int,
        env_runs: IntArray,
        skills: FloatArray,
        rows: IntArray,
        draws: IntArray,
        best: FloatArray,
    ) -> FloatArray:
        """The rewards (R,) of round ``t``: ``best`` (R,), the sum-max of each run's draws
        (R, M) on ``skills[rows[r]]`` (N, K), where the judge picks the best member, else the
        score summed over the dimensions of the draw it picks at random; ``env_runs`` (R,):
        each run's environment run (its coins)."""
        coin = self.coins[t, env_runs]
        m = draws.shape[1]
        which = np.minimum((coin[:, 1] * m).astype(np.int64), m - 1)
        member = draws[np.arange(draws.shape[0]), which]
        scored = skills[rows, :, member].sum(axis=-1)
        return np.where(coin[:, 0] < self.pick, best, scored)


SampleMode = Literal["replace", "permutation"]


class OutcomeEnv:
    """Rounds of recorded prompts, batched over runs.

    Parameters
    ----------
    table : OutcomeTable
    horizon : int
        T, rounds per run.
    n_runs : int, default 1
    seed : int, SeedSequence or sequence of those, optional
        One seed, or one per run (as the other environments take them).
    mode : {"replace", "permutation"}, default "replace"
        Prompts drawn uniformly with replacement, or passes over the table in random order.
    team_answer : str, default "best"
        How a team's answer is combined (module docstring, ``best_pick``).

    Attributes
    ----------
    n_runs, n_dims, n_experts, n_contexts, horizon : int
    prompts : ndarray of int, shape (T, R)
        The prompt of each round of each run.
    judge : TeamJudge or None
        The team's answer where it is not the best member's (``msroute.simulate`` applies it
        to each round's sum-max reward); None for ``"best"``.

    Examples
    --------
    >>> from msroute.datasets.outcomes import read_outcomes
    >>> table = read_outcomes("prompt_id,a,b,a|usd,b|usd\\np1,1,0,1,2\\np2,0,1,1,2\\n", "t.csv")
    >>> env = OutcomeEnv(table, horizon=4, n_runs=2, seed=0, mode="permutation")
    >>> env.skills(0, 4).shape, env.round_costs(0, 4).shape
    ((4, 2, 1, 2), (4, 2, 2, 1))
    """

    def __init__(
        self,
        table: OutcomeTable,
        *,
        horizon: int,
        n_runs: int = 1,
        seed: SeedArg = None,
        mode: SampleMode = "replace",
        team_answer: str = "best",
    ) -> None:
        if not isinstance(table, OutcomeTable):
            raise InvalidValueError(f"table must be an OutcomeTable, got {type(table).__name__}")
        t = check_positive_int(horizon, "horizon")
        r = check_positive_int(n_runs, "n_runs")
        if mode not in ("replace", "permutation"):
            raise InvalidValueError(f"mode == {mode!r}, must be 'replace' or 'permutation'")
        pick = best_pick(team_answer)
        check_memory(  # the prompt of each round (int64), and the judge's two coins (float64)
            8.0 * t * r * (1 if pick == 1.0 else 3),
            f"OutcomeEnv: T = {t} rounds x {r} run(s)",
            "use a smaller horizon or fewer runs",
        )
        p = table.n_prompts
        prompts = np.empty((t, r), dtype=np.int64)
        seeds = run_seed_sequences(seed, r)
        for i, s in enumerate(seeds):
            rng = np.random.default_rng(child_seed(s, _PROMPT_DOMAIN))
            if mode == "replace":
                prompts[:, i] = rng.integers(0, p, size=t)
            else:
                passes = -(-t // p)
                prompts[:, i] = np.concatenate([rng.permutation(p) for _ in range(passes)])[:t]
        prompts.setflags(write=False)
        self.table = table
        self.mode: SampleMode = mode
        self.prompts: IntArray = prompts
        self.team_answer = team_answer
        self.judge = None if pick == 1.0 else TeamJudge(pick, seeds, t)
        self.n_runs = r
        self.n_dims = table.n_dims
        self.n_experts = table.n_experts
        self.n_contexts = table.n_contexts
        self.horizon: int | None = t

    def _rows(self, start: int, stop: int) -> IntArray:
        a, b = check_range(start, stop, self.horizon)
        return self.prompts[a:b]

    def skills(self, start: int, stop: int) -> FloatArray:
        """The recorded scores of rounds ``[start, stop)``, shape (stop - start, R, N, K)."""
        return np.asarray(self.table.scores[self._rows(start, stop)], dtype=np.float64)

    def mean_skills(self, start: int, stop: int) -> FloatArray:
        """The recorded scores: a recorded round is its own expectation."""
        return self.skills(start, stop)

    def contexts(self, start: int, stop: int) -> IntArray:
        """The category of each round's prompt, shape (stop - start, R)."""
        return np.asarray(self.table.category[self._rows(start, stop)], dtype=np.int64)

    def round_costs(self, start: int, stop: int) -> FloatArray:
        """Each model's recorded cost on each round's prompt, shape (stop - start, R, K, d)."""
        return np.asarray(self.table.costs[self._rows(start, stop)], dtype=np.float64)

    def context_weights(self) -> FloatArray:
        """Weights (X, N) of the reward dimensions per context: all ones (a prompt's reward is
        its recorded scores, whatever its category)."""
        return np.ones((self.n_contexts, self.n_dims))

    def __repr__(self) -> str:
        return (
            f"OutcomeEnv(prompts={self.table.n_prompts}, n_runs={self.n_runs}, "
            f"n_experts={self.n_experts}, n_contexts={self.n_contexts}, horizon={self.horizon}, "
            f"mode={self.mode!r}, team_answer={self.team_answer!r})"
        )
