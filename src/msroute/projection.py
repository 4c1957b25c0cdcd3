"""The public path of ``msroute.core.qp.projection``: its public names, re-exported (the module and
its documentation live there)."""

from msroute.core.qp.projection import project_step

__all__ = ["project_step"]
