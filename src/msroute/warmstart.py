"""Warm start from an eval table: a router begins where a graded table says it should.

A team that routes LLM calls has graded its models on its own prompts before launch (an outcome
table, ``msroute.datasets.outcomes``). ``warm_start`` starts an OMD policy from such a table,
before any traffic:

* each context at the table's certified best routing for the policy's bounds (by default less
  the budget margin's cap, below): ``OPT^ctx`` of the table's prompts
  (``msroute.core.oracle.contextual_opt``: one routing per context under the aggregate budget,
  each prompt's own costs), with the floor the policy's first step keeps;
* the approachability dual at the optimum's multipliers: a bound that binds there is enforced
  from the first decision (its weight is the multiplier in the dual's units, in the unit ball);
* the reward and cost estimates as pseudo-counts of strength ``N`` (``DEFAULT_STRENGTH``), with
  the bias check of ``msroute.policies.warm`` that shrinks a prior the traffic contradicts;
* by default the prior anchors the learner (``anchor``; ``msroute.policies.warm``, "The
  anchor"), so that a good start is kept, not overwritten by the first noisy steps;
* by default the start keeps a live router's budget margin (``margin``; ``msroute.policies.warm``,
  "The margin"): the optimum is that of the bounds shrunk by the margin's cap, the box the dual
  approaches at its first decisions, and the anchor's price fades with the spend's slack;
* by default the decaying floor counts the table's pseudo-rounds as explored (``explored``;
  ``msroute.policies.warm``, "The floor"): a warm-started context explores as a cold one that
  had routed each expert as often, from its first routing on.

Nothing of the table is traffic: the policy has made no decision, spent nothing and learned from
no feedback after it. The table's prompts are mapped to the policy's contexts by name (a
category the policy does not know is refused); a context the table lacks starts cold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from msroute._validation import FloatArray, IntArray
from msroute.core.problem import Constraints, Problem
from msroute.datasets.outcomes import OutcomeTable
from msroute.errors import InfeasibleConstraintsError, InvalidValueError
from msroute.policies.omd import OMDApproachability
from msroute.policies.omd_variants import floor_at

__all__ = [
    "DEFAULT_STRENGTH",
    "WarmPlan",
    "plan_warm_start",
    "table_contexts",
    "warm_start",
    "within_margin",
]

#: The default strength ``N``: pseudo-rounds per (context, expert) of the table's means, calls
#: of its per-context costs, and ``N`` proximal steps (``N / B`` without the anchor;
#: ``msroute.policies.warm``). Chosen on the packaged LLM table split in halves
#: (``benchmarks/bench_warm_start.py``, docs/llm-routing.md): 20 left 0.003-0.004 more of the
#: gap to ``OPT^ctx`` at 20,000 queries, 400 no less than 100.
DEFAULT_STRENGTH = 100.0


@dataclass(frozen=True)
class WarmPlan:
    """What one problem's runs start from (``plan_warm_start``).

    Attributes
    ----------
    q : ndarray, shape (X, K)
        Each context's first routing (``None`` rows are not possible: a context without table
        prompts keeps ``cold``'s row).
    w : ndarray, shape (d,)
        The dual's start, in the dual's units.
    costs : ndarray, shape (X, K, d)
        The table's mean per-call cost of each expert in each context.
    mean, spread : ndarray, shape (X, K)
        The table's mean reward of each expert alone in each context (summed over dimensions),
        and its variance over the context's prompts.
    support : ndarray, shape (X,)
        The table's prompts per context.
    value : float
        The table's ``OPT^ctx`` (its mean expected reward under ``q``).
    multipliers : ndarray, shape (d,)
        The bounds' multipliers at the optimum (reward per unit of cost).
    """

    q: FloatArray
    w: FloatArray
    costs: FloatArray
    mean: FloatArray
    spread: FloatArray
    support: FloatArray
    value: float
    multipliers: FloatArray


def table_contexts(table: OutcomeTable, names: Sequence[str] | None) -> IntArray:
    """Each prompt's context index among ``names`` (the policy's contexts, by name); ``None``:
    one context for all prompts. Raises InvalidValueError naming a category not in ``names``."""
    if names is None or (len(names) <= 1 and table.n_contexts == 1):
        return np.zeros(table.n_prompts, dtype=np.int64)
    index = {n: i for i, n in enumerate(names)}
    unknown = [c for c in table.categories if c not in index]
    if unknown:
        raise InvalidValueError(
            f"warm start: the table's categor{'ies' if len(unknown) > 1 else 'y'} "
            f"{', '.join(map(repr, unknown[:5]))} {'are' if len(unknown) > 1 else 'is'} not "
            f"among the router's contexts ({', '.join(map(repr, names[:10]))})"
        )
    mapping = np.array([index[c] for c in table.categories], dtype=np.int64)
    return np.asarray(mapping[table.category], dtype=np.int64)


def within_margin(policy: OMDApproachability, run: int) -> Problem:
    """Run ``run``'s problem with its bounds shrunk by the budget margin's cap, the box the
    policy's dual approaches at its first decisions (``ApproachabilityDual.target``: a tenth of
    each finite bound, the margin's largest, while the realized costs are few); the problem
    itself where the dual keeps no budget margin or the shrunk bounds cross."""
    problem = policy.problem_batch.problems[run]
    dual = policy.dual
    if dual.construction != "invariant" or dual.budget_margin == 0.0:
        return problem
    units = problem.m_draws if dual.surrogate == "linear" else 1  # the dual's hi is per draw
    lo, hi = problem.constraints.lower_array(), problem.constraints.upper_array()
    upper, lower = hi - units * dual.pad_cap[run], lo + dual.pad_cap[run]
    if np.any(lower > upper):
        return problem
    return Problem(
        problem.costs,
        problem.m_draws,
        Constraints(
            upper=[float(u) if np.isfinite(h) else None for u, h in zip(upper, hi, strict=True)],
            lower=[float(v) if np.isfinite(b) else None for v, b in zip(lower, lo, strict=True)],
            names=problem.constraints.names,
        ),
        problem.cbar,
        expert_names=problem.expert_names,
    )


def plan_warm_start(
    policy: OMDApproachability,
    table: OutcomeTable,
    contexts: IntArray,
    run: int,
    strength: float,
    *,
    pick: float = 1.0,
    tol: float = 1e-6,
    anchor: bool = True,
    margin: bool = True,
    explored: bool = True,
) -> WarmPlan:
    """The warm start of run ``run``'s problem from ``table``, whose prompts are in policy
    contexts ``contexts`` (P,) (``table_contexts``), its costs those of the problem's cost
    names (matched by name; a problem without names: the table's costs, as many, in order);
    ``pick``: the team answer's combiner
    (``msroute.outcome_env.best_pick``); ``anchor``: whether the prior anchors the learner
    (``warm_start``), which sets the step its first QP step counts; ``margin``: the optimum of
    the bounds shrunk by the budget margin's cap (``within_margin``; that of the bounds where
    none meets them), else of the bounds; ``explored``: the floor of the first QP step counts
    the prior as explored (``msroute.policies.warm``, "The floor")."""
    from msroute.core.oracle import ContextualOracleResult, contextual_opt

    bounds = policy.problem_batch.problems[run]
    n_ctx, k = policy.n_contexts, policy.n_experts
    if table.n_experts != k:
        raise InvalidValueError(
            f"warm start: the table has {table.n_experts} models, the policy {k} experts"
        )
    if bounds.cost_names is not None:
        table = table.with_costs(bounds.cost_names)
    elif len(table.cost_names) != bounds.n_costs:
        raise InvalidValueError(
            f"warm start: the table has {len(table.cost_names)} costs "
            f"({', '.join(map(repr, table.cost_names[:10]))}), the policy {bounds.n_costs}"
        )
    first = float(policy.prior.steps_of(strength, anchor))
    if explored:
        first = max(first, float(policy.prior.explored_steps(strength, policy.gamma)))
    first += 1.0  # the first QP step's count
    floor = max(policy.floor_min, floor_at(policy.gamma, policy.floor, first))

    def optimum(problem: Problem) -> ContextualOracleResult:
        return contextual_opt(
            table.scores,
            contexts,
            np.ones((n_ctx, table.n_dims)),
            problem,
            floor=min(floor, 1.0 / k),
            round_costs=table.costs,
            tol=tol,
            pick=pick,
        )

    shrunk = within_margin(policy, run) if margin else bounds
    try:
        res = optimum(shrunk)
    except InfeasibleConstraintsError:
        if shrunk is bounds:
            raise
        res = optimum(bounds)  # no routing of the floor meets the shrunk bounds
    support = np.bincount(contexts, minlength=n_ctx).astype(np.float64)
    costs = np.zeros((n_ctx, k, table.costs.shape[2]))
    np.add.at(costs, contexts, table.costs)
    reward = table.scores.sum(axis=1)  # (P, K)
    per = np.maximum(support, 1.0)
    mean = np.zeros((n_ctx, k))
    np.add.at(mean, contexts, reward)
    mean /= per[:, None]
    spread = np.zeros((n_ctx, k))
    np.add.at(spread, contexts, (reward - mean[contexts]) ** 2)
    scale = policy.dual.scale[run] if policy.dual.construction == "invariant" else 1.0
    w = res.multipliers * scale
    w = w / max(1.0, float(np.linalg.norm(w)))
    return WarmPlan(
        q=res.q,
        w=w,
        costs=costs / per[:, None, None],
        mean=mean,
        spread=spread / per[:, None],
        support=support,
        value=res.value,
        multipliers=res.multipliers,
    )


def warm_start(
    policy: OMDApproachability,
    table: OutcomeTable,
    contexts: IntArray,
    strength: float = DEFAULT_STRENGTH,
    *,
    pick: float = 1.0,
    anchor: bool = True,
    margin: bool = True,
    explored: bool = True,
) -> list[WarmPlan]:
    """Start every run of ``policy`` from ``table`` (one plan per distinct problem, shared by
    the runs on it); returns the plans, in order of the problems' first runs.

    Parameters
    ----------
    policy : OMDApproachability
        A policy that has not decided yet.
    table : OutcomeTable
        The eval table, with the policy's experts as its models (in the policy's order) and a
        cost column of each of its problems' cost names (matched by name; a problem without
        names takes the table's costs in order, as many as it has).
    contexts : ndarray of int, shape (P,)
        Each prompt's context (``table_contexts``).
    strength : float, default ``DEFAULT_STRENGTH``
        ``N`` (>= 0).
    pick : float, default 1.0
        The team answer's combiner of the optimum.
    anchor : bool, default True
        Let the prior anchor the learner (``msroute.policies.warm``, "The anchor"): damped
        residuals, ``N`` steps counted, the optimum's multipliers as a price. False: the
        warm start as it was before the anchor (a journal that recorded none replays so).
    margin : bool, default True
        Keep the live budget margin (``msroute.policies.warm``, "The margin"): the optimum of
        the bounds shrunk by the margin's cap, the price faded by the spend's slack. False: the
        optimum of the bounds, the price gated by the dual (a journal that recorded no margin
        replays so).
    explored : bool, default True
        Let the decaying floor count the prior's pseudo-rounds as explored
        (``msroute.policies.warm``, "The floor"). False: the floor counts the anchor's steps (a
        journal that recorded no ``explored`` replays so).
    """
    if not isinstance(policy, OMDApproachability):
        raise InvalidValueError(
            f"warm start: policy {type(policy).__name__} is not of the OMD family"
        )
    if not (np.isfinite(strength) and strength >= 0):
        raise InvalidValueError(f"warm start: strength == {strength!r}, must be a number >= 0")
    problems = policy.problem_batch.problems
    cold = policy.q if policy.n_contexts > 1 else policy.q[:, None, :]
    plans: list[WarmPlan] = []
    done: dict[int, WarmPlan] = {}
    for run, problem in enumerate(problems):
        if id(problem) not in done:
            done[id(problem)] = plan_warm_start(
                policy,
                table,
                contexts,
                run,
                strength,
                pick=pick,
                anchor=anchor,
                margin=margin,
                explored=explored,
            )
            plans.append(done[id(problem)])
    runs = np.arange(len(problems))
    pl = [done[id(p)] for p in problems]
    has = np.stack([p.support for p in pl]) > 0
    q = np.where(has[:, :, None], np.stack([p.q for p in pl]), cold)
    policy.warm_start(
        q,
        np.stack([p.w for p in pl]),
        np.stack([p.costs for p in pl]),
        np.stack([p.mean for p in pl]),
        np.stack([p.spread for p in pl]),
        np.stack([p.support for p in pl]),
        float(strength),
        runs,
        np.stack([p.multipliers for p in pl]) if anchor else None,
        margin,
        explored,
    )
    return plans
