"""Names -> policy classes, for the CLI, experiment configs and the Router (imported lazily).

Third-party packages add policies through the entry-point group ``msroute.policies``: in their
``pyproject.toml``:

    [project.entry-points."msroute.policies"]
    my-policy = "my_package.module:MyPolicy"

Installed plugins join ``POLICIES`` the first time the table is read (msroute's own names
win a clash, with a warning), so ``msroute run --policy my-policy``, a ``policies`` list in a
``reproduce`` configuration and ``Router`` configurations find them. Check a plugin with
``msroute.checks.check_policy``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

from msroute.errors import InvalidTypeError, InvalidValueError
from msroute.policies.names import ENTRY_POINT_GROUP, POLICIES, available_policies, reload_plugins

if TYPE_CHECKING:  # the registry sits below the policies it names: no import at run time
    from msroute.policies.base import BasePolicy

__all__ = [
    "ENTRY_POINT_GROUP",
    "POLICIES",
    "available_policies",
    "get_policy_class",
    "make_policy",
    "reload_plugins",
]


def get_policy_class(name: str) -> type[BasePolicy]:
    """The class registered under ``name`` (case-insensitive)."""
    key = name.lower()
    if key not in POLICIES:
        raise InvalidValueError(f"unknown policy {name!r}; available: {', '.join(POLICIES)}")
    module_name, _, cls_name = POLICIES[key].partition(":")
    cls: type[BasePolicy] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def make_policy(name: str, problem: Any, **kwargs: Any) -> BasePolicy:
    """Build the policy registered under ``name``; ``kwargs`` go to its constructor, except
    ``pacing=True``, which paces it (``BasePolicy.pace``: every registered policy takes it).

    Raises
    ------
    InvalidValueError
        ``name`` is not registered.
    InvalidTypeError
        A keyword argument is not a parameter of that policy (the message lists its parameters).
    """
    cls = get_policy_class(name)
    params = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        accepted = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        accepted += ["pacing", "pacing_window", "pacing_mixtures"]
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise InvalidTypeError(
                f"policy {name!r} has no parameter {', '.join(unknown)}; "
                f"its parameters: {', '.join(accepted)}"
            )
    return cls.build(problem, **kwargs)
