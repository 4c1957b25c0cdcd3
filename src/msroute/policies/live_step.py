"""A live router's decision and feedback with OMD as one compiled call each, loaded in the
background.

One run of the router's default OMD at M = 1 (the common live case) decides in a handful of
small steps (the pacer's check that no team can break a bound, the draw, the dual's step, the
booking: ``route_one``) and learns from a feedback in a dozen (``learn_one``: the model
estimator's gradient and its Gram counts, the reward sums, the two cost estimates, OMD's and
its pacer's, the dual's realized-cost moments, the pacer's spend and reserve). In Python
floats and numpy each is a few microseconds of fixed cost; the functions of
``msroute.policies._live_rows`` do them in one loop each, compiled with numba. What the dual
approaches, ``C^T q`` (and the aggregate cut's spend over the contexts), is compiled too where
a check once per process and shape finds the compiled sum gives numpy's product, OpenBLAS's
(``_sums_as_numpy``; numpy's product elsewhere); the QP step every ``batch`` feedbacks calls
its compiled cuts and projection from Python.

The router's first decisions must never wait for numba (about a second to import, more to
compile): ``start`` loads the compiled step in a daemon thread when a router is built, and
until ``kernels`` returns it the policy decides and learns in Python as before. The two give
the same floats bit for bit: the functions take the single-run Python path's IEEE operations in
its order (``Pacer._clear_one`` and ``book``, ``_sample_row``, ``_approach_rows.step_rows`` and
``observe_rows``, ``CostEstimate._update_one``, ``ModelGradient._estimate_one`` and
``_accumulate_one``, ``Pacer.settle``), compiled without fastmath (no reassociation, no fused
multiply-add), so a run decides the same whenever the compile finishes, alone or in a batch,
and a journal replays exactly in Python (tests/test_live_step.py).
"""

from __future__ import annotations

import logging
import math
import threading
from types import ModuleType
from typing import Any

import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.policies import pacing
from msroute.policies.base import Decision
from msroute.policies.duals import aggregate_spend
from msroute.policies.omd_variants import floor_at
from msroute.policies.reward_model import ModelGradient

__all__ = ["kernels", "learn_one", "route_one", "settled", "start"]

_RUN0 = np.zeros(1, dtype=np.int64)  # the runs of a single run's QP step
_NO_SPEND = np.zeros((1, 1))  # the other contexts' spend of a step without contexts (unread)

#: ``_drawn``'s arrays, by expert.
_DRAWN: list[IntArray] = []
#: Random draws ``_sums_as_numpy`` checks a shape on.
_PROBES = 16
#: The most contexts ``aggregate_one`` sums (numpy's pairwise sum of one leaf).
_MAX_COMPILED_CONTEXTS = 128
#: ``_sums_as_numpy``'s answer by (contexts, K, d).
_sums_checked: dict[tuple[int, ...], bool] = {}

_lock = threading.Lock()
_started = False
_loaded: ModuleType | None = None
_settled = threading.Event()  # set once the load has ended, loaded or not


def start() -> None:
    """Load the compiled step in a daemon thread (once per process; nothing if started)."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_load, name="msroute-live-step", daemon=True).start()


def _load() -> None:
    """Import (and compile, or load from numba's cache) the compiled step; a failure leaves
    the Python path in use."""
    global _loaded
    try:
        from msroute.core.qp.projection_cuts import load_compiled_rows
        from msroute.policies._compiled import live_step

        load_compiled_rows()
        pacing.restrict_kernel = live_step.restrict_one
        pacing.settle_kernel = live_step.settle_one
    except Exception:  # no compiler, no cache: the Python path stays (same floats, slower)
        logging.getLogger("msroute.router").debug(
            "compiled feedback step not loaded", exc_info=True
        )
    else:
        _loaded = live_step
    finally:
        _settled.set()


def settled(timeout: float | None = None) -> bool:
    """Wait until the load ``start`` began has ended (loaded, or failed: the Python path
    stays), at most ``timeout`` seconds; whether it has. True at once when no load was
    started. (A server freezes what the load brought into the process, as it froze what
    existed when it started: ``msroute.service.server``.)"""
    with _lock:
        if not _started:
            return True
    return _settled.wait(timeout)


def kernels() -> ModuleType | None:
    """The compiled step's module once it is loaded, else None (learn in Python)."""
    return _loaded


def route_one(policy: Any, context: IntArray | None, eligible: BoolArray | None) -> Decision | None:
    """``OMDApproachability.select_trusted`` of one run at M = 1 in the compiled step, once it
    is loaded: the pacer's check that no team can break a bound, then the draw, the dual's
    step and the booking in one call (what the dual approaches, ``C^T q``, before it: compiled
    where ``_sums_as_numpy`` allows, else numpy's product). None (nothing changed, no uniform
    drawn) where the step does not apply: not loaded yet, a policy outside a router (its
    stream has no per-decision key: ``msroute.router.streams``) or a decision whose stream has
    drawn already (its first uniform is the counter's only while it is ``fresh``), more runs or
    draws, a mask, no pacer, the paper's dual or the exact surrogate without a margin, a pacer
    that must narrow the decision, or arrays the signature does not take; the caller then
    decides in Python.
    """
    step = _loaded
    pacer = policy.pacer
    dual = policy.dual
    streams = policy.streams
    if (
        step is None
        or not getattr(streams, "fresh", False)
        or eligible is not None
        or policy.n_runs != 1
        or policy.m_draws != 1
        or pacer is None
        or dual.construction != "invariant"
        or (dual.surrogate == "exact" and dual.budget_margin == 0.0)
    ):
        return None
    ctx = None if policy.n_contexts == 1 else context
    x = 0 if ctx is None else int(ctx[0])
    est = pacer.est.costs
    row = 0 if pacer.n_contexts == 1 else x
    hi, lo = pacer.bounds_one
    spend, open_ = pacer.spend, pacer.open
    try:
        clear = step.clear_one(
            policy.t + 1,
            est,
            row,
            1,
            spend,
            open_,
            pacer.n_reports,
            pacer.forced,
            pacer.excess_max,
            pacer.excess_sum,
            pacer.shortfall_max,
            pacer.shortfall_sum,
            hi,
            lo,
            pacer._any_upper,
            pacer._any_lower,
        )
    except TypeError:  # numba matched no signature: nothing changed
        return None
    if not clear:
        return None
    played = policy._q[:, x].copy()  # the decision's own distribution
    costs = policy._costs_in(ctx)
    if dual.surrogate == "linear" and _sums_as_numpy(step, policy.n_contexts, costs.shape[1:]):
        measured = np.empty((1, costs.shape[2]))
        step.measure_rows(played, costs, measured)
    else:
        measured = dual.measure(played, costs)
    pad_sd, pad_den = 0.0, 1.0
    if dual.budget_margin > 0.0 and dual._n_obs > 1:
        pad_sd, pad_den = dual.budget_margin, dual._units * math.sqrt(dual._n_obs)
    scale, low, high, cap, lower, upper = dual._step_args
    w_out = np.empty_like(dual.w)
    booked = np.empty_like(spend)
    drawn = step.select_one(
        played,
        streams.key,
        streams.n,
        dual.w,
        measured,
        scale,
        low,
        high,
        pad_sd,
        pad_den,
        dual._cost_m2,
        dual._n_obs,
        cap,
        lower,
        upper,
        dual.tol,
        dual.step_size,
        est,
        row,
        spend,
        open_,
        w_out,
        booked,
    )
    dual.w = w_out
    streams.take_first()
    played.setflags(write=False)
    booked.setflags(write=False)
    if ctx is not None:
        ctx.setflags(write=False)
    decision = Decision.of_read_only(_drawn(drawn), played, ctx, policy.t, booked)
    policy.t += 1
    return decision


def _drawn(i: int) -> IntArray:
    """The draws (1, 1) of a decision that drew expert ``i``: one read-only array per expert,
    shared by the decisions (their arrays are read-only)."""
    while len(_DRAWN) <= i:
        draws = np.array([[len(_DRAWN)]], dtype=np.int64)
        draws.setflags(write=False)
        _DRAWN.append(draws)
    return _DRAWN[i]


def learn_one(policy: Any, decision: Decision, reward: FloatArray, cost: FloatArray) -> bool:
    """``OMDApproachability.update_trusted`` of one run at M = 1 in the compiled step, once it
    is loaded: the feedback learned up to the QP step, the pacer settled, then the QP step in
    Python when it is due. False (nothing changed) where the step does not apply: not loaded
    yet, more runs or draws, another estimator than the dense model, a warm start's prior, no
    pacer or booking, or arrays the step's signature does not take (a loaded state that is not
    C-contiguous); the caller then learns in Python.

    ``policy`` is an ``OMDApproachability`` (typed ``Any``: the policy imports this module).
    """
    step = _loaded
    pacer = policy.pacer
    model = policy.estimator
    if (
        step is None
        or policy.n_runs != 1
        or policy.m_draws != 1
        or type(model) is not ModelGradient
        or policy.prior.on
        or pacer is None
        or decision.cost is None
        or decision.probs is None
    ):
        return False
    dual = policy.dual
    dual_n = 0 if dual.surrogate == "linear" and dual.budget_margin == 0.0 else dual._n_obs + 1
    context = decision.context
    x = 0 if context is None else int(context[0])
    drawn = int(decision.draws[0, 0])
    est, pace = policy.cost_est, pacer.est
    try:
        seen = step.feedback_one(
            drawn,
            x,
            float(reward[0]),
            cost[0],
            decision.cost[0],
            float(decision.probs[0, drawn]),
            policy._grad,
            policy._reward_sum,
            policy._visits,
            policy._cost_sum,
            model.coef,
            model.gram,
            model.moment,
            model.ix,
            est.costs,
            est.n_obs,
            est._floor,
            0 if policy.n_contexts == 1 else x,
            est.prior_weight,
            est.window,
            est.mode != "table",
            dual_n,
            dual._cost_mean,
            dual._cost_m2,
            pace.costs,
            pace.n_obs,
            pace._floor,
            0 if pacer.n_contexts == 1 else x,
            pace.prior_weight,
            pace.window,
            pacer.spend,
            pacer.excess_max,
            pacer.excess_sum,
            pacer.shortfall_max,
            pacer.shortfall_sum,
            pacer.open,
            pacer.n_reports,
        )
    except TypeError:  # numba matched no signature (before running): nothing changed
        return False
    if dual_n:
        dual._n_obs = dual_n
    policy._n_feedback += 1
    if seen % policy.batch_size == 0:
        _qp_step_one(policy, x, policy._ctx0 if context is None else context)
    return True


def _qp_step_one(policy: Any, x: int, ctx: IntArray) -> None:
    """``OMDApproachability._qp_step`` of one run in context ``x`` (``ctx`` (1,)) and no warm
    start's prior, on views of its state instead of gathers: the same floats (the same
    operations on the same values), less of numpy's fixed cost a call."""
    steps = policy._steps
    steps[0, x] += 1
    n = int(steps[0, x])
    eta = policy.eta
    if policy.eta_schedule != "fixed":  # Corollary 2: a sqrt(n_x) at the n-th step
        eta = eta * math.sqrt(n + 1.0)
    costs, aggregate = policy.cost_est.costs, None
    if policy.n_contexts > 1:
        costs, aggregate = policy._context_costs(_RUN0, ctx), _aggregate(policy, x, ctx)
    gamma = policy.gamma
    if policy.floor != "fixed":
        gamma = max(policy.floor_min, floor_at(policy.gamma, policy.floor, float(n)))
    if not _qp_compiled(policy, x, eta, gamma, costs, aggregate):
        q0 = policy._q[:, x].copy()
        grad = policy._grad[:, x]
        y = q0 + grad / (policy.batch_size * eta)
        policy._q[:, x] = policy.dual.project(y, gamma, costs, _RUN0, q0, aggregate)
        grad[...] = 0.0
    policy.estimator.refit(_RUN0, ctx)


def _aggregate(policy: Any, x: int, ctx: IntArray) -> tuple[FloatArray, FloatArray]:
    """``OMDApproachability._aggregate_spend`` of one run in context ``x``: in one compiled call
    where it gives numpy's floats (the linear surrogate, no warm start's prior, at most 128
    contexts, sums that ``_sums_as_numpy`` checked), else the policy's own."""
    step = _loaded
    costs = policy.cost_est.costs
    if (
        step is None
        or policy.dual.surrogate != "linear"
        or policy.prior.on
        or policy.n_contexts > _MAX_COMPILED_CONTEXTS
        or not _sums_as_numpy(step, policy.n_contexts, costs.shape[1:])
    ):
        return policy._aggregate_spend(_RUN0, ctx)  # type: ignore[no-any-return]
    others = np.empty((1, costs.shape[2]))
    share = step.aggregate_one(policy._q[0], costs, policy._visits[0], x, others)
    return np.array([share]), others


def _sums_as_numpy(step: ModuleType, n_contexts: int, shape: tuple[int, ...]) -> bool:
    """Whether the compiled ``C^T q`` (``measure_rows``, ``aggregate_one``) gives numpy's floats
    for ``n_contexts`` contexts of K experts and d costs (``shape``: (K, d)) on this machine.

    numpy's product is OpenBLAS's: its order of the sum (and whether it fuses the multiply and
    the add) depends on K, d and the CPU; the compiled sums take one fused multiply-add after
    another, which is OpenBLAS's dot product of a few entries on a CPU with FMA. So each
    shape is checked once per process, on random routings and costs over five orders of
    magnitude, against numpy's product and the policy's aggregate (``_PROBES`` draws; where
    one float differs, the shape stays with numpy)."""
    key = (n_contexts, *shape)
    known = _sums_checked.get(key)
    if known is None:
        known = _probe_sums(step, n_contexts, *shape)
        _sums_checked[key] = known
    return known


def _probe_sums(step: ModuleType, n_contexts: int, k: int, d: int) -> bool:
    """``_sums_as_numpy`` of one shape, checked on ``_PROBES`` random draws."""
    from msroute.core.problem_batch import surrogate_cost

    rng = np.random.default_rng([n_contexts, k, d])
    for _ in range(_PROBES):
        q = rng.dirichlet(np.ones(k), size=n_contexts)
        costs = rng.random((n_contexts, k, d)) * 10.0 ** rng.uniform(-3, 2, (n_contexts, k, d))
        measured = np.empty((n_contexts, d))
        step.measure_rows(q, costs, measured)
        if not np.array_equal(measured, surrogate_cost(q, costs)):
            return False
        if n_contexts > 1 and n_contexts <= _MAX_COMPILED_CONTEXTS:
            visits = rng.integers(0, 10_000, n_contexts)
            x = int(rng.integers(n_contexts))
            others = np.empty((1, d))
            share = step.aggregate_one(q, costs, visits, x, others)
            want = aggregate_spend(q, costs, visits.astype(np.float64), x, surrogate_cost)
            if share != want[0][0] or not np.array_equal(others, want[1]):
                return False
    return True


def _qp_compiled(
    policy: Any,
    x: int,
    eta: float,
    gamma: float,
    costs: FloatArray,
    aggregate: tuple[FloatArray, FloatArray] | None,
) -> bool:
    """The projection of ``_qp_step_one`` in the compiled step where it applies (the invariant
    dual's cuts of the linear surrogate, a projection that steps 1 and 2 settle), else False
    with nothing changed."""
    step = _loaded
    dual = policy.dual
    if step is None or dual.construction != "invariant" or dual.surrogate != "linear":
        return False
    share, others = (
        (1.0, _NO_SPEND) if aggregate is None else (float(aggregate[0][0]), aggregate[1])
    )
    try:
        return bool(
            step.qp_one(
                policy._q,
                policy._grad,
                x,
                policy.batch_size * eta,
                gamma,
                costs,
                0,
                aggregate is not None,
                share,
                others,
                dual.w,
                dual.lo,
                dual.hi,
                dual._lower,
                dual._upper,
                dual.budget_margin,
                dual._units,
                dual._n_obs,
                dual._cost_m2,
                dual.pad_cap,
            )
        )
    except TypeError:  # numba matched no signature: nothing changed
        return False
