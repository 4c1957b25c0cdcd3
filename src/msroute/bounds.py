"""The public path of ``msroute.core.bounds``: its public names, re-exported (the module and
its documentation live there)."""

from msroute.core.bounds import (
    bound_report,
    box_distance,
    floored_reach,
    support_box,
    support_point_box,
    unreachable_bounds,
)

__all__ = [
    "bound_report",
    "box_distance",
    "floored_reach",
    "support_box",
    "support_point_box",
    "unreachable_bounds",
]
