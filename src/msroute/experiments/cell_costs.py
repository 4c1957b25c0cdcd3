"""How long a cell of each policy runs, relative to a cheap index policy: the sweep's scheduling
hint.

A sweep starts its costliest cells first, so that no long cell starts last while the other
workers idle (``msroute.experiments.schedule.run_cells``). The costs are those of a whole cell
of Figure 2 at its default settings (the simulator, the policy and the summaries; R = 20 seeds
in two environments, T = 10,000, K = 50) in CPU time, per constraint level the cell plays,
relative to Greedy's, as ``python benchmarks/bench_baselines.py --fig2-cells`` measures them;
OMD-contextual, not in Figure 2, is taken as OMD. A hint only:
no number of any run depends on it. It lives with the scheduler that reads it, not on the policy
classes, whose decisions it has nothing to do with.
"""

from __future__ import annotations

from msroute.errors import InvalidValueError
from msroute.policies.registry import get_policy_class

__all__ = ["RELATIVE_COSTS", "relative_cost"]

#: Cost of a cell of msroute's policies per level played, relative to Greedy's (1 when not
#: listed).
RELATIVE_COSTS: dict[str, float] = {
    "omd": 4.7,
    "omd-contextual": 4.7,
    "ts": 2.1,
    "ts-bwk": 1.9,
    "moe": 1.6,
    "random": 1.3,
    "cucb": 1.1,
    "cbwk": 0.8,
}


def relative_cost(name: str) -> float:
    """The relative per-round cost of the policy registered as ``name``.

    msroute's own from ``RELATIVE_COSTS``; a plugin class may declare a ``relative_cost``
    class attribute of its own; 1.0 otherwise, and for a name the registry does not know (e.g.
    OPT's cells).

    Examples
    --------
    >>> relative_cost("omd"), relative_cost("greedy")
    (4.7, 1.0)
    """
    key = name.lower()
    if key in RELATIVE_COSTS:
        return RELATIVE_COSTS[key]
    try:
        cls = get_policy_class(name)
    except InvalidValueError:
        return 1.0
    for klass in cls.__mro__:  # a number the class or one of its bases declares
        value = vars(klass).get("relative_cost")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return 1.0
