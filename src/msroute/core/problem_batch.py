"""R problem instances stacked for batched runs, and the cost of a routing per run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from msroute._validation import FloatArray, check_positive_int
from msroute.core.problem import Problem
from msroute.errors import InvalidTypeError, InvalidValueError

__all__ = ["ProblemBatch", "draws_cost", "surrogate_cost", "team_cost"]


class ProblemBatch:
    """R problem instances stacked for batched runs (one per run, same K, d and M).

    Each seed of the paper's experiments samples its own pool of workers, so every run of a
    batched sweep has its own costs and bounds. Policies and the simulator work on these
    stacked arrays; a single ``Problem`` broadcast to ``n_runs`` is the common case.

    Parameters
    ----------
    problems : Problem or sequence of Problem
        One problem shared by all runs, or one per run.
    n_runs : int, optional
        Number of runs R; required with a single problem, checked against a sequence.

    Attributes
    ----------
    costs : ndarray, shape (R, K, d)
    lo, hi : ndarray, shape (R, d)
        Surrogate box ``S`` per run.
    lo_ori, hi_ori : ndarray, shape (R, d)
        Original box ``S_ori`` per run (infinite where unbounded).
    """

    def __init__(self, problems: Problem | Sequence[Problem], n_runs: int | None = None) -> None:
        if isinstance(problems, Problem):
            r = check_positive_int(1 if n_runs is None else n_runs, "n_runs")
            plist = [problems] * r
        else:
            plist = list(problems)
            if not plist:
                raise InvalidValueError("problems must hold at least one Problem")
            for i, p in enumerate(plist):
                if not isinstance(p, Problem):
                    raise InvalidTypeError(
                        f"problems[{i}] must be a Problem, got {type(p).__name__}"
                    )
            if n_runs is not None and n_runs != len(plist):
                raise InvalidValueError(f"n_runs == {n_runs} but {len(plist)} problems were given")
        first = plist[0]
        for i, p in enumerate(plist[1:], start=1):
            if (p.n_experts, p.n_costs, p.m_draws) != (
                first.n_experts,
                first.n_costs,
                first.m_draws,
            ):
                raise InvalidValueError(
                    f"problems[{i}] has (K, d, M) = {(p.n_experts, p.n_costs, p.m_draws)}, "
                    f"problems[0] has {(first.n_experts, first.n_costs, first.m_draws)}; "
                    "a batch needs them equal"
                )
        self.problems: tuple[Problem, ...] = tuple(plist)
        self.n_runs = len(plist)
        self.n_experts = first.n_experts
        self.n_costs = first.n_costs
        self.m_draws = first.m_draws
        self.costs: FloatArray = np.stack([p.costs for p in plist])
        boxes = [p.surrogate_box() for p in plist]
        self.lo: FloatArray = np.stack([b[0] for b in boxes])
        self.hi: FloatArray = np.stack([b[1] for b in boxes])
        ori = [p.original_box() for p in plist]
        self.lo_ori: FloatArray = np.stack([b[0] for b in ori])
        self.hi_ori: FloatArray = np.stack([b[1] for b in ori])
        self.cbar = max(p.cbar for p in plist)

    def surrogate_cost(self, q: FloatArray) -> FloatArray:
        """``C^T q`` per run: q (R, K) -> (R, d)."""
        return surrogate_cost(q, self.costs)

    def draws_cost(self, draws: np.ndarray) -> FloatArray:
        """Cost of the draws, an expert drawn twice counted twice: draws (R, M) -> (R, d)."""
        return draws_cost(draws, self.costs)

    def realized_cost(self, mask: np.ndarray) -> FloatArray:
        """Cost of the routed subsets, each distinct expert counted once: mask (R, K) -> (R, d)."""
        return team_cost(mask, self.costs)


def surrogate_cost(q: FloatArray, costs: FloatArray) -> FloatArray:
    """``C^T q`` per run: q (R, K), costs (R, K, d) -> (R, d)."""
    return np.asarray(np.matmul(q[:, None, :], costs)[:, 0, :], dtype=np.float64)


def draws_cost(draws: np.ndarray, costs: FloatArray) -> FloatArray:
    """Cost of the draws (R, M), an expert drawn twice counted twice: -> (R, d)."""
    picked = np.take_along_axis(costs, draws[:, :, None], axis=1)  # (R, M, d)
    return np.asarray(picked.sum(axis=1), dtype=np.float64)


def team_cost(mask: np.ndarray, costs: FloatArray) -> FloatArray:
    """Cost of the routed subsets (R, K) masks, each distinct expert once: -> (R, d)."""
    weights = mask.astype(np.float64)[:, None, :]
    return np.asarray(np.matmul(weights, costs)[:, 0, :], dtype=np.float64)
