"""The conformance kit: every registered policy passes it, and each deliberately broken policy
fails the check that names its defect."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

from msroute.checks import CHECKS, check_policy
from msroute.errors import PolicyCheckError
from msroute.policies.base import (
    BasePolicy,
    Decision,
    draw_counts,
    sample_multinomial,
    set_debug_checks,
)
from msroute.policies.registry import POLICIES, available_policies, get_policy_class

KWARGS: dict[str, dict[str, Any]] = {"omd-contextual": {"n_contexts": 2}}


@pytest.fixture(autouse=True)
def _kit_checks_on_its_own() -> Iterator[None]:
    """The kit under test finds broken states itself: the suite's debug checks step aside."""
    previous = set_debug_checks(False)
    yield
    set_debug_checks(previous)


@pytest.mark.parametrize("name", available_policies())
def test_every_registered_policy_passes(name: str) -> None:
    check_policy(get_policy_class(name), KWARGS.get(name))


class Toy(BasePolicy):
    """A small correct policy: uniform over the eligible experts, learning reward sums."""

    name: ClassVar[str] = "toy-check"
    has_propensity: ClassVar[bool] = True
    _state_attrs: ClassVar[tuple[str, ...]] = ("sums",)

    def __init__(self, problem: Any, *, horizon: int, n_runs: Any = None, seed: Any = None):
        super().__init__(problem, horizon=horizon, n_runs=n_runs, seed=seed)
        self.sums = np.zeros((self.n_runs, self.n_experts))

    def _probs(self, eligible: np.ndarray | None) -> np.ndarray:
        mask = np.ones((self.n_runs, self.n_experts)) if eligible is None else eligible
        return mask / mask.sum(axis=1, keepdims=True)

    def _select(self, context: Any, eligible: Any) -> tuple[np.ndarray, np.ndarray]:
        q = self._probs(eligible)
        return sample_multinomial(self.streams.uniform(self.m_draws), q), q

    def _credit(self, draws: np.ndarray, reward: np.ndarray) -> None:
        self.sums += draw_counts(draws, self.n_experts) * reward[:, None]

    def _update(self, decision: Decision, reward: np.ndarray, cost: np.ndarray) -> None:
        self._credit(decision.draws, reward)


class HiddenLastDecision(Toy):
    """Credits feedback to the last team it selected, not to the decision it is given."""

    def _select(self, context: Any, eligible: Any) -> tuple[np.ndarray, np.ndarray]:
        draws, q = super()._select(context, eligible)
        self._last = draws
        return draws, q

    def _update(self, decision: Decision, reward: np.ndarray, cost: np.ndarray) -> None:
        self._credit(self._last, reward)


class IgnoresEligibility(Toy):
    def _select(self, context: Any, eligible: Any) -> tuple[np.ndarray, np.ndarray]:
        return super()._select(context, None)


class SharedStream(Toy):
    """One generator for all runs: a run's draws depend on its batch."""

    def __init__(self, problem: Any, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._rng = np.random.default_rng(0)

    def _select(self, context: Any, eligible: Any) -> tuple[np.ndarray, np.ndarray]:
        q = self._probs(eligible)
        return sample_multinomial(self._rng.random((self.n_runs, self.m_draws)), q), q


class UndeclaredState(Toy):
    """Learns a preference it does not declare, so a saved copy forgets it."""

    def __init__(self, problem: Any, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self.favourite = np.zeros(self.n_runs, dtype=np.int64)

    def _select(self, context: Any, eligible: Any) -> tuple[np.ndarray, np.ndarray]:
        draws, q = super()._select(context, eligible)
        if eligible is None:
            draws = draws.copy()
            draws[:, 0] = self.favourite
        return draws, q

    def _update(self, decision: Decision, reward: np.ndarray, cost: np.ndarray) -> None:
        super()._update(decision, reward, cost)
        self.favourite = (np.argmax(self.sums, axis=1) + 1) % self.n_experts


class AcceptsAnyFeedback(Toy):
    def update(self, decision: Decision, reward: Any, cost: Any) -> None:
        self._update(decision, np.asarray(reward, dtype=float), np.asarray(cost, dtype=float))


class NaNState(Toy):
    def _update(self, decision: Decision, reward: np.ndarray, cost: np.ndarray) -> None:
        super()._update(decision, reward, cost)
        if decision.round >= 5:
            self.sums[:, 0] = np.inf - np.inf


class ReadsTheBounds(Toy):
    """Says it ignores the constraints, yet favours expert 0 when an upper bound is finite."""

    ignores_constraints: ClassVar[bool] = True

    def _probs(self, eligible: np.ndarray | None) -> np.ndarray:
        weight = super()._probs(eligible)
        if np.isfinite(self.problem_batch.hi_ori).any():
            weight = weight.copy()
            weight[:, 0] *= 5.0
        return weight / weight.sum(axis=1, keepdims=True)


class Nameless(Toy):
    name: ClassVar[str] = "base"


class HidesItsPropensity(Toy):
    has_propensity: ClassVar[bool] = False


def test_a_correct_toy_policy_passes() -> None:
    check_policy(Toy)
    assert "toy-check" not in POLICIES  # the temporary registration for saving is undone


@pytest.mark.parametrize(
    ("cls", "check"),
    [
        (Nameless, "protocol"),
        (HidesItsPropensity, "propensities"),
        (IgnoresEligibility, "eligibility"),
        (HiddenLastDecision, "pending"),
        (SharedStream, "batching"),
        (ReadsTheBounds, "constraints"),
        (UndeclaredState, "persistence"),
        (AcceptsAnyFeedback, "feedback"),
        (NaNState, "finite"),
    ],
)
def test_a_broken_policy_fails_the_check_of_its_defect(cls: type[BasePolicy], check: str) -> None:
    with pytest.raises(PolicyCheckError, match=f"{cls.__qualname__} fails the '{check}' check"):
        check_policy(cls)
    # Alone too: the defect is what that check sees, not a side effect of an earlier one.
    with pytest.raises(PolicyCheckError, match=f"'{check}'"):
        check_policy(cls, skip=tuple(c for c in CHECKS if c not in ("protocol", check)))


def test_unknown_checks_to_skip_are_refused() -> None:
    with pytest.raises(PolicyCheckError, match="unknown check"):
        check_policy(Toy, skip=("speed",))


def test_not_a_policy_class_fails_protocol() -> None:
    with pytest.raises(PolicyCheckError, match=r"subclass of msroute\.policies\.BasePolicy"):
        check_policy(dict)  # type: ignore[arg-type]


def test_traits_are_class_attributes_read_by_experiments_and_figures() -> None:
    from msroute.experiments.sweep import policy_variants
    from msroute.plotting import policy_color, policy_label

    cls = get_policy_class("ts-bwk")
    assert cls.thompson and cls.lagrangian_dual and not cls.has_propensity
    assert get_policy_class("omd").has_propensity and not get_policy_class("omd").thompson
    assert policy_label("ts-bwk") == "TS-BwK" and policy_color("omd") == "#1f77b4"
    # How a policy is drawn and scheduled lives with the figures and the scheduler only.
    assert not any(hasattr(cls, name) for name in ("label", "color", "relative_cost"))
    variants = policy_variants(["ts-bwk", "cucb"], 3, bwk_violations=("average", "round"))
    assert variants == [
        ("ts-bwk", "ts-bwk", {"reward_scale": 3.0, "violation": "average"}),
        ("ts-bwk[round]", "ts-bwk", {"reward_scale": 3.0, "violation": "round"}),
        ("cucb", "cucb", {}),
    ]
