"""The public path of ``msroute.core.problem``: its public names, re-exported (the module and
its documentation live there)."""

from msroute.core.problem import Constraints, Problem

__all__ = ["Constraints", "Problem"]
