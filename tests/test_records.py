"""``msroute._records.quick_init``: a frozen dataclass built in one step is the dataclass."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from msroute._records import quick_init
from msroute.policies.base import Decision
from msroute.router.events import Decide, RoutedDecision


@quick_init
@dataclasses.dataclass(frozen=True)
class _Point:
    x: float
    label: str = "p"
    seen: list[str] = dataclasses.field(default=None, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x < 0")


def test_a_quick_init_class_is_its_dataclass() -> None:
    p = _Point(1.5)
    assert (p.x, p.label, p.seen) == (1.5, "p", None)
    assert p == _Point(x=1.5, label="p") and p != _Point(1.5, "q")
    assert repr(p) == "_Point(x=1.5, label='p', seen=None)"
    assert dataclasses.replace(p, label="q").label == "q"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="x < 0"):  # __post_init__ runs
        _Point(-1.0)
    with pytest.raises(TypeError):
        _Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Point(1.0, "a", None, 4)  # type: ignore[call-arg]


def test_quick_init_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        x: int

    @dataclasses.dataclass
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class Factory:
        x: list[int] = dataclasses.field(default_factory=list)

    for cls in (Slotted, Mutable, Factory):
        with pytest.raises(TypeError, match="frozen dataclass"):
            quick_init(cls)


def test_the_routers_values_stay_frozen_and_read_only() -> None:
    d = Decision(np.array([[1]]), np.full((1, 2), 0.5), None, 3, np.ones((1, 1)))
    assert not d.draws.flags.writeable and not d.probs.flags.writeable  # type: ignore[union-attr]
    assert not d.cost.flags.writeable  # type: ignore[union-attr]
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.round = 4  # type: ignore[misc]
    event = Decide("a-1", None, None, 1.0, 7)
    assert event.deadline is None and event.kind == "decision"
    routed = RoutedDecision("a-1", ["m"], ["m"], None, 0, {"usd": 1.0}, 2.0, 7)
    assert routed.to_dict()["team"] == ["m"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        routed.team = []  # type: ignore[misc]
