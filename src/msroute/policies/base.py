"""The batched policy contract and the plumbing every policy shares.

A policy runs R independent runs at once (a leading run axis, the vectorized-environment
convention of docs/architecture.md): ``select`` returns a ``Decision`` — each run's M draws,
the distribution they were sampled from when the policy has one in closed form, the context and
the round — and ``update`` takes that decision back with, for each run, only what bandit
feedback gives: the aggregate (sum-max) reward and the realized cost vector. The routed subset
is the set of distinct draws.

The decision is a value (docs/architecture.md, "The decision is a value"): a policy keeps no hidden
"last decision", so many decisions may be pending and their feedback may arrive in any order. An
optional eligibility mask restricts each run's draws to some experts.

Policies own their random streams: one private ``numpy.random.Generator`` per run, built from
the run's seed (``RunStreams``); the same seed and the same
inputs give the same decisions, bit for bit, whatever the other runs of the batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from msroute._memory import check_memory
from msroute._seeding import SeedArg
from msroute._validation import (
    COST_MAX,
    FLOAT_TINY,
    BoolArray,
    FloatArray,
    IntArray,
    as_real,
    as_real_array,
    check_positive_int,
    quoted,
)
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.core.reward import draw_counts, draws_to_mask
from msroute.errors import InvalidTypeError, InvalidValueError
from msroute.policies.costs import CostEstimate
from msroute.policies.decision import Decision
from msroute.policies.duals import cost_scale
from msroute.policies.pacing import COST_WINDOW, Pacer
from msroute.policies.sampling import sample_multinomial
from msroute.policies.state_walk import carry_state, check_state, declared_names, state_attrs
from msroute.policies.streams import RunStreams

__all__ = [
    "BasePolicy",
    "Decision",
    "Policy",
    "check_hyper",
    "draw_counts",
    "draws_to_mask",
    "sample_multinomial",
]


@runtime_checkable
class Policy(Protocol):
    """What the simulator and the CLI need from a routing policy (batched over runs)."""

    name: ClassVar[str]
    n_runs: int
    n_experts: int
    m_draws: int

    def select(
        self, context: ArrayLike | None = None, eligible: ArrayLike | None = None
    ) -> Decision:
        """A decision for every run; ``context`` (R,) ints, ``eligible`` (R, K) bools or None."""
        ...

    def update(self, decision: Decision, reward: ArrayLike, cost: ArrayLike) -> None:
        """Bandit feedback of one decision: reward (R,), realized cost (R, d)."""
        ...


def _indices_below(draws: IntArray, n: int) -> bool:
    """Whether every entry of the integer array ``draws`` is in ``[0, n)``: one reduction for
    64-bit integers (a negative int64 read as uint64 is at least 2^63)."""
    if draws.dtype == np.int64:
        return bool(draws.view(np.uint64).max() < n)
    return bool(draws.min() >= 0 and draws.max() < n)


_debug_checks = os.environ.get("MSROUTE_DEBUG", "") not in ("", "0")


def set_debug_checks(enabled: bool) -> bool:
    """Check every policy's whole state after each update (slow; for tests and debugging).

    Also switched on by the environment variable ``MSROUTE_DEBUG=1``. A check that fails
    raises ``InvalidStateError`` naming the entry (see
    ``msroute.policies.state_walk.check_state``). Returns the previous setting.
    """
    global _debug_checks
    previous, _debug_checks = _debug_checks, bool(enabled)
    return previous


class BasePolicy:
    """Shared plumbing: the stacked problems, the run count, the horizon, the seeded stream,
    the round counter and the checks of the public ``select``/``update`` boundary.

    Subclasses implement ``_select(context, eligible) -> (draws (R, M), probs (R, K) or None)``
    and ``_update(decision, reward, cost)``; the public methods validate once and then call
    them (the simulator's hot loop calls the public methods with well-formed arrays, so the
    checks are cheap ones).

    Parameters
    ----------
    problem : Problem or sequence of Problem
        The instance (shared by all runs) or one instance per run.
    horizon : int
        Number of rounds T the policy will be run for (sets step sizes such as eta).
    n_runs : int, optional
        R; defaults to the number of problems given (1 for a single problem).
    seed : int, SeedSequence, sequence of those, or None
        The policy's random streams, one per run: a sequence gives each run's seed; a single
        seed stands for its R spawned children (itself when R = 1). Run ``r``'s decisions
        depend only on its own seed and feedback, not on the runs batched with it.

    Notes
    -----
    Persistence: the keyword arguments of the constructor are recorded once, in ``__new__``,
    so that a saved policy can be rebuilt (``msroute.policies.persist``); what changes while
    the policy learns is declared by ``_state_attrs`` on each class (attributes holding arrays,
    plain scalars, the random stream or a stateful component that declares its own). A class
    declares only the attributes it adds; the declarations of its bases are collected along the
    MRO (``msroute.policies.state_walk``).
    """

    name: ClassVar[str] = "base"
    #: Traits that experiments, figures and tests read instead of lists of names. A Lagrangian
    #: dual on the constraints, with a ``violation`` reading (CBwK, TS-BwK):
    lagrangian_dual: ClassVar[bool] = False
    #: Thompson sampling on Beta posteriors, rewards divided by ``reward_scale`` (TS, TS-BwK):
    thompson: ClassVar[bool] = False
    #: Decisions carry the distribution they were drawn from (``Decision.probs``, the
    #: propensity) in closed form, with the M draws i.i.d. from it:
    has_propensity: ClassVar[bool] = False
    #: Rewards ``update`` accepts: a sum-max reward of skills ``>= 0`` is ``>= 0``, and the
    #: upper end keeps every statistic, gradient and posterior far from overflow.
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1e6)
    #: The decisions never read the constraints (the bounds of ``S_ori``): a run decides the same
    #: under every constraint level, so a sweep plays it once per seed and judges that one
    #: trajectory against each level's bounds (``msroute.experiments.sweep.sweep_worker``).
    #: A claim about the class's own code, so it is not inherited: a subclass (which may add a
    #: dual) makes it only by declaring it again (``__init_subclass__``).
    ignores_constraints: ClassVar[bool] = False
    #: Realized costs ``update`` accepts, per cost coordinate, in units of the coordinate
    #: (``cost_scale``: the column's largest table cost, else its
    #: largest bound): finite, ``>= 0`` and at most ``cost_limit`` units, and at most
    #: ``M * COST_MAX`` (a team of M experts at the top of the range of costs, 1e12 each;
    #: docs/budgets.md). A round costing a million times the dearest expert's table cost is a
    #: units mistake, not data; the limit also keeps the learned cost estimates, duals,
    #: penalties and sums of costs far from overflow.
    cost_limit: ClassVar[float] = 1e6
    #: Number of contexts the policy distinguishes (1: context-free).
    n_contexts: int = 1
    #: The round counter and the random stream: the state every policy has; and the pacer of
    #: a paced policy (``pace``; None otherwise).
    _state_attrs: ClassVar[tuple[str, ...]] = ("t", "streams", "pacer")
    #: The realized-spend pacing of the runs (``msroute.policies.pacing``), None when unpaced.
    pacer: Pacer | None = None
    #: The state arrays of this class that run along the expert axis, with that axis (counted
    #: from the end): what ``resized`` carries expert by expert. A class declares only its own.
    _expert_axes: ClassVar[dict[str, int]] = {}
    #: The state of this class that is about the constraints (a dual): what ``resized`` starts
    #: afresh when the bounds change. A class declares only its own.
    _constraint_attrs: ClassVar[tuple[str, ...]] = ()
    #: Keyword arguments the policy was constructed with (the problem aside).
    _init_kwargs: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "ignores_constraints" not in cls.__dict__:
            cls.ignores_constraints = False  # not inherited: see the attribute

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Record the outermost constructor call once for every subclass (no subclass code).
        obj = super().__new__(cls)
        obj._init_kwargs = {k: v for k, v in kwargs.items() if k != "problem"}
        return obj

    def __init__(
        self,
        problem: Problem | Sequence[Problem] | ProblemBatch,
        *,
        horizon: int,
        n_runs: int | None = None,
        seed: SeedArg = None,
    ) -> None:
        self.problem_batch = (
            problem if isinstance(problem, ProblemBatch) else ProblemBatch(problem, n_runs)
        )
        if n_runs is not None and n_runs != self.problem_batch.n_runs:
            raise InvalidValueError(
                f"n_runs == {n_runs} but the problem batch has {self.problem_batch.n_runs}"
            )
        self.n_runs = self.problem_batch.n_runs
        self.n_experts = self.problem_batch.n_experts
        self.m_draws = self.problem_batch.m_draws
        self.n_costs = self.problem_batch.n_costs
        self.horizon = check_positive_int(horizon, "horizon")
        # One stream per run (docs/architecture.md): a run decides the same alone or in any batch.
        block = max(4096, 16 * max(self.n_experts, self.m_draws))
        check_memory(  # the buffered uniforms of RunStreams, (R, block) floats
            8.0 * self.n_runs * block,
            f"{type(self).__name__}: random-number buffers for R = {self.n_runs} runs, "
            f"K = {self.n_experts} experts and M = {self.m_draws} draws",
            "lower m_draws (the draws per decision) or the number of runs",
        )
        self.streams = RunStreams(seed, self.n_runs, block=block)
        self.t = 0  # decisions made (the round counter advances on select)
        self._rows = np.arange(self.n_runs)
        b = self.problem_batch
        self._cost_unit: FloatArray = cost_scale(b.costs, b.lo_ori, b.hi_ori)
        # At most cost_limit units, and at most a team of M experts each at the top of the
        # range of costs (COST_MAX): what any table in the range can charge a decision.
        self._cost_cap: FloatArray = np.minimum(
            self.cost_limit * self._cost_unit, self.m_draws * COST_MAX
        )

    # ------------------------------------------------------------------ public boundary
    def select(
        self, context: ArrayLike | None = None, eligible: ArrayLike | None = None
    ) -> Decision:
        """Decide the M draws of every run.

        Parameters
        ----------
        context : array_like of int, shape (R,), optional
            Context of each run (contextual policies); context-free policies ignore it.
        eligible : array_like of bool, shape (R, K), optional
            The experts each run may route to; only eligible experts are drawn. Every row
            needs at least one. A policy that routes M distinct experts routes all eligible
            ones when fewer than M are (its draws then repeat one of them).

        Returns
        -------
        Decision
            The draws (R, M), the sampling distribution after the mask (or None), the
            context and the round; hand it back to ``update`` with its feedback.
        """
        if context is None and self.n_contexts > 1:
            raise InvalidValueError(
                f"{type(self).__name__} with {self.n_contexts} contexts needs context= "
                "(one int per run)"
            )
        # Context-free policies ignore the context (one signature for both uses).
        ctx = None if context is None or self.n_contexts == 1 else self._check_context(context)
        mask = None if eligible is None else self._check_eligible(eligible)
        return self.select_trusted(ctx, mask)

    def select_trusted(self, context: IntArray | None, eligible: BoolArray | None) -> Decision:
        """``select`` without its checks, for a caller that validated at its own boundary.

        The live router passes a context it built, (R,) int64 in ``[0, n_contexts)`` (or None
        for a context-free router), and a mask with an eligible expert in every row and not
        all eligible (or None), as ``_check_eligible`` returns them; re-checking them cost
        a sizeable share of a decision. Anything else calls ``select``.
        """
        ctx = None if self.n_contexts == 1 else context
        pacer = self.pacer
        if pacer is None:
            draws, probs = self._select(ctx, eligible)
            decision = Decision(draws, probs, ctx, self.t)
        else:
            allowed = pacer.restrict(self.t + 1, eligible, ctx)
            draws, probs = self._select(ctx, allowed)
            narrowed = None if allowed is eligible else allowed
            decision = Decision(draws, probs, ctx, self.t, pacer.book(draws, ctx), narrowed)
        self.t += 1
        return decision

    @property
    def q(self) -> FloatArray | None:
        """The routing distribution the policy keeps, (R, K) or (R, X, K), a copy; None for a
        policy that keeps none (its draws come from scores, samples or a schedule)."""
        return None

    def update(self, decision: Decision, reward: ArrayLike, cost: ArrayLike) -> None:
        """Feed back the outcome of one decision (bandit feedback only), in any order.

        Parameters
        ----------
        decision : Decision
            What ``select`` returned; decisions may be fed back in any order, or never.
        reward : array_like, shape (R,)
            The aggregate sum-max reward of each run's routed subset: finite and within
            ``reward_range`` (``[0, 1e6]``).
        cost : array_like, shape (R, d)
            The realized cost vector (each distinct routed expert counted once): finite,
            ``>= 0`` and at most ``cost_limit`` (``1e6``) times the coordinate's unit (its
            largest table cost) and ``M * 1e12`` (see ``check_cost``).

        Raises
        ------
        InvalidValueError
            On feedback the policy cannot learn from; the policy's state is then unchanged.
        """
        if not isinstance(decision, Decision):
            raise InvalidTypeError(
                f"decision must be the Decision returned by select(), got {type(decision).__name__}"
            )
        d = decision.draws
        r = as_real_array(reward, "reward")
        c = as_real_array(cost, "cost")
        if d.shape != (self.n_runs, self.m_draws) or d.dtype.kind not in "iu":  # integers
            raise InvalidValueError(
                f"decision.draws must be integers of shape (R, M) = "
                f"{(self.n_runs, self.m_draws)}, got {d.dtype} {d.shape}"
            )
        if not 0 <= decision.round < self.t:
            raise InvalidValueError(
                f"decision.round == {decision.round}, but this policy has made {self.t} "
                "decision(s): not a decision of this policy"
            )
        if r.shape != (self.n_runs,):
            raise InvalidValueError(
                f"reward must have shape (R,) = ({self.n_runs},), got {r.shape}"
            )
        if c.shape != (self.n_runs, self.n_costs):
            raise InvalidValueError(
                f"cost must have shape (R, d) = {(self.n_runs, self.n_costs)}, got {c.shape}"
            )
        if not self._batch_in_range(d, r, c):
            self._check_ranges(d, r, c)
        self._update(decision, r, c)
        if self.pacer is not None and decision.cost is not None:
            self.pacer.settle(decision.cost, c, True, decision.draws, decision.context)
        if _debug_checks:
            check_state(self)

    def _batch_in_range(self, draws: IntArray, reward: FloatArray, cost: FloatArray) -> bool:
        """Whether a batch's feedback (R > 1, int64 draws) passes ``_check_ranges``, in one
        compiled loop (numba on first use); False leaves the naming to ``_check_ranges``.
        A single run (a live router) is checked by numpy alone."""
        if self.n_runs == 1 or draws.dtype != np.int64:
            return False
        from msroute.policies._compiled.checks import feedback_in_range

        low, high = self.reward_range
        return bool(
            feedback_in_range(reward, low, high, cost, self._cost_cap, draws, self.n_experts)
        )

    def _check_ranges(self, draws: IntArray, reward: FloatArray, cost: FloatArray) -> None:
        """Raise ``InvalidValueError`` naming the first reward, cost or draw out of range."""
        low, high = self.reward_range
        within = (reward >= low) & (reward <= high)  # False for NaN too
        if np.count_nonzero(within) < reward.size:  # count_nonzero: faster than .all()
            bad = np.flatnonzero(~within)
            raise InvalidValueError(
                f"reward must be finite and in [{low:g}, {high:g}] (the policy's reward_range), "
                f"got {quoted(reward[bad].tolist())} at run(s) {quoted(bad.tolist())}"
            )
        self.check_cost(cost)
        if not _indices_below(draws, self.n_experts):
            raise InvalidValueError(
                f"decision.draws must be expert indices in [0, {self.n_experts - 1}]"
            )

    def check_cost(self, cost: FloatArray) -> None:
        """Raise ``InvalidValueError`` unless every realized cost (R, d) can be learned.

        A cost must be finite, ``>= 0`` and at most ``cost_limit * unit`` per coordinate (the
        unit is the column's largest table cost, else its largest bound, else 1) and at most
        ``M * COST_MAX``. The live router calls this before ``update_trusted``.
        """
        ok = (cost >= 0.0) & (cost <= self._cost_cap)  # False for NaN and inf (the cap is finite)
        if np.count_nonzero(ok) == ok.size:
            return
        r, j = np.argwhere(~ok)[0].tolist()
        x = float(cost[r, j])
        if x > self.m_draws * COST_MAX and math.isfinite(x):
            raise InvalidValueError(
                f"cost {x:g} (coordinate {j}, run {r}) exceeds M = {self.m_draws} times "
                f"{COST_MAX:g}, the most a team can cost in the range of costs (docs/budgets.md)"
            )
        if x >= 0.0 and math.isfinite(x):
            raise InvalidValueError(
                f"cost {x:g} (coordinate {j}, run {r}) exceeds cost_limit = {self.cost_limit:g} "
                f"times the coordinate's unit {self._cost_unit[r, j]:g}, its largest table cost "
                "(is the realized cost in the table's units?)"
            )
        runs = np.flatnonzero(~ok.all(axis=1))
        raise InvalidValueError(
            f"cost must be finite and >= 0 (a realized cost sums the routed experts' cost "
            f"vectors), got {quoted(cost[runs].tolist())} at run(s) {quoted(runs.tolist())}"
        )

    def update_trusted(self, decision: Decision, reward: FloatArray, cost: FloatArray) -> None:
        """``update`` without its checks, for a caller that validated at its own boundary.

        The live router feeds back decisions this policy's ``select`` returned (draws and
        round valid by construction), with a reward and a cost it has already checked (finite,
        in range) and built as float64 arrays of shapes (R,) and (R, d); re-checking them cost
        a sizeable share of a route + feedback pair. Anything else calls ``update``.
        """
        self._update(decision, reward, cost)
        if self.pacer is not None and decision.cost is not None:
            self.pacer.settle(decision.cost, cost, True, decision.draws, decision.context)

    def update_built(self, decision: Decision, reward: FloatArray, cost: FloatArray) -> None:
        """``update`` for a caller that built the feedback itself: the simulator feeds back the
        decision ``select`` just returned, with a reward (R,) and a cost (R, d) of float64 it
        computed from the draws. Only the range checks run (one compiled pass,
        ``_batch_in_range``), not the checks of types and shapes; feedback out of range, a
        single run, or the debug checks go through ``update``, which names what is wrong."""
        if _debug_checks or not self._batch_in_range(decision.draws, reward, cost):
            self.update(decision, reward, cost)
        else:
            self.update_trusted(decision, reward, cost)

    # ------------------------------------------------------------------ pacing
    def pace(self, window: float | None = COST_WINDOW, mixtures: bool = True) -> Self:
        """Pace this policy's runs: every bound holds on the realized time-averaged spend,
        whatever the policy learns (``msroute.policies.pacing``; docs/budgets.md states the
        guarantee). Each decision's eligible experts are narrowed to those the remaining budget
        pays for, and each decision is booked at its team's table cost (``Decision.cost``)
        until ``update`` (or ``settle``) reports what it really cost.

        ``window``: the most calls of an expert its cost estimate averages over (None: all of
        them, as pacers recorded before the window ran). ``mixtures``: keep a reserve for the
        decisions no single expert fits inside the bounds (bounds that only a mixture of
        experts meets) and for what a mask forced short of a floor (False: as pacers recorded
        before it ran).

        Recorded with the constructor arguments (``pacing=True``, ``pacing_window``,
        ``pacing_mixtures``), so a saved, resized or rebuilt policy is paced the same.
        Returns the policy.
        """
        if self.pacer is None:
            if self.t:
                raise InvalidValueError(
                    f"pace() on a policy that has made {self.t} decision(s): pace it when it "
                    "is built (make_policy(..., pacing=True)), so that every decision is booked"
                )
            self.pacer = Pacer(
                self.problem_batch,
                self._cost_unit,
                self.n_contexts,
                math.inf if window is None else window,
                mixtures,
            )
            self._init_kwargs["pacing"] = True
            self._init_kwargs["pacing_window"] = window
            self._init_kwargs["pacing_mixtures"] = mixtures
        return self

    @classmethod
    def build(cls, problem: Any, **kwargs: Any) -> Self:
        """The policy built with ``kwargs``, paced if ``pacing`` is true (a constructor
        argument of every policy that no class's ``__init__`` takes: ``make_policy``, a loaded
        policy file and ``resized`` build through here)."""
        pacing = kwargs.pop("pacing", False)
        window = kwargs.pop("pacing_window", COST_WINDOW)
        mixtures = kwargs.pop("pacing_mixtures", True)
        for key, flag in (("pacing", pacing), ("pacing_mixtures", mixtures)):
            if not isinstance(flag, bool):
                raise InvalidTypeError(f"{key} must be True or False, got {flag!r:.80}")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int | float) or not window >= 1
        ):
            raise InvalidValueError(
                f"pacing_window must be None or a number of calls >= 1, got {window!r:.80}"
            )
        policy = cls(problem, **kwargs)
        return policy.pace(window, mixtures) if pacing else policy

    def settle(
        self,
        booked: ArrayLike,
        realized: ArrayLike | None,
        *,
        was_open: bool,
        decision: Decision | None = None,
    ) -> None:
        """Tell the pacer how a decision ended when ``update`` does not: its realized cost
        reported before its reward, or with a feedback that came late (``was_open=False``),
        or a decision closed without one (an expiry or a removed expert: ``realized=None``).
        ``booked`` is the decision's current cost; ``decision``, where known, lets the
        pacer's estimates learn each expert's cost from the report. Nothing happens for a
        policy that is not paced."""
        if self.pacer is None:
            return
        b = np.asarray(booked, dtype=np.float64).reshape(self.n_runs, self.n_costs)
        r = None
        if realized is not None:
            r = np.asarray(realized, dtype=np.float64).reshape(self.n_runs, self.n_costs)
            self.check_cost(r)
        draws = None if decision is None else decision.draws
        context = None if decision is None else decision.context
        self.pacer.settle(b, r, was_open, draws, context)

    def _check_eligible(self, eligible: ArrayLike) -> BoolArray | None:
        """The (R, K) mask, or None when every expert is eligible (the unmasked path)."""
        mask = np.asarray(eligible)
        if mask.shape != (self.n_runs, self.n_experts) or mask.dtype != np.bool_:
            raise InvalidValueError(
                f"eligible must be booleans of shape (R, K) = {(self.n_runs, self.n_experts)}, "
                f"got {mask.dtype} {mask.shape}"
            )
        if mask.all():
            return None
        empty = np.flatnonzero(~mask.any(axis=1))
        if empty.size:
            raise InvalidValueError(f"eligible: no eligible expert in run(s) {empty.tolist()}")
        return mask

    def _check_context(self, context: ArrayLike) -> IntArray:
        ctx = np.asarray(context)
        if ctx.ndim == 0:
            ctx = np.full(self.n_runs, ctx)
        if ctx.shape != (self.n_runs,) or ctx.dtype.kind not in "iu":  # signed or unsigned
            raise InvalidValueError(
                f"context must be integers of shape (R,) = ({self.n_runs},), "
                f"got {ctx.dtype} {ctx.shape}"
            )
        lo, hi = (int(ctx[0]),) * 2 if ctx.size == 1 else (int(ctx.min()), int(ctx.max()))
        if lo < 0 or hi >= self.n_contexts:
            raise InvalidValueError(
                f"context values must be in [0, {self.n_contexts - 1}] "
                f"({self.n_contexts} context(s)), got {sorted(set(ctx.tolist()))}"
            )
        return ctx.astype(np.int64, copy=False)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save the policy to one file; ``msroute.policies.load_policy`` resumes it.

        See ``msroute.policies.persist.save_policy``.
        """
        from msroute.policies.archive import save_policy

        save_policy(self, path)

    @classmethod
    def _legacy_kwargs(cls, format_version: int, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The constructor arguments of a policy saved in an older file format version, as
        that policy ran: a class whose default changed since gives it its old value where the
        file does not name it (``msroute.policies.persist``). Here: unchanged."""
        return kwargs

    @classmethod
    def _recorded_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Constructor arguments recorded by a policy file or a journal, as this msroute reads
        them (a class whose arguments changed meaning translates the old ones): a pacer
        recorded without ``pacing_window`` averaged all of an expert's calls, and one recorded
        without ``pacing_mixtures`` kept no reserve for decisions no single expert fits."""
        if not kwargs.get("pacing"):
            return kwargs
        old = {"pacing_window": None, "pacing_mixtures": False}
        return {**kwargs, **{k: v for k, v in old.items() if k not in kwargs}}

    def resized(self, problem: Problem, old_index: Sequence[int | None]) -> Self:
        """This policy over another expert set (and bounds), keeping what it learned.

        A new policy of the same class is built on ``problem`` with the constructor arguments
        of this one; each class declares in ``_expert_axes`` which of its state arrays run
        along the expert axis, and those keep the kept experts' entries (new expert ``j`` is
        expert ``old_index[j]`` of this policy, or new: None) while a new expert starts from
        the fresh policy's values; the other state is carried where its shape is unchanged
        (``msroute.policies.state_walk.carry_state``), except, when the bounds change, what the
        class declares in ``_constraint_attrs`` (its dual: learned about the old bounds), and
        the cost estimates of an expert whose table price changed (they start from the new
        price).
        Then ``_after_resize`` lets the class restore its own invariants (OMD: the new experts
        at the exploration floor).

        Parameters
        ----------
        problem : Problem
            The instance over the new expert set, in the new order.
        old_index : sequence of int or None, length K'
            Where each new expert was in this policy.

        Raises
        ------
        InfeasibleConstraintsError
            The new problem cannot be routed under its bounds (this policy is unchanged).
        InvalidValueError
            ``old_index`` does not fit ``problem`` or this policy.
        """
        index = list(old_index)
        if len(index) != problem.n_experts or any(
            i is not None and not 0 <= i < self.n_experts for i in index
        ):
            raise InvalidValueError(
                f"old_index: {len(index)} entries in [0, {self.n_experts}) or None, one per "
                f"expert of the new problem ({problem.n_experts}), got {index!r:.120}"
            )
        new = type(self).build(problem, **self._init_kwargs)
        before = [p.constraints.to_dict() for p in self.problem_batch.problems]
        after = [p.constraints.to_dict() for p in new.problem_batch.problems]
        # Another constraint set: what the class learned about the old one starts afresh.
        fresh = declared_names(type(self), "_constraint_attrs") if before != after else ()
        carry_state(self, new, index, fresh)
        old_costs = self.problem_batch.costs[0]
        repriced = [
            j
            for j, i in enumerate(index)
            if i is not None and not np.array_equal(problem.costs[j], old_costs[i])
        ]
        for estimate in new._estimates():  # a new price is news about what a call costs
            estimate.reprice(repriced)
        new._after_resize([j for j, i in enumerate(index) if i is None])
        return new

    def _estimates(self) -> list[CostEstimate]:
        """The online cost estimates this policy keeps (its own, its pacer's)."""
        parts: list[object] = [self] if self.pacer is None else [self, self.pacer]
        return [
            value
            for part in parts
            for name in state_attrs(part)
            if isinstance(value := getattr(part, name), CostEstimate)
        ]

    def _after_resize(self, added: list[int]) -> None:
        """Restore the class's invariants after ``resized`` carried the state over (``added``:
        the new experts' indices); nothing to do by default."""

    # ------------------------------------------------------------------ to implement
    def _select(
        self, context: IntArray | None, eligible: BoolArray | None
    ) -> tuple[IntArray, FloatArray | None]:
        """The draws (R, M) and the distribution sampled (R, K) or None; advance no counter."""
        raise NotImplementedError

    def _update(self, decision: Decision, reward: FloatArray, cost: FloatArray) -> None:
        raise NotImplementedError


def check_hyper(value: float, name: str, *, low: float = 0.0, strict: bool = True) -> float:
    """A finite float hyperparameter above ``low`` (strictly by default)."""
    v = as_real(value, name)
    if not np.isfinite(v) or (v <= low if strict else v < low):
        rel = ">" if strict else ">="
        raise InvalidValueError(f"{name} == {value}, must be a finite number {rel} {low}")
    if 0.0 < abs(v) < FLOAT_TINY:
        raise InvalidValueError(
            f"{name} == {value} is subnormal "
            f"(nonzero and below {FLOAT_TINY:.3g}: it has lost digits)"
        )
    return v
