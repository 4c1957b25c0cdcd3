"""A live router's decision and feedback with OMD (``msroute.policies._live_rows``), compiled
(numba) for one signature each when this module is imported: ``live_step.start`` imports it
in a daemon thread, so the compile (or the load from numba's cache) never holds up a decision.

Each function and its helpers are copies of the Python ones whose globals are the compiled
helpers: one source, run in Python floats or compiled, with the same operations in the same
order (no fastmath).
"""

from __future__ import annotations

import types as pytypes
from collections.abc import Callable
from typing import Any, cast

from numba.core import types

from msroute._jit import compiled, eager, read_only
from msroute.core.qp.projection_cuts import _compiled_rows
from msroute.policies import _live_rows as source
from msroute.policies._compiled.dual import approach_step
from msroute.policies._compiled.fma import fma
from msroute.policies._compiled.philox import first_uniform

__all__ = source.__all__

_f8 = types.float64
_i8 = types.int64


def _array(ndim: int) -> types.Type:
    return types.Array(_f8, ndim, "C")


_env = dict(vars(source))
_env["_fma"] = fma
for _name in ("_npmax", "_learn_cost", "_dot"):
    _fn = getattr(source, _name)
    _env[_name] = compiled(pytypes.FunctionType(_fn.__code__, _env, _name))
_env["step_rows"] = approach_step
_env["first_uniform"] = first_uniform
_env["cut_rows"] = _compiled_rows()


def _kernel(name: str, signature: Any) -> Any:
    """``msroute.policies._live_rows.<name>`` compiled for ``signature``, with the compiled
    helpers of ``_env`` as its globals."""
    return eager(signature)(pytypes.FunctionType(getattr(source, name).__code__, _env, name))


#: ``msroute.policies._live_rows.settle_one``, compiled for the pacer's arrays (its one source:
#: ``feedback_one`` calls it too).
settle_one = cast(
    Callable[..., None],
    _kernel(
        "settle_one",
        types.none(
            _i8,  # drawn
            read_only(_f8, 1),  # cost
            read_only(_f8, 1),  # booked
            types.boolean,  # was_open
            _array(3),  # est
            _array(2),  # est_n
            read_only(_f8, 3),  # est_floor
            _i8,  # row
            _f8,  # weight
            _f8,  # window
            *(_array(2),) * 5,  # spend, excess_max, excess_sum, shortfall_max, shortfall_sum
            _array(1),  # open_
            _array(1),  # reports
        ),
    ),
)
_env["settle_one"] = settle_one

_SIGNATURE = _i8(
    _i8,  # drawn
    _i8,  # x
    _f8,  # reward
    read_only(_f8, 1),  # cost
    read_only(_f8, 1),  # booked
    _f8,  # q_drawn
    _array(3),  # grad
    _array(2),  # reward_sum
    types.Array(_i8, 2, "C"),  # visits
    _array(2),  # cost_sum
    read_only(_f8, 3),  # coef
    _array(4),  # gram
    _array(3),  # moment
    _f8,  # ix
    _array(3),  # est
    _array(2),  # est_n
    read_only(_f8, 3),  # est_floor
    _i8,  # est_row
    _f8,  # est_weight
    _f8,  # est_window
    types.boolean,  # est_learns
    _i8,  # dual_n
    _array(2),  # mean
    _array(2),  # m2
    _array(3),  # pace_est
    _array(2),  # pace_n
    read_only(_f8, 3),  # pace_floor
    _i8,  # pace_row
    _f8,  # pace_weight
    _f8,  # pace_window
    _array(2),  # spend
    _array(2),  # excess_max
    _array(2),  # excess_sum
    _array(2),  # shortfall_max
    _array(2),  # shortfall_sum
    _array(1),  # open_
    _array(1),  # reports
)

#: ``msroute.policies._live_rows.feedback_one``, compiled for the live router's arrays.
feedback_one = cast(
    Callable[..., int],
    _kernel("feedback_one", _SIGNATURE),
)

_RO2 = read_only(_f8, 2)
_RO1 = read_only(_f8, 1)
_BOOL2 = read_only(types.boolean, 2)

#: ``msroute.policies._live_rows.clear_one``, compiled for the pacer's arrays.
clear_one = cast(
    Callable[..., bool],
    _kernel(
        "clear_one",
        types.boolean(
            _i8,  # n
            read_only(_f8, 3),  # est
            _i8,  # row
            _i8,  # m
            *(_RO2, _RO1, _RO1),  # spend, open_, reports
            *(_RO2,) * 5,  # forced, excess_max, excess_sum, shortfall_max, shortfall_sum
            *(_RO1, _RO1),  # hi, lo
            types.boolean,  # any_upper
            types.boolean,  # any_lower
        ),
    ),
)

#: ``msroute.policies._live_rows.select_one``, compiled for the policy's arrays.
select_one = cast(
    Callable[..., int],
    _kernel(
        "select_one",
        _i8(
            _RO2,  # probs
            read_only(types.uint64, 1),  # key
            _i8,  # n
            *(_RO2,) * 5,  # w, measured, scale, lo, hi
            _f8,  # pad_sd
            _f8,  # pad_den
            _RO2,  # m2
            _i8,  # n_obs
            _RO2,  # cap
            _BOOL2,  # lower
            _BOOL2,  # upper
            _f8,  # tol
            _f8,  # step
            read_only(_f8, 3),  # est
            _i8,  # row
            _array(2),  # spend
            _array(1),  # open_
            _array(2),  # w_out
            _array(2),  # booked
        ),
    ),
)


#: ``msroute.policies._live_rows.qp_one``, compiled for the policy's arrays.
qp_one = cast(
    Callable[..., bool],
    _kernel(
        "qp_one",
        types.boolean(
            _array(3),  # q
            _array(3),  # grad
            _i8,  # x
            _f8,  # den
            _f8,  # gamma
            read_only(_f8, 3),  # est
            _i8,  # row
            types.boolean,  # aggregate
            _f8,  # share
            *(_RO2,) * 4,  # others, w, lo, hi
            _BOOL2,  # lower
            _BOOL2,  # upper
            _f8,  # budget_margin
            _i8,  # units
            _i8,  # n_obs
            _RO2,  # m2
            _RO2,  # cap
        ),
    ),
)

#: ``msroute.policies._live_rows.restrict_one``, compiled for the pacer's arrays.
restrict_one = cast(
    Callable[..., int],
    _kernel(
        "restrict_one",
        _i8(
            _i8,  # n
            read_only(_f8, 3),  # est
            *(_RO2, _RO1, _RO1),  # spend, open_, reports
            *(_RO2,) * 5,  # forced, excess_max, excess_sum, shortfall_max, shortfall_sum
            _RO2,  # hi
            _RO2,  # lo
            _BOOL2,  # upper
            _BOOL2,  # lower
            _BOOL2,  # elig
            types.Array(_i8, 1, "C"),  # restricted
            types.Array(types.boolean, 2, "C"),  # out
        ),
    ),
)

#: ``msroute.policies._live_rows.measure_rows``, compiled for the policy's arrays.
measure_rows = cast(
    Callable[..., None],
    _kernel("measure_rows", types.none(_RO2, read_only(_f8, 3), _array(2))),
)

#: ``msroute.policies._live_rows.aggregate_one``, compiled for the policy's arrays.
aggregate_one = cast(
    Callable[..., float],
    _kernel(
        "aggregate_one",
        _f8(
            _RO2,  # q
            read_only(_f8, 3),  # costs
            read_only(_i8, 1),  # visits
            _i8,  # x
            _array(2),  # others
        ),
    ),
)
