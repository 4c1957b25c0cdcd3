"""The duals of a batch, compiled (numba): the Lagrangian dual's subgradient step and
penalty, and the approachability dual's step and realized-cost moments.

Each gives the floats of its numpy form (``msroute.policies.lagrangian.LagrangianDual``,
``msroute.policies.duals.ApproachabilityDual``): the same operations, and sums in the order
numpy (or OpenBLAS, for the penalty's product) adds them.
"""

from __future__ import annotations

from msroute._jit import compiled
from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.policies._approach_rows import observe_rows, step_rows
from msroute.policies._compiled.fma import fma

__all__ = ["approach_step", "dual_step", "observe_cost", "penalties"]


@compiled
def dual_step(
    lam: FloatArray,
    cost_sum: FloatArray,
    cost: FloatArray,
    n_steps: int,
    coord: IntArray,
    row_scale: FloatArray,
    bound: FloatArray,
    neg_sign: FloatArray,
    active: BoolArray,
    step: float,
    out: FloatArray,
) -> None:
    """``msroute.policies.lagrangian.LagrangianDual.step`` of a batch, in one loop.

    ``out`` (R, B) gets the new multipliers from ``lam``; with ``n_steps > 0`` (the running
    average) ``cost_sum`` (R, d) first takes the round's ``cost`` (R, d) in. Each value with
    the numpy step's operations: the average ``cost_sum / n_steps``, the violation
    ``-sign * (x / scale - bound)`` (0 without a bound), times the step, plus ``lambda``, then
    ``np.maximum(0.0, v)`` written out (``v`` unless 0 is larger).
    """
    for r in range(lam.shape[0]):
        if n_steps > 0:
            for j in range(cost.shape[1]):
                cost_sum[r, j] += cost[r, j]
        for b in range(lam.shape[1]):
            j = coord[b]
            x = cost_sum[r, j] / n_steps if n_steps > 0 else cost[r, j]
            v = neg_sign[b] * (x / row_scale[r, b] - bound[r, b]) if active[r, b] else 0.0
            v = v * step + lam[r, b]
            out[r, b] = 0.0 if v < 0.0 else v


@compiled
def penalties(costs: FloatArray, weights: FloatArray, out: FloatArray) -> None:
    """``out[r, i] = costs[r, i] . weights[r]`` for d = 2 cost coordinates, summed as OpenBLAS's
    ``dgemv`` sums numpy's ``matmul(costs, weights[:, :, None])`` (x86-64, FMA): the second
    product rounded, then the first added to it by a fused multiply-add.

    ``msroute.policies.lagrangian.LagrangianDual.penalty`` checks once per process and per
    K that numpy's product gives these floats before it uses this loop. ``costs`` (R, K, 2),
    ``weights`` (R, 2), ``out`` (R, K).
    """
    for r in range(costs.shape[0]):
        w0, w1 = weights[r, 0], weights[r, 1]
        for i in range(costs.shape[1]):
            out[r, i] = fma(costs[r, i, 0], w0, costs[r, i, 1] * w1)


#: ``msroute.policies._approach_rows``' two functions compiled: the approachability dual's step
#: and realized-cost moments of a batch (one run calls them in Python).
approach_step = compiled(step_rows)
observe_cost = compiled(observe_rows)
