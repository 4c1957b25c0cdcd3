"""Fixed routing distributions: ``uniform`` (the paper's natural reference) and ``fixed`` (any q).

Each round both draw M experts i.i.d. from a distribution that never changes, exactly as OMD
draws from its ``q``: the team is the set of distinct draws. They learn nothing, so they are the
reference a learning policy must beat, and ``fixed`` evaluates any candidate ``q`` (for example
OPT of ``msroute.best_fixed_policy``) on the same skill stream as the learners.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from msroute._seeding import SeedArg
from msroute._validation import BoolArray, FloatArray, IntArray, as_float_array
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.errors import InvalidValueError
from msroute.policies.base import BasePolicy, Decision, sample_multinomial

__all__ = ["FixedPolicy", "UniformPolicy"]


class FixedPolicy(BasePolicy):
    """M i.i.d. draws each round from a fixed routing distribution ``q``.

    Parameters
    ----------
    problem : Problem, sequence of Problem or ProblemBatch
    horizon : int
        T (unused; part of the common constructor).
    n_runs : int, optional
    seed : int, SeedSequence or a sequence of them, optional
    q : array_like, shape (K,) or (R, K), or mapping of expert name -> probability, optional
        The distribution (nonnegative, summing to 1). A mapping needs a problem with expert
        names; experts it leaves out get 0. Default: uniform, ``1/K`` each.

    Examples
    --------
    >>> from msroute import Constraints, Problem
    >>> p = Problem([[1.0], [0.0], [0.5]], m_draws=2, constraints=Constraints(upper=[1.0]))
    >>> pol = FixedPolicy(p, horizon=10, n_runs=2, seed=0, q=[0.5, 0.5, 0.0])
    >>> bool((pol.select().draws < 2).all())
    True
    """

    name: ClassVar[str] = "fixed"
    has_propensity: ClassVar[bool] = True
    ignores_constraints: ClassVar[bool] = True

    def __init__(
        self,
        problem: Problem | Sequence[Problem] | ProblemBatch,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
        q: ArrayLike | Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self._q = self._check_q(q)
        self._q.setflags(write=False)

    def _check_q(self, q: ArrayLike | Mapping[str, float] | None) -> FloatArray:
        r, k = self.n_runs, self.n_experts
        if q is None:
            return np.full((r, k), 1.0 / k)
        if isinstance(q, Mapping):
            names = self.problem_batch.problems[0].expert_names
            if names is None:
                raise InvalidValueError(
                    "q was given as a mapping of expert names, but the problem has no "
                    "expert_names; pass Problem(..., expert_names=[...]) or q as an array"
                )
            unknown = sorted(set(q) - set(names))
            if unknown:
                raise InvalidValueError(f"q names unknown experts {unknown}; known: {names}")
            q = [float(q.get(n, 0.0)) for n in names]
        arr = as_float_array(q, "q", ndim_min=1, ndim_max=2)
        if arr.shape[-1] != k or (arr.ndim == 2 and arr.shape[0] != r):
            raise InvalidValueError(
                f"q must have shape (K,) = ({k},) or (R, K) = {(r, k)}, got {arr.shape}"
            )
        arr = np.broadcast_to(arr, (r, k)).copy()
        if np.any(arr < 0) or np.any(np.abs(arr.sum(axis=1) - 1.0) > 1e-9):
            raise InvalidValueError("q must be nonnegative and sum to 1 (in every run)")
        return arr

    @property
    def q(self) -> FloatArray:
        """The routing distribution of every run, shape (R, K) (a copy)."""
        return self._q.copy()

    def q_named(self, run: int = 0) -> dict[str, float]:
        """One run's routing distribution as a mapping expert name -> probability."""
        return self.problem_batch.problems[run].named(self._q[run])

    def _select(
        self, context: IntArray | None, eligible: BoolArray | None
    ) -> tuple[IntArray, FloatArray]:
        q = self._q
        if eligible is not None:
            q = q * eligible
            total = q.sum(axis=1, keepdims=True)
            if np.any(total <= 0.0):
                raise InvalidValueError("no eligible expert has positive probability under q")
            q = q / total
        return sample_multinomial(self.streams.uniform(self.m_draws), q, eligible), q

    def _update(self, decision: Decision, reward: FloatArray, cost: FloatArray) -> None:
        """Nothing to learn."""


class UniformPolicy(FixedPolicy):
    """M i.i.d. draws from the uniform distribution ``q = 1/K`` (the paper's reference).

    Unlike ``random`` (M distinct experts), the team can hold fewer than M experts, as OMD's can.
    """

    name: ClassVar[str] = "uniform"
    has_propensity: ClassVar[bool] = True
    ignores_constraints: ClassVar[bool] = True

    def __init__(
        self,
        problem: Problem | Sequence[Problem] | ProblemBatch,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
    ) -> None:
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
