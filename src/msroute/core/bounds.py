"""The constraint box and the bounds: support function, distance, reach and reports.

The support function ``h_S(w) = max_{x in S} w . x`` of a box and a maximizer (the
approachability dual's cut and step, Section 4.3), the distance to a box (the feasibility
metric of Section 6), what the floored simplex can reach coordinate by coordinate (why a set
of bounds fails Assumption 1), and each bound's slack in a run's report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from msroute._validation import FloatArray, as_float_array
from msroute.errors import InvalidValueError

__all__ = [
    "bound_report",
    "box_distance",
    "floored_reach",
    "support_box",
    "support_point_box",
    "unreachable_bounds",
]


def support_box(w: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """``h_S(w)`` for the box ``[lo, hi]``; broadcasts over leading axes of all three."""
    return np.asarray(np.sum(np.where(w >= 0, w * hi, w * lo), axis=-1), dtype=np.float64)


def support_point_box(w: FloatArray, u: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """A maximizer of ``w . x`` over the box; ``clip(u, lo, hi)`` where ``w = 0``."""
    return np.where(w > 0, hi, np.where(w < 0, lo, u.clip(lo, hi)))


def box_distance(x: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """Euclidean distance of ``x`` (..., d) to the box ``[lo, hi]`` (infinite ends allowed)."""
    gap = x - np.clip(x, lo, hi)
    return np.asarray(np.sqrt(np.sum(gap * gap, axis=-1)), dtype=np.float64)


def floored_reach(costs: FloatArray, floor: float) -> tuple[FloatArray, FloatArray]:
    """The least and the greatest ``(C^T q)_j`` of each cost coordinate over the floored
    simplex ``{q >= floor, sum q = 1}``: the floor everywhere, the free mass on one expert."""
    free = 1.0 - costs.shape[0] * floor
    return (
        floor * costs.sum(axis=0) + free * costs.min(axis=0),
        floor * costs.sum(axis=0) + free * costs.max(axis=0),
    )


def unreachable_bounds(
    costs: FloatArray,
    floor: float,
    lo: FloatArray,
    hi: FloatArray,
    closest: FloatArray,
    *,
    name: Callable[[int], str] = str,
    bound: Callable[[int, str], str] | None = None,
    reasons: Mapping[int, str] | None = None,
) -> str:
    """Why no ``q >= floor`` on the simplex has ``lo <= C^T q <= hi``, coordinate by coordinate.

    A bound beyond ``floored_reach`` is named with the best value reachable for it; when
    every bound is reachable alone, the bounds that ``closest`` (``C^T q`` of the point that
    came nearest) misses are named with its values. ``name(j)`` names coordinate ``j``,
    ``bound(j, "upper" | "lower")`` words its bound (default ``needs C^T q <= hi[j]``), and
    ``reasons[j]``, when given, replaces the reach check of coordinate ``j``.
    """

    def needs(j: int, side: str) -> str:
        return f"needs C^T q <= {hi[j]:.6g}" if side == "upper" else f"needs C^T q >= {lo[j]:.6g}"

    word = needs if bound is None else bound
    reach_min, reach_max = floored_reach(costs, floor)
    known = reasons or {}
    parts: list[str] = []
    for j in range(costs.shape[1]):
        if j in known:
            parts.append(known[j])
            continue
        for side, missed, extreme, reach in (
            ("upper", reach_min[j] > hi[j] + 1e-12, "smallest", reach_min[j]),
            ("lower", reach_max[j] < lo[j] - 1e-12, "largest", reach_max[j]),
        ):
            if missed:
                parts.append(
                    f"coordinate {name(j)}: {word(j, side)} but the {extreme} reachable value "
                    f"is {reach:.6g}"
                )
    if parts:
        return "; ".join(parts)
    for j in range(costs.shape[1]):
        side = (
            "upper" if closest[j] > hi[j] + 1e-9 else "lower" if closest[j] < lo[j] - 1e-9 else ""
        )
        if side:
            parts.append(
                f"coordinate {name(j)}: {needs(j, side)}; best jointly reachable {closest[j]:.6g}"
            )
    head = "each bound is reachable alone but not all together; closest point: "
    return head + "; ".join(parts)


def bound_report(
    avg_cost: ArrayLike,
    lo_ori: ArrayLike,
    hi_ori: ArrayLike,
    names: Sequence[str] | None = None,
    *,
    bind_rtol: float = 0.01,
) -> list[list[dict[str, object]]]:
    """Each bound's running average, slack and whether it binds, per run, in the user's units.

    Parameters
    ----------
    avg_cost : array_like, shape (R, d)
        Time-averaged realized cost of each run.
    lo_ori, hi_ori : array_like, shape (R, d) or (d,)
        Original bounds, ``-inf`` / ``+inf`` where absent.
    names : sequence of str, optional
        Cost coordinate names (default ``"0"``, ``"1"``, ...).
    bind_rtol : float, default 0.01
        A bound *binds* when its slack is below this fraction of the bound's magnitude (or
        when it is broken).

    Returns
    -------
    list (one per run) of lists (one per bound) of dicts
        ``cost`` (name), ``kind`` ("upper" or "lower"), ``bound``, ``average``, ``slack``
        (``bound - average`` for an upper bound, ``average - bound`` for a lower one: negative
        when broken) and ``binds``.

    Examples
    --------
    >>> rows = bound_report([[0.0119, 0.7]], [[-np.inf, 0.2]], [[0.012, np.inf]], ["usd", "share"])
    >>> [(b["cost"], b["kind"], round(b["slack"], 6), b["binds"]) for b in rows[0]]
    [('usd', 'upper', 0.0001, True), ('share', 'lower', 0.5, False)]
    """
    cost = as_float_array(avg_cost, "avg_cost", ndim_min=2, ndim_max=2)
    lo = np.broadcast_to(np.asarray(lo_ori, dtype=np.float64), cost.shape)
    hi = np.broadcast_to(np.asarray(hi_ori, dtype=np.float64), cost.shape)
    d = cost.shape[1]
    labels = [str(j) for j in range(d)] if names is None else [str(n) for n in names]
    if len(labels) != d:
        raise InvalidValueError(f"names has {len(labels)} entries for {d} cost coordinates")
    out: list[list[dict[str, object]]] = []
    for r in range(cost.shape[0]):
        rows: list[dict[str, object]] = []
        for j in range(d):
            for kind, bound in (("upper", hi[r, j]), ("lower", lo[r, j])):
                if not np.isfinite(bound):
                    continue
                avg = float(cost[r, j])
                slack = float(bound) - avg if kind == "upper" else avg - float(bound)
                rows.append(
                    {
                        "cost": labels[j],
                        "kind": kind,
                        "bound": float(bound),
                        "average": avg,
                        "slack": slack,
                        "binds": bool(slack <= bind_rtol * abs(float(bound))),
                    }
                )
        out.append(rows)
    return out
