"""Off-policy evaluation from a router's journal: what would a fixed q' have earned and spent?

A multinomial router logs, for every decision, its M ordered draws and the probability of each
under the distribution q it sampled from. A candidate that draws M times i.i.d. from a fixed
q' would have drawn the same ordered draws with probability ``prod_d q'_d``, so the importance
weight of decision t is exactly

    w_t = prod_{d in draws_t} q'_d / q_{t,d}

and ``E[w_t r_t] = E_{q'}[r]`` (the logging q may change from one decision to the next; each
weight uses the decision's own q). With an eligibility mask the candidate is restricted to the
same eligible experts and renormalized, as the router itself would play it; so is it where the
pacer narrowed a decision (the decision's ``allowed`` experts): the estimate is that of the
candidate paced as the logged traffic was, not of the candidate run unpaced (which could spend
past the bounds).

Estimates (n = the decisions with a logged reward):

* IPS: ``mean(w r)``; self-normalized IPS: ``sum(w r) / sum(w)``.
* One confidence interval for the candidate's value, which both estimates carry: a betting
  interval (``msroute.router.ope_interval``), valid whatever the tail of the weights, given that
  every reward lies in ``reward_range`` (default: the range the log shows) and that the log drew,
  with positive probability, every expert the candidate plays. Normal-approximation intervals
  (``± z sd / sqrt(n)``, the delta method for SNIPS) covered 0.30-0.92 of the time on a
  learning router's logs: its late decisions carry weights in the hundreds that most samples
  never show (``benchmarks/bench_ope_coverage.py``, docs/router.md).
* Effective sample size ``(sum w)^2 / sum(w^2)``: how many on-policy samples the estimate is
  worth. Below ``min_ess`` (default ``MIN_ESS``) the estimate is refused
  (``UnsupportedEstimateError``): a point estimate resting on a handful of weights is not one.

The same for each cost coordinate (the realized cost: the one reported with the feedback, else
the last one reported before it with ``Router.report_cost``, else the routed team's).
Decisions whose reward never came are left out, which is unbiased only if the reward is missing
independently of its value.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msroute._validation import FloatArray, finite_real, quoted
from msroute.errors import InvalidTypeError, InvalidValueError, UnsupportedEstimateError
from msroute.router.ope_interval import betting_interval

__all__ = ["MIN_ESS", "Estimate", "OPEResult", "evaluate"]

#: The smallest effective sample size ``evaluate`` gives an estimate for, by default.
MIN_ESS = 100.0


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        """JSON-ready."""
        return {"value": self.value, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class OPEResult:
    """What ``evaluate`` estimates for a candidate distribution.

    Attributes
    ----------
    n : int
        Decisions used (those with a logged reward).
    ips_reward, snips_reward : Estimate
        Expected reward per decision under q'.
    ips_cost, snips_cost : dict of str -> Estimate
        Expected realized cost per decision under q', by cost name.
    ess : float
        Effective sample size of the weights.
    max_weight : float
        The largest weight.
    level : float
        The confidence level of the intervals.
    """

    n: int
    ips_reward: Estimate
    snips_reward: Estimate
    ips_cost: dict[str, Estimate]
    snips_cost: dict[str, Estimate]
    ess: float
    max_weight: float
    level: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "n": self.n,
            "level": self.level,
            "ess": self.ess,
            "max_weight": self.max_weight,
            "ips": {
                "reward": self.ips_reward.to_dict(),
                "cost": {k: v.to_dict() for k, v in self.ips_cost.items()},
            },
            "snips": {
                "reward": self.snips_reward.to_dict(),
                "cost": {k: v.to_dict() for k, v in self.snips_cost.items()},
            },
        }


def _log_experts(events: list[dict[str, Any]], configured: Iterable[str]) -> set[str]:
    """The experts a log knows: ``configured`` ones, and those its events name (added, drawn,
    eligible, or given a propensity)."""
    known = {str(e) for e in configured}
    for e in events:
        if e.get("kind") == "add_expert":
            known.add(str(e.get("ref")))
        elif e.get("kind") == "decision":
            known.update(str(x) for x in e.get("draws") or ())
            known.update(str(x) for x in e.get("eligible") or ())
            known.update(str(x) for x in e.get("propensities") or ())
    return known


def _read_log(source: object) -> tuple[list[dict[str, Any]], list[str], set[str]]:
    """The events, the cost names and the experts (``_log_experts``) of a journal file, a
    Router or a list of event dicts."""
    from msroute.router.core import Router
    from msroute.router.journal import Journal
    from msroute.router.rows import event_of_row

    if isinstance(source, str | os.PathLike):
        journal = Journal(Path(source), create=False)
        try:
            config = json.loads(journal.meta("config"))
            events = [
                {"seq": s, "kind": k, "ref": r, "time": t, **p}
                for s, k, r, t, p, _ in journal.events()
            ]
        finally:
            journal.close()
        return events, list(config["cost_names"]), _log_experts(events, config["experts"])
    if isinstance(source, Router):
        events, seq = [], 0
        while batch := source.decisions_since(seq, 10_000):
            events.extend(batch)
            seq = batch[-1]["seq"]
        configured = [*source.config.experts, *source._state.retired]
        return events, source.cost_names, _log_experts(events, configured)
    if isinstance(source, Iterable):
        rows = [dict(e) for e in source]
        first = next((e for e in rows if e.get("kind") == "decision"), None)
        cost = None if first is None else first.get("cost")
        if isinstance(cost, Mapping):  # export rows (GET .../decisions): costs by name
            names = [str(name) for name in cost]
            return [event_of_row(row, names) for row in rows], names, _log_experts(rows, ())
        names = [str(j) for j in range(len(cost) if isinstance(cost, list | tuple) else 0)]
        return rows, names, _log_experts(rows, ())
    raise InvalidTypeError(
        "evaluate() takes a journal path, a Router or a list of events, got "
        f"{type(source).__name__}"
    )


def _checked_decision(e: dict[str, Any], n_costs: int) -> dict[str, Any]:
    """A logged decision whose draws, propensities (in (0, 1], one per draw) and cost (one
    finite number per cost name) an estimate can use."""
    what = f"decision {e.get('ref')!r}"
    draws, probs = e.get("draws"), e.get("probs")
    if probs is None:
        raise InvalidValueError(
            f"{what} has no propensities (a team policy): off-policy evaluation needs a "
            "multinomial policy's log"
        )
    if (
        not isinstance(draws, list | tuple)
        or not isinstance(probs, list | tuple)
        or (len(draws) != len(probs) or not draws)
    ):
        raise InvalidValueError(f"{what}: needs as many propensities as draws, got {draws!r:.80}")
    for p in probs:
        if not 0.0 < finite_real(p, f"{what}: propensity") <= 1.0:
            raise InvalidValueError(f"{what}: a propensity must be in (0, 1], got {p!r}")
    allowed = e.get("allowed")
    if allowed is not None and (
        not isinstance(allowed, list | tuple) or not set(draws) <= set(allowed)
    ):
        raise InvalidValueError(
            f"{what}: allowed must list the experts the pacer left, the draws among them, got "
            f"{allowed!r:.80}"
        )
    cost = e.get("cost")
    if not isinstance(cost, list | tuple) or len(cost) != n_costs:
        raise InvalidValueError(f"{what}: cost must have {n_costs} values, got {cost!r:.80}")
    for c in cost:
        finite_real(c, f"{what}: cost")
    return e


def _checked_feedback(e: dict[str, Any], n_costs: int) -> tuple[float, list[float] | None]:
    """A logged feedback's reward and reported cost (None, or one number per cost name)."""
    what = f"feedback {e['ref']!r}"
    cost = e.get("cost")
    if cost is not None and (not isinstance(cost, list | tuple) or len(cost) != n_costs):
        raise InvalidValueError(f"{what}: cost must have {n_costs} values, got {cost!r:.80}")
    reward = finite_real(e.get("reward"), f"{what}: reward")
    return reward, None if cost is None else [finite_real(c, f"{what}: cost") for c in cost]


def _check_candidate(q: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(q, Mapping) or not q:
        raise InvalidValueError(
            "candidate_q: must be a non-empty mapping of expert id -> probability"
        )
    out = {}
    for k, v in q.items():
        name = f"candidate_q[{quoted(k)}]"
        try:
            p = finite_real(v, name)
        except InvalidValueError:
            p = math.nan  # not a number, or not finite (an int of 400 digits too)
        if not p >= 0:
            raise InvalidValueError(f"{name}: must be a finite probability >= 0, got {quoted(v)}")
        out[str(k)] = p
    total = sum(out.values())
    if abs(total - 1.0) > 1e-9:
        raise InvalidValueError(f"candidate_q: probabilities must sum to 1, got {total!r}")
    return out


def evaluate(
    journal_or_log: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | Any,
    candidate_q: Mapping[str, float],
    *,
    level: float = 0.95,
    min_ess: float = MIN_ESS,
    reward_range: tuple[float, float] | None = None,
) -> OPEResult:
    """IPS and self-normalized IPS estimates of a fixed distribution's reward and cost.

    Parameters
    ----------
    journal_or_log : path, Router or list of event dicts
        A journal file, a live ``Router``, or events as returned by
        ``Router.decisions_since`` or as export rows (``Router.export_rows``,
        ``GET /v1/routers/{name}/decisions``).
    candidate_q : mapping of expert id -> probability
        The distribution q' to evaluate (M i.i.d. draws per decision, as the log's policy).
    level : float, default 0.95
        Confidence level of the intervals.
    min_ess : float, default ``MIN_ESS`` (100)
        The smallest effective sample size of the weights an estimate is given for; 0 gives
        one whatever the support (its intervals then hold but are wide, its point estimates
        unreliable).
    reward_range : (low, high), optional
        Bounds every reward lies within, for the interval (default: the smallest and largest
        reward of the log; give the known range, e.g. ``(0, 1)``, when the log may not show
        it). Each cost coordinate's range is from 0 to the largest cost of the log. A range read
        off the log that is a single value gives no interval (``-inf``, ``inf``).

    Raises
    ------
    UnsupportedEstimateError
        The effective sample size is below ``min_ess``: the log rarely drew what q' draws
        (a policy that converged, or a decaying floor, logs little of the other experts).
    InvalidValueError
        q' not a distribution or naming an id that is not an expert of the log, a log without
        propensities (a team policy) or with no rewards, or an event an estimate cannot use (a
        reward or cost that is not a finite number, a propensity outside (0, 1], not one
        propensity per draw) or a reward outside ``reward_range``, named.
    """
    if not 0.0 < finite_real(level, "level") < 1.0:
        raise InvalidValueError(f"level: must be a number in (0, 1), got {level!r}")
    if finite_real(min_ess, "min_ess") < 0.0:
        raise InvalidValueError(f"min_ess: must be a finite number >= 0, got {min_ess!r}")
    q_new = _check_candidate(candidate_q)
    events, names, experts = _read_log(journal_or_log)
    unknown = sorted(set(q_new) - experts)
    if unknown:
        raise InvalidValueError(
            f"candidate_q: {unknown} are not experts of the log (it knows {sorted(experts)})"
        )
    decisions: dict[str, dict[str, Any]] = {}
    rewards: dict[str, tuple[float, list[float] | None]] = {}
    reported: dict[str, list[float] | None] = {}
    for e in events:
        kind = e.get("kind")
        if kind == "decision":
            decisions[e["ref"]] = _checked_decision(e, len(names))
        elif kind == "feedback" and e["ref"] not in rewards:
            rewards[e["ref"]] = _checked_feedback(e, len(names))
        elif kind == "cost" and e["ref"] not in rewards:  # the cost its feedback learns
            reported[e["ref"]] = _checked_feedback({**e, "reward": 0.0}, len(names))[1]
        elif kind is None:
            raise InvalidValueError(f"an event without a kind: {e!r:.120}")
    used = [d for d in decisions if d in rewards]
    if not used:
        raise InvalidValueError("the log has no decision with a reward")
    w = np.empty(len(used))
    r = np.empty(len(used))
    c = np.empty((len(used), len(names)))
    for i, did in enumerate(used):
        e = decisions[did]
        eligible = e.get("allowed") or e.get("eligible")  # the pacer's set is within the mask
        scale = 1.0 if eligible is None else sum(q_new.get(x, 0.0) for x in set(eligible))
        ratio = 1.0
        for expert, p_old in zip(e["draws"], e["probs"], strict=True):
            ratio *= (q_new.get(expert, 0.0) / scale if scale > 0 else 0.0) / p_old
        w[i] = ratio
        reward, cost = rewards[did]
        r[i] = reward
        c[i] = reported.get(did) or e["cost"] if cost is None else cost
    ess = float(w.sum() ** 2 / np.sum(w * w)) if np.any(w > 0) else 0.0
    if ess < min_ess:
        raise UnsupportedEstimateError(
            f"the log cannot support an estimate of this candidate: the importance weights' "
            f"effective sample size is {ess:.1f} of {len(used)} decisions (min_ess = "
            f"{min_ess:g}; the largest weight is {float(w.max()):.3g}): the logged routing "
            "rarely drew what the candidate draws. Evaluate candidates nearer the logged "
            "routing, or log with a floor that holds (params gamma, docs/router.md); "
            "min_ess=0 gives the estimate anyway, with intervals that cover less often than "
            "their level"
        )
    if reward_range is None:
        r_range = float(r.min()), float(r.max())
    else:
        r_range = _checked_range(reward_range, r)
    c_high = c.max(axis=0)
    ips_c = [
        _estimates(w, c[:, j], (0.0, float(c_high[j])), level, False) for j in range(len(names))
    ]
    ips_r, sn_r = _estimates(w, r, r_range, level, reward_range is not None)
    return OPEResult(
        n=len(used),
        ips_reward=ips_r,
        snips_reward=sn_r,
        ips_cost={name: e[0] for name, e in zip(names, ips_c, strict=True)},
        snips_cost={name: e[1] for name, e in zip(names, ips_c, strict=True)},
        ess=ess,
        max_weight=float(w.max()),
        level=level,
    )


def _checked_range(reward_range: object, r: FloatArray) -> tuple[float, float]:
    """``reward_range`` as two finite numbers ``low <= high`` that hold every logged reward."""
    if not isinstance(reward_range, tuple | list) or len(reward_range) != 2:
        raise InvalidValueError(f"reward_range: must be (low, high), got {reward_range!r:.80}")
    low, high = (finite_real(v, f"reward_range[{i}]") for i, v in enumerate(reward_range))
    if low > high:
        raise InvalidValueError(f"reward_range: low {low:g} is above high {high:g}")
    if r.min() < low or r.max() > high:
        raise InvalidValueError(
            f"reward_range: the log has rewards from {float(r.min()):g} to {float(r.max()):g}, "
            f"outside ({low:g}, {high:g})"
        )
    return low, high


def _estimates(
    w: FloatArray, y: FloatArray, bounds: tuple[float, float], level: float, given: bool
) -> tuple[Estimate, Estimate]:
    """IPS and self-normalized IPS of ``y`` under the weights ``w``, both with the betting
    interval of the candidate's value. A range read off the log (not ``given``) that is one
    value says nothing of what the candidate's other draws would bring: no interval then,
    ``(-inf, inf)``."""
    low, high = bounds
    if high > low or given:
        down, up = betting_interval(w, y, low, high, level)
    else:
        down, up = -math.inf, math.inf
    total = float(w.sum())
    snips = float(np.sum(w * y) / total) if total > 0.0 else math.nan
    return Estimate(float(np.mean(w * y)), down, up), Estimate(snips, down, up)
