"""A generated family of live-routing instances, and a driver that runs a ``Router`` on one.

The budget guarantee and the live router's defaults are judged on many ordinary instances, not
on one table (docs/budgets.md, "The guarantee, measured"). One seed draws one instance:

* K experts (2-50), M draws (1-5), N reward dimensions (1-3), 1-3 cost coordinates: dollars
  per call spread over three orders of magnitude with the better experts dearer, and
  optionally a 0/1 flag with a covering bound (a share that must go to in-house experts) and a
  latency-like cost with a packing bound;
* a dollar budget from just above the cheapest routing the router accepts to generous;
* optionally contexts (tasks with their own skills), eligibility masks on a share of the
  requests, per-call cost noise and price rises that only the feedback reports, delayed and
  missing feedback, a bound lowered or raised mid-run, an expert removed mid-run.

``run_instance`` drives a ``Router`` through it query by query and reports the spend against
every bound at the end, the expected reward of the teams routed, and ``opt_reward``: the
certified best fixed routing per context under the table costs
(``msroute.core.oracle.contextual_opt``; a team's expected reward is its best member's skill, so
``opt_reward`` is exactly comparable).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections import deque
from typing import Any

import numpy as np

from msroute._validation import FloatArray
from msroute.core.problem import Constraints, Problem
from msroute.errors import InfeasibleConstraintsError

__all__ = ["FamilyInstance", "RunResult", "family_instance", "opt_reward", "run_instance"]


@dataclasses.dataclass(frozen=True)
class FamilyInstance:
    """One generated instance and its traffic (see the module docstring).

    Attributes
    ----------
    seed : int
    config : dict
        The router configuration (without ``policy``, ``params`` and ``pacing``).
    skills : ndarray, shape (X, N, K)
        Each context's skill of each expert per dimension: a team answers dimension ``n``
        correctly with its best member's skill.
    mask_share : float
        Share of the requests that may use only ``mask_experts``.
    mask_experts : tuple of str
    cost_noise : float
        Sigma of the lognormal noise of each call's realized cost (0: the table's).
    price_from : int or None
        From this decision on, ``price_factor`` multiplies the realized dollars (the first
        cost) of ``price_experts``.
    price_factor : float
    price_experts : tuple of str
    max_delay : int
        Feedback arrives 0 to ``max_delay`` decisions late.
    missing : float
        Share of the decisions that never get feedback.
    bound_at : int or None
        At this decision the dollar budget becomes ``bound_new``.
    bound_new : float
    remove_at : int or None
        At this decision ``remove_expert`` is removed (if the router can).
    remove_expert : str
    """

    seed: int
    config: dict[str, Any]
    skills: FloatArray
    mask_share: float = 0.0
    mask_experts: tuple[str, ...] = ()
    cost_noise: float = 0.0
    price_from: int | None = None
    price_factor: float = 1.0
    price_experts: tuple[str, ...] = ()
    max_delay: int = 0
    missing: float = 0.0
    bound_at: int | None = None
    bound_new: float = 0.0
    remove_at: int | None = None
    remove_expert: str = ""

    def features(self) -> dict[str, Any]:
        """What the instance exercises, for the results table."""
        cfg = self.config
        return {
            "K": len(cfg["experts"]),
            "M": cfg["m_draws"],
            "d": len(cfg["cost_names"]),
            "contexts": len(cfg.get("contexts") or ()),
            "masks": self.mask_share > 0,
            "lower": bool(cfg["constraints"]["lower"]),
            "noise": self.cost_noise > 0,
            "price_rise": self.price_from is not None,
            "delay": self.max_delay > 0,
            "missing": self.missing > 0,
            "bound_change": self.bound_at is not None,
            "removal": self.remove_at is not None,
        }


def _min_budget(
    costs: FloatArray, m: int, upper: list[float | None], lower: list[float | None]
) -> float | None:
    """The smallest dollar budget (coordinate 0) the router accepts with the other bounds, by
    bisection on ``Problem.accepts_a_floor`` (None when none does)."""

    def accepted(budget: float) -> bool:
        cons = Constraints(upper=[budget, *upper[1:]], lower=lower)
        try:
            return Problem(costs, m, cons).accepts_a_floor()
        except InfeasibleConstraintsError:
            return False

    lo, hi = 0.0, float(costs[:, 0].max()) * m
    if not accepted(hi):
        return None
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if accepted(mid) else (mid, hi)
    return hi


def family_instance(seed: int, horizon: int = 3000) -> FamilyInstance:
    """Draw instance ``seed`` of the family (the same seed, the same instance)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xFA11]))
    while True:
        inst = _draw(rng, seed, horizon)
        if inst is not None:
            return inst


def _draw(rng: np.random.Generator, seed: int, horizon: int) -> FamilyInstance | None:
    k = int(np.clip(np.round(np.exp(rng.uniform(np.log(2), np.log(50)))), 2, 50))
    m = int(rng.integers(1, 6))
    n_dims = int(rng.integers(1, 4))
    d = int(rng.integers(1, 4))
    usd = np.exp(rng.uniform(np.log(1e-4), np.log(1e-1), k))
    kinds = list(rng.permutation(["flag", "latency"]))[: d - 1]
    columns, names = [usd], ["usd"]
    upper: list[float | None] = [None]
    lower: list[float | None] = [None]
    for kind in kinds:
        if kind == "flag":
            flag = (rng.random(k) < rng.uniform(0.2, 0.5)).astype(float)
            flag[int(rng.integers(k))] = 1.0
            columns.append(flag)
            names.append("in_house")
            upper.append(None)
            lower.append(float(rng.uniform(0.05, 0.4)))
        else:
            lat = np.exp(rng.uniform(np.log(0.2), np.log(5.0), k))
            columns.append(lat)
            names.append("seconds")
            low, high = sorted((1.5 * m * lat.min(), m * lat.mean()))
            upper.append(float(np.exp(rng.uniform(np.log(low), np.log(high)))))
            lower.append(None)
    costs = np.stack(columns, axis=1)
    least = _min_budget(costs, m, upper, lower)
    if least is None:
        return None
    generous = max(2.0 * least, float(m * usd.mean()))
    budget = float(np.exp(rng.uniform(np.log(least * 1.05), np.log(generous))))
    upper[0] = budget
    # Skills: better experts are dearer (log-price rank), each context reshuffles some.
    n_ctx = int(rng.integers(2, 7)) if rng.random() < 0.5 else 1
    rank = np.argsort(np.argsort(np.log(usd) + rng.normal(0, 0.5, k))) / max(k - 1, 1)
    base = 0.25 + 0.6 * rank
    skills = np.clip(base[None, None, :] + rng.normal(0, 0.15, (n_ctx, n_dims, k)), 0.02, 0.98)
    ids = [f"x{i}" for i in range(k)]
    config: dict[str, Any] = {
        "m_draws": m,
        "cost_names": names,
        "seed": seed,
        "experts": {e: costs[i].tolist() for i, e in enumerate(ids)},
        "constraints": {
            "upper": {n: u for n, u in zip(names, upper, strict=True) if u is not None},
            "lower": {n: v for n, v in zip(names, lower, strict=True) if v is not None},
        },
    }
    if n_ctx > 1:
        config["contexts"] = [f"task{i}" for i in range(n_ctx)]
    extra: dict[str, Any] = {}
    if rng.random() < 0.3:  # a share of the requests may use only a few (often dear) experts
        dear = np.argsort(-usd)[: int(rng.integers(1, min(3, k) + 1))]
        extra.update(
            mask_share=float(rng.uniform(0.1, 0.5)), mask_experts=tuple(ids[i] for i in dear)
        )
    if rng.random() < 0.3:
        extra["cost_noise"] = float(rng.uniform(0.1, 0.6))
    if rng.random() < 0.3:  # prices that rise, seen only in the feedback
        chosen = rng.random(k) < 0.5
        chosen[int(rng.integers(k))] = True
        extra.update(
            price_from=int(rng.integers(0, horizon // 2)),
            price_factor=float(rng.uniform(1.3, 3.0)),
            price_experts=tuple(ids[i] for i in np.flatnonzero(chosen)),
        )
    if rng.random() < 0.3:
        extra["max_delay"] = int(rng.integers(1, 60))
    if rng.random() < 0.1:
        extra["missing"] = float(rng.uniform(0.01, 0.2))
    if rng.random() < 0.2:
        new = budget * float(rng.uniform(0.7, 1.3))
        if new > least * 1.02:
            extra.update(bound_at=int(rng.integers(horizon // 10, horizon // 2)), bound_new=new)
    if rng.random() < 0.2 and k > 2:
        extra.update(
            remove_at=int(rng.integers(horizon // 10, horizon // 2)),
            remove_expert=ids[int(rng.integers(k))],
        )
    inst = FamilyInstance(seed, config, skills, **extra)
    if inst.remove_at is not None and not _achievable(inst, without=inst.remove_expert):
        inst = dataclasses.replace(inst, remove_at=None, remove_expert="")  # it would be unkeepable
    if not _achievable(inst):
        return None
    if inst.bound_at is not None and not _achievable(inst, horizon=horizon):
        # A lowered budget that the run, having spent up to the old one, cannot pay back by
        # its end: no router could keep it.
        inst = dataclasses.replace(inst, bound_at=None, bound_new=0.0)
    return inst


def _achievable(
    inst: FamilyInstance,
    slack: float = 0.05,
    without: str | None = None,
    horizon: int | None = None,
) -> bool:
    """Whether some routing of single experts keeps every bound with ``slack`` to spare at the
    real prices (risen ones included), the lowered budget and the masked share (``without``
    that expert): the instance is one a router can keep (the guarantee assumes it).

    With ``horizon``, a changed budget is kept over the whole run by a routing that starts at
    the change, after a run that spent up to the old budget until then: the average over the
    rest must be at most ``(T u_new - t u_old) / (T - t)``."""
    from scipy.optimize import linprog

    cfg = inst.config
    ids = [e for e in cfg["experts"] if e != without]
    names = cfg["cost_names"]
    costs = np.array([cfg["experts"][e] for e in ids])
    if inst.price_from is not None:
        costs[[e in inst.price_experts for e in ids], 0] *= inst.price_factor
    k = len(ids)
    share = inst.mask_share
    masked = np.array([e in inst.mask_experts for e in ids])
    # Variables: the routing of the free requests (K), then of the masked ones (K, masked only).
    spend = np.hstack([(1.0 - share) * costs.T, share * costs.T])  # (d, 2K)
    a_ub, b_ub = [], []
    upper = dict(cfg["constraints"]["upper"])
    if inst.bound_at is not None:
        old, new, at = upper["usd"], inst.bound_new, inst.bound_at
        rest = new if horizon is None else (horizon * new - at * old) / (horizon - at)
        upper["usd"] = min(old, new, rest)
        if upper["usd"] <= 0.0:
            return False
    for j, n in enumerate(names):
        if n in upper:
            a_ub.append(spend[j])
            b_ub.append(upper[n] * (1.0 - slack))
        if n in cfg["constraints"]["lower"]:
            a_ub.append(-spend[j])
            b_ub.append(-cfg["constraints"]["lower"][n] * (1.0 + slack))
    a_eq = np.zeros((2, 2 * k))
    a_eq[0, :k] = 1.0
    a_eq[1, k:] = 1.0
    bounds = [(0.0, None)] * k + [(0.0, None if masked[i] or not share else 0.0) for i in range(k)]
    res = linprog(
        np.zeros(2 * k), A_ub=np.array(a_ub), b_ub=b_ub, A_eq=a_eq, b_eq=[1.0, 1.0], bounds=bounds
    )
    return bool(res.status == 0)


@dataclasses.dataclass
class RunResult:
    """One run of ``run_instance``: the end state against the bounds in force."""

    seed: int
    reward: float
    over: bool
    worst: float
    avg_cost: dict[str, float]
    upper: dict[str, float]
    lower: dict[str, float]
    restricted: int
    seconds: float

    def row(self) -> dict[str, Any]:
        """A flat row for a results table (costs and bounds by name)."""
        out: dict[str, Any] = {
            k: v for k, v in dataclasses.asdict(self).items() if not isinstance(v, dict)
        }
        for n, v in self.avg_cost.items():
            out[f"avg_{n}"] = v
            out[f"upper_{n}"] = self.upper.get(n, math.nan)
            out[f"lower_{n}"] = self.lower.get(n, math.nan)
        return out


def run_instance(
    inst: FamilyInstance,
    horizon: int = 3000,
    *,
    policy: str = "omd",
    params: dict[str, Any] | None = None,
    pacing: bool = True,
    config: dict[str, Any] | None = None,
) -> RunResult:
    """Drive a ``Router`` (in memory) through ``horizon`` queries of ``inst``.

    ``worst`` is the largest spend / bound over the packing bounds and bound / spend over the
    covering ones at the end (<= 1: every bound held); ``over`` says whether any bound is
    broken at all (no tolerance). ``reward`` is the mean expected reward of the teams routed
    (each dimension: the best member's skill). ``config``: other router keys to set.
    """
    from msroute.router import Router

    tic = time.perf_counter()
    rng = np.random.default_rng(np.random.SeedSequence([inst.seed, 0x7EA]))
    cfg = {**inst.config, "policy": policy, "pacing": pacing, "params": dict(params or {})}
    cfg.update(config or {})
    router = Router(cfg)
    names = inst.config["cost_names"]
    ids = list(inst.config["experts"])
    col = {e: i for i, e in enumerate(ids)}
    table = np.array([inst.config["experts"][e] for e in ids])
    contexts = inst.config.get("contexts")
    n_ctx = inst.skills.shape[0]
    priced = np.array([e in inst.price_experts for e in ids])
    queue: deque[tuple[int, str, float, list[float]]] = deque()
    reward_sum = 0.0
    for t in range(horizon):
        if t == inst.bound_at:
            router.set_bounds(upper={"usd": inst.bound_new})
        if t == inst.remove_at:
            with contextlib.suppress(InfeasibleConstraintsError):
                router.remove_expert(inst.remove_expert)
        x = int(rng.integers(n_ctx))
        eligible = None
        if inst.mask_share and rng.random() < inst.mask_share:
            eligible = [e for e in inst.mask_experts if e in router.expert_ids] or None
        d = router.route(context=None if contexts is None else contexts[x], eligible=eligible)
        cols = [col[e] for e in d.team]
        best = inst.skills[x][:, cols].max(axis=1)
        reward_sum += float(best.sum())
        paid = table[cols].copy()
        if inst.price_from is not None and t >= inst.price_from:
            paid[priced[cols], 0] *= inst.price_factor  # dollars: the price
        if inst.cost_noise:
            sigma = inst.cost_noise
            paid *= np.exp(rng.normal(-0.5 * sigma**2, sigma, len(cols)))[:, None]
        cost = paid.sum(axis=0).tolist()
        reward = float((rng.random(best.shape) < best).sum())
        if inst.missing and rng.random() < inst.missing:
            continue
        due = t + (int(rng.integers(inst.max_delay + 1)) if inst.max_delay else 0)
        queue.append((due, d.decision_id, reward, cost))
        while queue and queue[0][0] <= t:
            _, did, r, c = queue.popleft()
            router.feedback(did, r, cost=dict(zip(names, c, strict=True)))
        if inst.max_delay and len(queue) > 1:
            queue = deque(sorted(queue))
    for _, did, r, c in queue:
        router.feedback(did, r, cost=dict(zip(names, c, strict=True)))
    state = router.state()
    avg = {n: float(v) for n, v in state["avg_cost"].items()}
    upper, lower = dict(router.config.upper), dict(router.config.lower)
    ratios = [avg[n] / u if u > 0 else (math.inf if avg[n] > 0 else 0.0) for n, u in upper.items()]
    ratios += [v / avg[n] if avg[n] > 0 else math.inf for n, v in lower.items() if v > 0]
    over = any(avg[n] > u for n, u in upper.items()) or any(avg[n] < v for n, v in lower.items())
    restricted = int(router.policy.pacer.restricted[0]) if router.policy.pacer is not None else 0
    return RunResult(
        seed=inst.seed,
        reward=reward_sum / horizon,
        over=over,
        worst=max(ratios, default=0.0),
        avg_cost=avg,
        upper=upper,
        lower=lower,
        restricted=restricted,
        seconds=time.perf_counter() - tic,
    )


def opt_reward(inst: FamilyInstance) -> float:
    """The certified best fixed routing per context under the initial bounds and the table
    costs, contexts equally likely (``contextual_opt``, floor 0)."""
    from msroute.core.oracle import contextual_opt

    cfg = inst.config
    names = cfg["cost_names"]
    costs = np.array(list(cfg["experts"].values()))
    cons = Constraints(
        upper=[cfg["constraints"]["upper"].get(n) for n in names],
        lower=[cfg["constraints"]["lower"].get(n) for n in names],
        names=names,
    )
    problem = Problem(costs, cfg["m_draws"], cons)
    n_ctx, n_dims, _ = inst.skills.shape
    res = contextual_opt(
        inst.skills, np.arange(n_ctx), np.ones((n_ctx, n_dims)), problem, floor=0.0, tol=1e-5
    )
    return float(res.value)
