"""A tiny third-party policy package, registered through the ``msroute.policies`` entry point.

Its distribution metadata (``entry_points.txt``) says::

    [msroute.policies]
    toy-uniform = msroute_toy_plugin:ToyUniform

The tests install it into the test environment and route with it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from msroute.policies.base import BasePolicy, Decision, sample_multinomial


class ToyUniform(BasePolicy):
    """Routes uniformly over the eligible experts and counts what it was told."""

    name: ClassVar[str] = "toy-uniform"
    label: ClassVar[str] = "Toy uniform (plugin)"
    has_propensity: ClassVar[bool] = True
    _state_attrs: ClassVar[tuple[str, ...]] = ("rewards",)

    def __init__(self, problem: Any, *, horizon: int, n_runs: Any = None, seed: Any = None):
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self.rewards = np.zeros(self.n_runs)

    def _select(self, context: Any, eligible: Any) -> tuple[np.ndarray, np.ndarray]:
        mask = np.ones((self.n_runs, self.n_experts)) if eligible is None else eligible
        q = mask / mask.sum(axis=1, keepdims=True)
        return sample_multinomial(self.streams.uniform(self.m_draws), q), q

    def _update(self, decision: Decision, reward: np.ndarray, cost: np.ndarray) -> None:
        self.rewards += reward
