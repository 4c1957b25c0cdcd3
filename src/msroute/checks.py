"""The conformance kit: ``check_policy`` tells whether a policy class keeps msroute's contract.

Any policy, msroute's own or a plugin's, can be checked the way Gymnasium's ``check_env`` checks
an environment. The checks drive the class on small instances with seeded Beta skills and
bandit feedback, and raise ``PolicyCheckError`` naming the first broken
rule:

``protocol``
    A ``BasePolicy`` subclass with a ``name``, built as
    ``cls(problem, horizon=..., n_runs=..., seed=..., **kwargs)``, sizes as the problem says.
``shapes``
    ``select`` returns a ``Decision``: int64 draws ``(R, M)`` of
    expert indices, read-only arrays, the round counting decisions, the context handed back.
``propensities``
    ``probs`` is given exactly when the class says ``has_propensity``, and is then, per run, a
    finite distribution over the experts (sums to one) that gives positive probability to every
    drawn expert.
``eligibility``
    Only eligible experts are drawn, ``probs`` is zero off the mask, and an all-true mask
    decides exactly like no mask.
``pending``
    No hidden pending state: feedback is credited to the decision it comes with. Two twins
    make the same decision; one makes a second decision before the feedback of the first
    arrives. What the feedback changes must then be the same in both.
``determinism``
    The same seed gives the same decisions.
``batching``
    A run decides the same alone as inside a batch (one random stream per run).
``constraints``
    A class that says ``ignores_constraints`` decides the same under binding bounds as under
    none (a sweep plays such a policy at one constraint level for all of them).
``persistence``
    Saved with pending decisions and loaded again, the policy continues bit for bit like the
    original (state and decisions).
``feedback``
    NaN or infinite rewards and costs, wrong shapes, foreign draws and rounds are refused with
    a ``ValueError`` and change no state.
``finite``
    Every float array of the state stays finite over a run.

Examples
--------
>>> from msroute.checks import check_policy
>>> from msroute.policies import OMDApproachability
>>> check_policy(OMDApproachability)
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from msroute.core.problem import Constraints, Problem
from msroute.core.reward import batch_sum_max_reward, draws_to_mask
from msroute.errors import PolicyCheckError
from msroute.policies.base import BasePolicy, Decision, Policy
from msroute.policies.persist import load_policy, save_policy
from msroute.policies.registry import POLICIES
from msroute.policies.state_walk import StateValue, state_dict

__all__ = ["CHECKS", "check_policy"]

_K, _M, _R, _ROUNDS = 6, 2, 3, 30
_COSTS = np.array([[1.0, 0.0], [0.8, 0.2], [0.5, 0.5], [0.2, 0.4], [0.0, 1.0], [0.3, 0.3]])
_MEANS = np.array([[0.9, 0.7, 0.6, 0.5, 0.4, 0.3], [0.4, 0.8, 0.5, 0.6, 0.7, 0.2]])
#: Both kinds of bound, and both on one coordinate; feasible for a floor of 1/(10K).
_PROBLEM = Problem(_COSTS, _M, Constraints(upper=[0.9, 1.2], lower=[0.2, None]))
#: Bounds no policy can violate: the constraint side of a policy has nothing to do.
_LOOSE = Problem(_COSTS, _M, Constraints(upper=[2.0 * _M, 2.0 * _M]))
#: No bounds at all.
_FREE = Problem(_COSTS, _M, Constraints(upper=[None, None]))


class _Harness:
    """Builds the policy under test and plays it on seeded Beta skills with bandit feedback."""

    def __init__(self, cls: type[BasePolicy], kwargs: Mapping[str, Any]) -> None:
        self.cls = cls
        self.kwargs = dict(kwargs)
        rng = np.random.default_rng(20_240_601)
        a, b = 20.0 * _MEANS, 20.0 * (1.0 - _MEANS)
        self.skills = rng.beta(a, b, size=(_ROUNDS, _R, *_MEANS.shape))

    def make(
        self, seed: Any = 0, n_runs: int = _R, problem: Problem = _PROBLEM, horizon: int = 1000
    ) -> BasePolicy:
        return self.cls(problem, horizon=horizon, n_runs=n_runs, seed=seed, **self.kwargs)

    def context(self, policy: BasePolicy, t: int) -> np.ndarray | None:
        if policy.n_contexts <= 1:
            return None
        return np.asarray((np.arange(policy.n_runs) + t) % policy.n_contexts, dtype=np.int64)

    def feedback(self, policy: BasePolicy, decision: Decision, t: int) -> tuple[Any, Any]:
        mask = draws_to_mask(decision.draws, policy.n_experts)
        skills = self.skills[t % _ROUNDS, : policy.n_runs]
        return batch_sum_max_reward(skills, mask), policy.problem_batch.realized_cost(mask)

    def play(self, policy: BasePolicy, rounds: int, start: int = 0) -> list[Decision]:
        """``rounds`` decisions with immediate feedback; the decisions made."""
        out = []
        for t in range(start, start + rounds):
            decision = policy.select(self.context(policy, t))
            policy.update(decision, *self.feedback(policy, decision, t))
            out.append(decision)
        return out


def _fail(check: str, cls: type, message: str) -> PolicyCheckError:
    return PolicyCheckError(f"{cls.__qualname__} fails the {check!r} check: {message}")


def _same_state(a: dict[str, StateValue], b: dict[str, StateValue], keys: Any = None) -> list[str]:
    """The names of the state entries that differ (over ``keys``, or all of them)."""
    names = sorted(set(a) | set(b)) if keys is None else sorted(keys)
    return [k for k in names if k not in a or k not in b or not _equal(a[k], b[k])]


def _equal(x: StateValue, y: StateValue) -> bool:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return (
            isinstance(x, np.ndarray)
            and isinstance(y, np.ndarray)
            and x.shape == y.shape
            and bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))
        )
    return x == y


# ---------------------------------------------------------------------- the checks
def _protocol(h: _Harness) -> None:
    cls = h.cls
    if not (isinstance(cls, type) and issubclass(cls, BasePolicy)):
        raise _fail("protocol", cls, "must be a subclass of msroute.policies.BasePolicy")
    if not isinstance(getattr(cls, "name", None), str) or cls.name in ("", "base"):
        raise _fail("protocol", cls, "must set the class attribute `name` (its registry name)")
    policy = h.make()
    if not isinstance(policy, Policy):
        raise _fail("protocol", cls, "an instance does not satisfy the Policy protocol")
    sizes = (policy.n_runs, policy.n_experts, policy.m_draws, policy.n_costs)
    if sizes != (_R, _K, _M, _COSTS.shape[1]):
        raise _fail("protocol", cls, f"(n_runs, n_experts, m_draws, n_costs) == {sizes}")


def _shapes(h: _Harness) -> None:
    policy = h.make()
    for t in range(_ROUNDS):
        context = h.context(policy, t)
        d = policy.select(context)
        if not isinstance(d, Decision):
            raise _fail("shapes", h.cls, f"select returned a {type(d).__name__}, not a Decision")
        if d.draws.shape != (_R, _M) or d.draws.dtype != np.int64:
            raise _fail("shapes", h.cls, f"draws are {d.draws.dtype} {d.draws.shape}")
        if d.draws.min() < 0 or d.draws.max() >= _K:
            raise _fail("shapes", h.cls, f"round {t}: draws outside [0, {_K - 1}]")
        if d.round != t:
            raise _fail("shapes", h.cls, f"decision {t} has round {d.round}")
        if (d.context is None) != (context is None) or (
            d.context is not None and context is not None and not np.array_equal(d.context, context)
        ):
            raise _fail("shapes", h.cls, f"round {t}: the decision's context is {d.context}")
        if any(a is not None and a.flags.writeable for a in (d.draws, d.probs, d.context)):
            raise _fail("shapes", h.cls, "a decision's arrays must be read-only")
        policy.update(d, *h.feedback(policy, d, t))


def _propensities(h: _Harness) -> None:
    policy = h.make()
    for t in range(_ROUNDS):
        d = policy.select(h.context(policy, t))
        if (d.probs is not None) != h.cls.has_propensity:
            raise _fail(
                "propensities",
                h.cls,
                f"has_propensity is {h.cls.has_propensity} but decisions carry probs "
                f"{'None' if d.probs is None else 'arrays'}",
            )
        _check_probs(h.cls, d, np.ones((_R, _K), dtype=bool), t)
        policy.update(d, *h.feedback(policy, d, t))


def _check_probs(cls: type, d: Decision, eligible: np.ndarray, t: int) -> None:
    if d.probs is None:
        return
    p = d.probs
    if p.shape != (_R, _K) or not np.all(np.isfinite(p)) or np.any(p < 0):
        raise _fail("propensities", cls, f"round {t}: probs must be finite, >= 0, shape (R, K)")
    if not np.allclose(p.sum(axis=1), 1.0, rtol=0.0, atol=1e-9):
        raise _fail("propensities", cls, f"round {t}: probs rows sum to {p.sum(axis=1)}")
    if np.any(p[~eligible] != 0.0):
        raise _fail("propensities", cls, f"round {t}: probs put mass on ineligible experts")
    drawn = draws_to_mask(d.draws, _K)
    if np.any(drawn & (p <= 0.0)):
        raise _fail("propensities", cls, f"round {t}: an expert with probability 0 was drawn")


def _eligibility(h: _Harness) -> None:
    rng = np.random.default_rng(4)
    policy = h.make()
    for t in range(_ROUNDS):
        mask = rng.random((_R, _K)) < 0.5
        mask[np.arange(_R), rng.integers(_K, size=_R)] = True  # at least one per run
        d = policy.select(h.context(policy, t), eligible=mask)
        if np.any(draws_to_mask(d.draws, _K) & ~mask):
            raise _fail("eligibility", h.cls, f"round {t}: an ineligible expert was drawn")
        _check_probs(h.cls, d, mask, t)
        policy.update(d, *h.feedback(policy, d, t))
    a, b = h.make(seed=8), h.make(seed=8)
    full = np.ones((_R, _K), dtype=bool)
    for t in range(_ROUNDS):
        da = a.select(h.context(a, t))
        db = b.select(h.context(b, t), eligible=full)
        if not np.array_equal(da.draws, db.draws):
            raise _fail("eligibility", h.cls, f"round {t}: an all-true mask changed the draws")
        a.update(da, *h.feedback(a, da, t))
        b.update(db, *h.feedback(b, db, t))


def _pending(h: _Harness) -> None:
    # On bounds nobody can violate the constraint side stays still, so a second decision changes
    # only what deciding changes (the round, the random stream); feedback must be credited the
    # same whether or not another decision was made since.
    for warm in (0, _ROUNDS // 2):
        a, b = h.make(problem=_LOOSE), h.make(problem=_LOOSE)
        h.play(a, warm)
        h.play(b, warm)
        first_a = a.select(h.context(a, warm))
        first_b = b.select(h.context(b, warm))
        base = state_dict(b)
        second = a.select(h.context(a, warm + 1), eligible=_other_experts(first_a))
        by_select = set(_same_state(base, state_dict(a)))
        reward, cost = h.feedback(a, first_a, warm)
        a.update(first_a, reward, cost)
        b.update(first_b, reward, cost)
        by_update = set(_same_state(base, state_dict(b)))
        differ = _same_state(state_dict(a), state_dict(b), by_update - by_select)
        if differ:
            raise _fail(
                "pending",
                h.cls,
                f"feedback was credited differently after another decision was made (state "
                f"{differ}): does update read state that select left behind instead of the "
                "decision it is given?",
            )
        a.update(second, *h.feedback(a, second, warm + 1))  # a late decision is accepted too


def _other_experts(decision: Decision) -> np.ndarray:
    """An eligibility mask without the experts ``decision`` drew (all, if it drew every one)."""
    mask = ~draws_to_mask(decision.draws, _K)
    mask[~mask.any(axis=1)] = True
    return mask


def _determinism(h: _Harness) -> None:
    a = h.play(h.make(seed=123), _ROUNDS)
    b = h.play(h.make(seed=123), _ROUNDS)
    for t, (da, db) in enumerate(zip(a, b, strict=True)):
        if not np.array_equal(da.draws, db.draws):
            raise _fail("determinism", h.cls, f"the same seed gave other draws at round {t}")


def _batching(h: _Harness) -> None:
    together = h.make(seed=[5, 6, 7])
    alone = h.make(seed=[6], n_runs=1)
    for t in range(_ROUNDS):
        ctx = h.context(together, t)
        d_all = together.select(ctx)
        d_one = alone.select(None if ctx is None else ctx[1:2])
        if not np.array_equal(d_all.draws[1:2], d_one.draws):
            raise _fail(
                "batching", h.cls, f"round {t}: run 1 of a batch decided otherwise than alone"
            )
        together.update(d_all, *h.feedback(together, d_all, t))
        reward, cost = h.feedback(together, d_all, t)
        alone.update(d_one, reward[1:2], cost[1:2])


def _constraints(h: _Harness) -> None:
    if not h.cls.ignores_constraints:
        return
    bound, free = h.make(seed=9), h.make(seed=9, problem=_FREE)
    for t in range(_ROUNDS):
        ctx = h.context(bound, t)
        d_bound, d_free = bound.select(ctx), free.select(ctx)
        if not np.array_equal(d_bound.draws, d_free.draws):
            raise _fail(
                "constraints",
                h.cls,
                f"ignores_constraints is True but at round {t} the draws under binding bounds "
                "differ from those under none",
            )
        bound.update(d_bound, *h.feedback(bound, d_bound, t))
        free.update(d_free, *h.feedback(free, d_free, t))


@contextmanager
def _registered(cls: type[BasePolicy]) -> Iterator[None]:
    """``cls`` in the registry under its name while the block runs (saving needs it)."""
    target = f"{cls.__module__}:{cls.__qualname__}"
    previous = POLICIES.get(cls.name)
    POLICIES[cls.name] = target
    try:
        yield
    finally:
        if previous is None:
            del POLICIES[cls.name]
        else:
            POLICIES[cls.name] = previous


def _persistence(h: _Harness) -> None:
    policy = h.make()
    h.play(policy, _ROUNDS // 2)
    pending = [policy.select(h.context(policy, _ROUNDS // 2 + i)) for i in range(3)]
    with tempfile.TemporaryDirectory() as tmp, _registered(h.cls):
        path = Path(tmp) / "policy.npz"
        save_policy(policy, path)
        twin = load_policy(path)
    differ = _same_state(state_dict(policy), state_dict(twin))
    if type(twin) is not h.cls or differ:
        raise _fail("persistence", h.cls, f"the loaded policy differs in {differ}")
    t = _ROUNDS // 2 + len(pending)
    nxt = [p.select(h.context(p, t)) for p in (policy, twin)]
    if not np.array_equal(nxt[0].draws, nxt[1].draws):
        raise _fail("persistence", h.cls, "right after loading, the next decision differs")
    for i in (3, 2, 0, 1):  # pending decisions come back in any order
        for p, extra in ((policy, nxt[0]), (twin, nxt[1])):
            d = pending[i] if i < len(pending) else extra
            p.update(d, *h.feedback(p, d, _ROUNDS // 2 + i))
    a, b = h.play(policy, 10, start=_ROUNDS), h.play(twin, 10, start=_ROUNDS)
    if any(not np.array_equal(x.draws, y.draws) for x, y in zip(a, b, strict=True)):
        raise _fail("persistence", h.cls, "the loaded policy decides otherwise than the original")
    differ = _same_state(state_dict(policy), state_dict(twin))
    if differ:
        raise _fail("persistence", h.cls, f"after the same feedback the state differs in {differ}")


def _feedback(h: _Harness) -> None:
    policy = h.make()
    h.play(policy, 3)
    d = policy.select(h.context(policy, 3))
    reward, cost = h.feedback(policy, d, 3)
    bad_reward = reward.copy()
    bad_reward[1] = np.nan
    cases: list[tuple[str, Decision, Any, Any]] = [
        ("a NaN reward", d, bad_reward, cost),
        ("an infinite cost", d, reward, np.full_like(cost, np.inf)),
        ("a reward of the wrong shape", d, np.ones(_R + 1), cost),
        ("a cost of the wrong shape", d, reward, np.ones((_R, cost.shape[1] + 1))),
        ("draws out of range", dataclasses.replace(d, draws=np.full((_R, _M), _K)), reward, cost),
        ("a round not yet decided", dataclasses.replace(d, round=d.round + 1), reward, cost),
    ]
    before = state_dict(policy)
    for what, decision, r, c in cases:
        try:
            policy.update(decision, r, c)
        except ValueError:
            pass
        else:
            raise _fail("feedback", h.cls, f"update accepted {what}")
        differ = _same_state(before, state_dict(policy))
        if differ:
            raise _fail("feedback", h.cls, f"refusing {what} changed the state ({differ})")


def _finite(h: _Harness) -> None:
    # NaN never; an infinite value only where the fresh policy holds one (a sentinel such as an
    # untried expert's +inf confidence bonus), never where a finite value was.
    policy = h.make()
    fresh = {
        k: np.isfinite(v)
        for k, v in state_dict(policy).items()
        if isinstance(v, np.ndarray) and v.dtype.kind in "fc"
    }
    for t in range(_ROUNDS):
        h.play(policy, 1, start=t)
        state = state_dict(policy)
        bad = [k for k, was_finite in fresh.items() if _newly_nonfinite(state[k], was_finite)]
        if bad:
            raise _fail("finite", h.cls, f"round {t}: non-finite state {bad}")


def _newly_nonfinite(value: StateValue, was_finite: np.ndarray) -> bool:
    if not isinstance(value, np.ndarray):
        return True
    return bool(np.isnan(value).any() or (was_finite & ~np.isfinite(value)).any())


#: The checks ``check_policy`` runs, in order.
CHECKS: dict[str, Callable[[_Harness], None]] = {
    "protocol": _protocol,
    "shapes": _shapes,
    "propensities": _propensities,
    "eligibility": _eligibility,
    "pending": _pending,
    "determinism": _determinism,
    "batching": _batching,
    "constraints": _constraints,
    "finite": _finite,
    "persistence": _persistence,
    "feedback": _feedback,
}


def check_policy(
    policy_class: type[BasePolicy],
    kwargs: Mapping[str, Any] | None = None,
    *,
    skip: tuple[str, ...] = (),
) -> None:
    """Check that ``policy_class`` keeps the policy contract; raise on the first broken rule.

    Parameters
    ----------
    policy_class : type
        A ``BasePolicy`` subclass, registered or not. It is built as
        ``policy_class(problem, horizon=..., n_runs=..., seed=..., **kwargs)`` on instances with
        6 experts, 2 draws and 2 cost coordinates.
    kwargs : mapping, optional
        Extra constructor arguments (e.g. ``{"n_contexts": 2}`` for a contextual policy: the
        checks then pass contexts).
    skip : tuple of str, optional
        Names from ``CHECKS`` not to run (say why where you call it).

    Raises
    ------
    PolicyCheckError
        Naming the class, the check and what went wrong. An error the policy itself raises
        while being checked propagates unchanged.
    """
    unknown = sorted(set(skip) - set(CHECKS))
    if unknown:
        raise PolicyCheckError(f"unknown check(s) {unknown}; the checks are {list(CHECKS)}")
    harness = _Harness(policy_class, kwargs or {})
    for name, check in CHECKS.items():
        if name not in skip:
            check(harness)
