"""The live router: route queries one at a time with decision ids, delayed feedback, a
crash-safe SQLite journal and off-policy evaluation (docs/architecture.md, "The router and the
journal").

Layering: ``problem/reward/projection`` <- ``policies`` <- ``router`` <- ``service`` <- ``cli``.
"""

from __future__ import annotations

from msroute.router.config import RouterConfig
from msroute.router.core import Router
from msroute.router.ope import Estimate, OPEResult, evaluate
from msroute.router.state import DEFAULT_OMD_PARAMS, TEAM_OMD_PARAMS, RoutedDecision

__all__ = [
    "DEFAULT_OMD_PARAMS",
    "TEAM_OMD_PARAMS",
    "Estimate",
    "OPEResult",
    "RoutedDecision",
    "Router",
    "RouterConfig",
    "evaluate",
]
