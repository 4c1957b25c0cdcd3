"""OMD's exploration floor: the one that holds at every step and the one it starts from.

Every routing OMD plays keeps ``q_i >= gamma`` (Algorithm 1's floored simplex), so that its
importance weights divide by at least ``gamma``; with a decaying floor
(``msroute.policies.omd_variants``) the first steps keep a larger start, ``explore``, that decays
toward the floor that holds. Both are chosen once, when the policy is built, against Assumption
1 of every run's problem (one LP per distinct problem).
"""

from __future__ import annotations

from collections.abc import Iterable

from msroute._validation import check_gamma, default_gamma
from msroute.core.problem import Problem
from msroute.errors import InvalidValueError

__all__ = ["choose_floors", "choose_gamma"]


def choose_gamma(problems: Iterable[Problem], gamma: float | None, k: int, check: bool) -> float:
    """The floor, and Assumption 1 checked with it (one LP per distinct problem).

    An explicit ``gamma`` is kept, and must be feasible for every run. Without one the floor
    adapts (`msroute.Problem.exploration_floor`): ``1/(10K)`` where that is feasible with
    slack, else half the largest feasible floor; a batch shares the smallest floor of its runs,
    since the QP step takes one scalar floor. ``check=False`` skips the LPs and takes
    ``1/(10K)``.
    """
    distinct = dict.fromkeys(problems)
    if gamma is None:
        if not check:
            return default_gamma(k)
        return min(p.exploration_floor() for p in distinct)
    chosen = check_gamma(gamma, k)
    if chosen <= 0.0:
        raise InvalidValueError("gamma must be > 0: the importance weights divide by q_i >= gamma")
    if check:
        for p in distinct:
            p.check_feasible(chosen)
    return chosen


def choose_floors(
    schedule: str,
    chosen: float,
    gamma: float | None,
    explore: float | None,
    k: int,
    problems: Iterable[Problem],
    check: bool,
) -> tuple[float, float]:
    """The first step's floor and the floor that holds at every step, ``(start, hold)``, from
    ``chosen`` (``choose_gamma``'s): under a fixed ``schedule`` both are ``chosen``; under the
    decaying one the start is ``explore`` (default: ``chosen``, the adaptive floor or a larger
    ``gamma``) and the floor that holds is the user's ``gamma`` (0 when none is given)."""
    if schedule != "decay":
        if explore is not None:
            raise InvalidValueError(
                f"explore == {explore!r} needs floor='decay' (the decaying floor's start); "
                f"this policy's floor is {schedule!r}"
            )
        return chosen, chosen
    hold = 0.0 if gamma is None else chosen
    start = chosen
    if explore is not None:
        first = check_gamma(explore, k)
        if first <= 0.0:
            raise InvalidValueError("explore must be > 0: the decaying floor starts there")
        start = max(first, hold)
        if check and start != hold:
            for p in dict.fromkeys(problems):
                p.check_feasible(start)
    return start, hold
