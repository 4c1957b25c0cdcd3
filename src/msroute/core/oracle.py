"""OPT: the best fixed feasible routing policy in hindsight (eq. (3) and Section 5.2).

For a recorded skill sequence ``V^(1), ..., V^(T)`` the benchmark of eq. (3) is:

    OPT = max_q  F(q) = (1/T) sum_t Phi_t(q)
          s.t.   q in the simplex,  q >= floor,  lo <= C^T q <= hi

with ``[lo, hi]`` the *surrogate* box ``S`` of Section 4.2 (``Problem.surrogate_box``) and
``Phi_t`` the exact expected sum-max reward of ``msroute.core.reward``. Eq. (3) has no floor
(``floor = 0``). The contextual benchmark ``OPT^ctx`` (``contextual_opt``) keeps one ``q`` per
context under one budget on the aggregate spend, the comparator of Algorithm 2.

``F`` is concave and smooth, so the program is a smooth concave maximisation over a polytope
``P``. The solver here

1. sorts every ``(t, n)`` row of skills once and keeps the gaps ``v(j) - v(j+1)`` and the sort
   order (``msroute.core.reward.SortedRows``, which also gives the exact Hessian), so that one
   evaluation of ``F`` and of its exact gradient is a gather, a running sum, an integer power
   and a scatter-add over ``T N K`` entries;
2. starts from a relative-interior point of ``P`` (a linear program, which also detects an
   empty ``P``) and runs scipy's SLSQP with the analytic gradient;
3. moves the SLSQP point exactly into ``P`` (SLSQP may leave constraint violations of order
   ``1e-10``) by mixing it with the interior point, so that the reported value is ``F`` of a
   feasible policy, a true lower bound on OPT;
4. certifies it with the Frank-Wolfe gap ``max_{s in P} grad F(q) . (s - q)``, an upper bound on
   ``OPT - F(q)`` by concavity, computed with a linear program (HiGHS, tightened tolerances);
5. polishes it with Newton steps on the face of ``P`` SLSQP ended on (exact Hessian; one or two
   steps take the gap from ~1e-7 to ~1e-12), keeping whichever point has the smallest
   certified gap, and restarts SLSQP from the best point while the gap is above ``tol``.

If the gap does not drop below ``tol`` within the iteration cap, the result says so
(``converged = False``) and a ``ConvergenceWarning`` (a
``RuntimeWarning``) is issued.

Threads: SLSQP makes many LAPACK calls on K x K matrices; a multi-threaded BLAS on a machine
whose cores are already busy (parallel sweeps) can make them 10-50 times slower. Run such
sweeps with ``OPENBLAS_NUM_THREADS=1`` (or ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from msroute._validation import (
    FloatArray,
    IntArray,
    as_float_array,
    as_real,
    check_contexts,
    check_gamma,
    check_positive_int,
)
from msroute.core._polytope import Polytope
from msroute.core.problem import Problem
from msroute.core.reward import SortedRows, context_scaled
from msroute.errors import ConvergenceWarning, InfeasibleConstraintsError, InvalidValueError

__all__ = [
    "ContextualOracleResult",
    "OracleResult",
    "best_fixed_policy",
    "best_fixed_policy_for",
    "contextual_opt",
]

#: Cap on SLSQP restarts from the best point so far.
_MAX_RUNS = 20

#: SLSQP's first run stops early (Newton finishes); restarts ask for 1e-14.
_FIRST_FTOL = 1e-8

#: Newton polishing continues until the gap is below ``_AIM * tol`` (or stops improving).
_AIM = 1e-3

#: Newton polishing steps after each SLSQP run (when its certificate is above tol).
_NEWTON_STEPS = 8

#: A floor or inequality with less room than this (times the data scale) counts as active.
_ACTIVE = 1e-9


@dataclass(frozen=True)
class OracleResult:
    """The best fixed feasible routing policy in hindsight, with its certificate.

    Attributes
    ----------
    q : ndarray, shape (K,)
        The maximiser found; it lies in ``P`` (simplex, floor, surrogate box) up to
        floating-point rounding.
    value : float
        ``F(q) = (1/T) sum_t Phi_t(q)``, a lower bound on OPT (eq. (3)).
    gap : float
        Frank-Wolfe gap ``max_{s in P} grad F(q) . (s - q) >= OPT - value``: the certified
        distance to OPT, so ``value <= OPT <= value + gap``.
    iterations : int
        SLSQP iterations over all restarts plus Newton steps.
    converged : bool
        Whether ``gap <= tol``.
    message : str
        How the run ended, in words.
    """

    q: FloatArray
    value: float
    gap: float
    iterations: int
    converged: bool
    message: str = ""


@dataclass(frozen=True)
class ContextualOracleResult:
    """``OPT^ctx``: the best fixed policy per context under the aggregate budget, certified.

    Attributes
    ----------
    value : float
        ``sum_x p_x Phi_x(q_x)`` of the policies found, a lower bound on ``OPT^ctx``.
    gap : float
        Frank-Wolfe gap of the whole program: ``value <= OPT^ctx <= value + gap``.
    q : ndarray, shape (X, K)
        Context ``x``'s policy; a context never observed keeps a feasible policy that earns 0.
    context_values : ndarray, shape (X,)
        ``Phi_x(q_x)``: the mean expected reward over context ``x``'s rounds (0 if none).
    counts : ndarray of int, shape (X,)
        ``T_x``, the number of rounds with context ``x``.
    cost : ndarray, shape (d,)
        The aggregate surrogate cost ``sum_x p_x C_x^T q_x`` (inside ``S``).
    iterations : int
    converged : bool
        Whether ``gap <= tol``.
    message : str
    multipliers : ndarray, shape (d,)
        The bounds' KKT multipliers at ``q`` (``msroute.core._polytope.Polytope.multipliers``):
        reward per unit of aggregate surrogate cost, positive where an upper bound binds,
        negative where a lower one does, 0 for a cost without a bound or with slack.
    """

    value: float
    gap: float
    q: FloatArray
    context_values: FloatArray
    counts: np.ndarray
    cost: FloatArray
    iterations: int
    converged: bool
    message: str = ""
    multipliers: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))


# ---------------------------------------------------------------------------- solver
def _newton_step(
    objective: SortedRows, poly: Polytope, q: FloatArray, grad: FloatArray
) -> FloatArray | None:
    """One Newton step on the face of ``P`` that ``q`` lies on (the inequalities active at
    ``q`` kept as equalities), with a ratio test against the others.

    SLSQP's stopping rule compares values of ``F``, whose rounding (~1e-16 relative) hides
    the last digits of ``q``; Newton's step uses the exact gradient and Hessian and takes a
    Frank-Wolfe gap from ~1e-7 to ~1e-12 in one or two steps when the face is right.
    Returns None when the face is a single point or the step is negligible.
    """
    scale = poly.scale
    free = np.flatnonzero(q > poly.floor + _ACTIVE)
    if free.size == 0:
        return None
    slack = poly.b_ub - poly.a_ub @ q
    active = slack <= _ACTIVE * scale
    eq = np.vstack([poly.a_eq[:, free], poly.a_ub[active][:, free]])
    _, sv, vt = np.linalg.svd(eq)
    rank = int(np.count_nonzero(sv > 1e-10 * sv.max()))
    basis = vt[rank:].T  # null space of the face's equalities, (f, f - rank)
    if basis.shape[1] == 0:
        return None
    hess = objective.hessian(q, free)
    curv = -(basis.T @ hess @ basis)  # positive semi-definite
    curv = 0.5 * (curv + curv.T)
    mu = 1e-12 * max(float(np.trace(curv)), 1.0)  # a flat (linear) direction stays bounded
    rhs = basis.T @ grad[free]
    step = basis @ np.linalg.solve(curv + mu * np.eye(curv.shape[0]), rhs)
    # Ratio test: the floor on free coordinates, the inactive inequalities.
    alpha = 1.0
    dec = step < 0
    if np.any(dec):
        alpha = min(alpha, float(np.min((q[free][dec] - poly.floor) / -step[dec])))
    rate = poly.a_ub[~active][:, free] @ step
    grow = rate > 0
    if np.any(grow):
        alpha = min(alpha, float(np.min(slack[~active][grow] / rate[grow])))
    if alpha * float(np.abs(step).max()) < 1e-16:
        return None
    out = q.copy()
    out[free] += alpha * step
    return poly.repair(out)


def _solve(objective: SortedRows, poly: Polytope, tol: float, max_iter: int) -> OracleResult:
    from scipy.optimize import minimize  # scipy loads when an oracle is first solved

    k = poly.costs.shape[0]
    bounds = [(poly.floor, 1.0)] * k
    constraints = poly.slsqp_constraints()

    def neg(q: FloatArray) -> tuple[float, FloatArray]:
        value, grad = objective.value_and_grad(q)
        return -value, -grad

    def certify(q: FloatArray) -> tuple[float, float, FloatArray]:
        value, grad = objective.value_and_grad(q)
        s = poly.linear_max(grad)
        return value, max(float(grad @ (s - q)), 0.0), grad

    # Every candidate is feasible with its own valid certificate; keep the tightest.
    best_q = poly.center
    best_value, best_gap, best_grad = certify(best_q)

    def offer(q: FloatArray) -> bool:
        nonlocal best_q, best_value, best_gap, best_grad
        value, gap, grad = certify(q)
        if gap < best_gap or (gap == best_gap and value > best_value):
            best_q, best_value, best_gap, best_grad = q, value, gap, grad
            return True
        return False

    aim = _AIM * tol  # Newton steps are cheap: polish well inside tol
    iterations = runs = stalls = 0
    ftol = _FIRST_FTOL
    message = "the interior starting point is already optimal"
    while best_gap > tol and iterations < max_iter and runs < _MAX_RUNS and stalls < 2:
        res = minimize(
            neg,
            best_q,
            jac=True,
            method="SLSQP",
            bounds=bounds,
            constraints=constraints,
            options={"ftol": ftol, "maxiter": max(1, min(200, max_iter - iterations))},
        )
        iterations += max(int(res.nit), 1)
        runs += 1
        improved = offer(poly.repair(np.asarray(res.x, dtype=np.float64)))
        message = f"SLSQP: {res.message} ({runs} run(s))"
        newton = 0
        while best_gap > aim and newton < _NEWTON_STEPS and iterations < max_iter:
            q_new = _newton_step(objective, poly, best_q, best_grad)
            iterations += 1
            newton += 1
            if q_new is None or not offer(q_new):
                break
            improved = True
        if newton:
            message += f", {newton} Newton step(s)"
        stalls = 0 if improved else stalls + 1
        ftol = 1e-14  # restarts (fresh quasi-Newton model) from the best point ask for more
    converged = best_gap <= tol
    if not converged:
        message = (
            f"not converged: certified gap {best_gap:.3g} > tol {tol:.3g} after {iterations} "
            f"iterations ({message})"
        )
        warnings.warn(f"best_fixed_policy {message}", ConvergenceWarning, stacklevel=3)
    return OracleResult(
        q=best_q,
        value=best_value,
        gap=best_gap,
        iterations=iterations,
        converged=converged,
        message=message,
    )


# ---------------------------------------------------------------------------- public API
def _check_inputs(
    skills: ArrayLike, costs: ArrayLike, lo: ArrayLike, hi: ArrayLike, floor: float, tol: float
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, float, float]:
    v = as_float_array(skills, "skills", ndim_min=3, ndim_max=3)
    if np.any(v < 0):
        raise InvalidValueError(f"skills must be >= 0 (sum-max rewards); min is {v.min():.3g}")
    if v.shape[0] < 1 or v.shape[1] < 1 or v.shape[2] < 1:
        raise InvalidValueError(
            f"skills must have shape (T, N, K) with T, N, K >= 1, got {v.shape}"
        )
    c = as_float_array(costs, "costs", ndim_min=2, ndim_max=2)
    k = v.shape[2]
    if c.shape[0] != k:
        raise InvalidValueError(f"costs has {c.shape[0]} rows (experts) but skills has K = {k}")
    d = c.shape[1]
    lo_a = as_float_array(lo, "lo", ndim_min=1, ndim_max=1)
    hi_a = as_float_array(hi, "hi", ndim_min=1, ndim_max=1)
    for name, arr in (("lo", lo_a), ("hi", hi_a)):
        if arr.shape != (d,):
            raise InvalidValueError(
                f"{name} must have shape ({d},) (one entry per cost), got {arr.shape}"
            )
    if np.any(lo_a > hi_a):
        j = int(np.flatnonzero(lo_a > hi_a)[0])
        raise InfeasibleConstraintsError(f"lo[{j}] == {lo_a[j]} is above hi[{j}] == {hi_a[j]}")
    floor = check_gamma(floor, k, "floor", InfeasibleConstraintsError)
    tol = as_real(tol, "tol")
    if not tol > 0:
        raise InvalidValueError(f"tol == {tol}, must be > 0")
    return v, c, lo_a, hi_a, floor, tol


def best_fixed_policy(
    skills: ArrayLike,
    costs: ArrayLike,
    lo: ArrayLike,
    hi: ArrayLike,
    m_draws: int,
    *,
    floor: float = 0.0,
    tol: float = 1e-6,
    max_iter: int = 1000,
) -> OracleResult:
    """OPT of eq. (3): the best fixed feasible routing policy in hindsight, certified.

    Maximises ``F(q) = (1/T) sum_t Phi_t(q)`` over
    ``P = {q in simplex : q >= floor, lo <= C^T q <= hi}`` (see the module docstring).

    Parameters
    ----------
    skills : array_like, shape (T, N, K)
        The recorded skill matrices ``V^(t)``, entries >= 0.
    costs : array_like, shape (K, d)
        Cost vectors ``c_i`` (the rows of ``C``).
    lo, hi : array_like, shape (d,)
        The surrogate box ``S`` (``Problem.surrogate_box``), finite.
    m_draws : int
        M, the number of i.i.d. draws per round.
    floor : float, default 0.0
        Lower bound on every ``q_i`` (eq. (3) has none; Section 5.2 uses ``gamma``).
    tol : float, default 1e-6
        Required certified gap (absolute, in reward units).
    max_iter : int, default 1000
        Cap on SLSQP iterations (over all restarts) plus Newton steps.

    Returns
    -------
    OracleResult
        ``value <= OPT <= value + gap``; ``converged`` tells whether ``gap <= tol``.

    Raises
    ------
    InfeasibleConstraintsError
        When ``P`` is empty.

    Examples
    --------
    >>> skills = [[[1.0, 0.0]], [[0.0, 1.0]]]  # T = 2 rounds, N = 1, K = 2
    >>> res = best_fixed_policy(skills, [[1.0], [0.0]], lo=[0.0], hi=[1.0], m_draws=2)
    >>> res.q.round(6).tolist(), round(res.value, 6), res.converged
    ([0.5, 0.5], 0.75, True)
    """
    v, c, lo_a, hi_a, floor, tol = _check_inputs(skills, costs, lo, hi, floor, tol)
    m = check_positive_int(m_draws, "m_draws")
    max_iter = check_positive_int(max_iter, "max_iter")
    poly = Polytope(c, lo_a, hi_a, floor)
    return _solve(SortedRows.average(v, m), poly, tol, max_iter)


def best_fixed_policy_for(
    problem: Problem,
    skills: ArrayLike,
    *,
    floor: float = 0.0,
    tol: float = 1e-6,
    max_iter: int = 1000,
) -> OracleResult:
    """``best_fixed_policy`` on ``problem``'s costs, M and surrogate box ``S``.

    Parameters
    ----------
    problem : Problem
    skills : array_like, shape (T, N, K)
    floor, tol, max_iter
        As in ``best_fixed_policy``.

    Returns
    -------
    OracleResult
    """
    lo, hi = problem.surrogate_box()
    return best_fixed_policy(
        skills, problem.costs, lo, hi, problem.m_draws, floor=floor, tol=tol, max_iter=max_iter
    )


class _Grouped:
    """``F(Q) = (1/T) sum_t Phi_t(q_{x_t})`` of stacked per-context policies ``Q`` (X K,): the
    grouped ``SortedRows`` for values and gradients, one per context for the Hessian
    (block diagonal: a context's policy meets only its own rounds).

    With ``pick < 1`` (a judge that keeps the best member's answer with probability ``pick``,
    else one of the M draws at random, ``msroute.outcome_env.TeamJudge``) each round's reward
    is ``pick Phi^M_t(q) + (1 - pick) Phi^1_t(q)``: a random draw is distributed as ``q``, so
    its expected score is the one-draw reward, linear in ``q`` (no Hessian)."""

    def __init__(
        self, rows: FloatArray, group: IntArray, n_groups: int, m: int, t: int, pick: float = 1.0
    ) -> None:
        self.k = rows.shape[1]
        self.pick = pick
        self.all = SortedRows(rows, m, group=group, n_groups=n_groups, divisor=t)
        self.parts = [SortedRows(rows[group == g], m, divisor=t) for g in range(n_groups)]
        self.one = None
        if pick < 1.0 and m > 1:
            self.one = SortedRows(rows, 1, group=group, n_groups=n_groups, divisor=t)
            self.one_parts = [SortedRows(rows[group == g], 1, divisor=t) for g in range(n_groups)]

    def value_and_grad(self, q: FloatArray) -> tuple[float, FloatArray]:
        value, grad = self.all.value_and_grad(q)
        if self.one is None:
            return value, grad
        v1, g1 = self.one.value_and_grad(q)
        return self.pick * value + (1.0 - self.pick) * v1, self.pick * grad + (1.0 - self.pick) * g1

    def part_value(self, g: int, q: FloatArray) -> float:
        """Context ``g``'s share of ``F`` at its policy ``q`` (K,)."""
        value = self.parts[g].value_and_grad(q)[0]
        if self.one is None:
            return value
        return self.pick * value + (1.0 - self.pick) * self.one_parts[g].value_and_grad(q)[0]

    def hessian(self, q: FloatArray, idx: np.ndarray) -> FloatArray:
        k, f = self.k, idx.shape[0]
        hess = np.zeros((f, f))
        for g, part in enumerate(self.parts):
            sel = np.flatnonzero(idx // k == g)
            if sel.size:
                hess[np.ix_(sel, sel)] = part.hessian(q[g * k : (g + 1) * k], idx[sel] - g * k)
        return hess if self.one is None else self.pick * hess


def contextual_opt(
    skills: ArrayLike,
    contexts: ArrayLike,
    context_weights: ArrayLike,
    problem: Problem,
    *,
    floor: float,
    round_costs: ArrayLike | None = None,
    tol: float = 1e-6,
    max_iter: int = 1000,
    pick: float = 1.0,
) -> ContextualOracleResult:
    """``OPT^ctx``: the best fixed policy per context under the *aggregate* budget, certified.

    The comparator of Algorithm 2 (Section 5.2, Corollary 2), which keeps one ``q`` per context
    and one shared dual, so that its constraints hold on the aggregate time-averaged cost:

        OPT^ctx = max_{q_1..q_X}  sum_x p_x Phi_x(q_x)
                  s.t.  q_x >= floor on the simplex,  lo <= sum_x p_x C_x^T q_x <= hi

    with ``p_x = T_x / T``, ``Phi_x`` the average over context ``x``'s rounds of the exact
    expected reward (dimensions weighted by ``context_weights[x]``: scaling a dimension by a
    weight >= 0 scales its maximum exactly), ``C_x`` the mean cost table of context ``x``'s
    rounds (``round_costs``; the problem's table when not given) and ``[lo, hi]`` the
    surrogate box ``S`` of the problem. One budget per context would be a smaller class (each
    context's spend held to the bound): the aggregate is what Algorithm 2 can reach.

    The program is one smooth concave maximisation over a product of floored simplices cut by
    the budget; it is solved as ``best_fixed_policy`` (SLSQP, Newton polishing on the face)
    and certified by the Frank-Wolfe gap of the whole product polytope.

    Parameters
    ----------
    skills : array_like, shape (T, N, K)
    contexts : array_like of int, shape (T,)
        The context ``x_t`` in ``[0, X)`` of each round.
    context_weights : array_like, shape (X, N)
        Per-context weights of the reward dimensions, >= 0.
    problem : Problem
        Costs, M and the surrogate box ``S`` shared by all contexts.
    floor : float
        Lower bound on every ``q_x[i]`` (keyword, required: Corollary 2's comparator class
        uses ``problem.default_gamma()``; 0.0 for none).
    round_costs : array_like, shape (T, K, d), optional
        Each round's own cost of every expert (recorded outcomes).
    tol : float, default 1e-6
        Certified gap asked (absolute, in reward units).
    max_iter : int, default 1000
        Cap on SLSQP iterations plus Newton steps.
    pick : float, default 1.0
        How a team's answer is combined: the best member's with probability ``pick``, else one
        of the M draws at random (``msroute.outcome_env.best_pick``); 1 is the sum-max reward.

    Returns
    -------
    ContextualOracleResult

    Raises
    ------
    InfeasibleConstraintsError
        When no per-context policies meet the box.
    """
    v, c, lo_a, hi_a, floor, tol = _check_inputs(
        skills, problem.costs, *problem.surrogate_box(), floor, tol
    )
    t_len, n_dims, k = v.shape
    ctx_rounds, w = check_contexts(contexts, context_weights, t_len, 1, n_dims)
    if ctx_rounds is None or w is None:
        raise InvalidValueError("contextual_opt needs contexts and context_weights")
    x = ctx_rounds[:, 0]
    n_ctx = w.shape[0]
    max_iter = check_positive_int(max_iter, "max_iter")
    counts = np.bincount(x, minlength=n_ctx)
    share = counts / t_len
    if round_costs is None:
        per_ctx = np.broadcast_to(c, (n_ctx, *c.shape))
    else:
        rc = as_float_array(round_costs, "round_costs", ndim_min=3, ndim_max=3)
        if rc.shape != (t_len, *c.shape):
            raise InvalidValueError(
                f"round_costs must have shape (T, K, d) = {(t_len, *c.shape)}, got {rc.shape}"
            )
        if np.any(rc < 0):
            raise InvalidValueError("round_costs must be >= 0")
        sums = np.zeros((n_ctx, *c.shape))
        np.add.at(sums, x, rc)
        per_ctx = sums / np.maximum(counts, 1)[:, None, None]
    stacked = (share[:, None, None] * per_ctx).reshape(n_ctx * k, c.shape[1])
    lo_ori, hi_ori = problem.original_box()
    bound = np.isfinite(hi_ori) | (lo_ori > 0)  # an unbounded cost is recorded, not held
    if not np.any(bound):
        poly = Polytope(np.zeros((n_ctx * k, 1)), np.zeros(1), np.ones(1), floor, blocks=n_ctx)
    else:
        poly = Polytope(stacked[:, bound], lo_a[bound], hi_a[bound], floor, blocks=n_ctx)
    scaled = context_scaled(v, w, x)  # (T, N, K)
    # Repeated rows (a recorded prompt drawn again) count once, scaled by their multiplicity:
    # Phi is positively homogeneous in the skills, so c Phi(q; V) = Phi(q; c V) exactly.
    keyed = np.column_stack([np.repeat(x, n_dims).astype(np.float64), scaled.reshape(-1, k)])
    unique, times = np.unique(keyed, axis=0, return_counts=True)
    rows = unique[:, 1:] * times[:, None]
    pick = as_real(pick, "pick")
    if not 0.0 <= pick <= 1.0:
        raise InvalidValueError(f"pick == {pick}, must be in [0, 1]")
    group = unique[:, 0].astype(np.int64)
    objective = _Grouped(rows, group, n_ctx, problem.m_draws, t_len, pick)
    if problem.m_draws == 1:  # one draw: Phi is linear in q, and the program a linear one
        grad = objective.value_and_grad(poly.center)[1]
        q_lp = poly.repair(poly.linear_max(grad))
        value, grad = objective.value_and_grad(q_lp)
        gap = max(float(grad @ (poly.linear_max(grad) - q_lp)), 0.0)
        res = OracleResult(q_lp, value, gap, 1, gap <= tol, "a linear program (M = 1)")
    else:
        res = _solve(objective, poly, tol, max_iter)  # type: ignore[arg-type]
    q = res.q.reshape(n_ctx, k)
    multipliers = np.zeros(c.shape[1])
    if np.any(bound):
        multipliers[bound] = poly.multipliers(objective.value_and_grad(res.q)[1])
    values = np.array(
        [
            objective.part_value(g, q[g]) * t_len / counts[g] if counts[g] else 0.0
            for g in range(n_ctx)
        ]
    )
    return ContextualOracleResult(
        value=res.value,
        gap=res.gap,
        q=q,
        context_values=values,
        counts=counts,
        cost=stacked.T @ res.q,
        iterations=res.iterations,
        converged=res.converged,
        message=res.message,
        multipliers=multipliers,
    )
