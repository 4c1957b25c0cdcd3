"""Names -> policy classes, for the CLI and experiment configs (imported lazily)."""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

from msroute.errors import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:  # the registry sits below the policies it names: no import at run time
    from msroute.policies.base import BasePolicy

__all__ = ["POLICIES", "available_policies", "get_policy_class", "make_policy"]

#: Registered policy names and the ``module:Class`` that implements each.
POLICIES: dict[str, str] = {
    "random": "msroute.policies.bandit:RandomPolicy",
    "uniform": "msroute.policies.fixed:UniformPolicy",
    "fixed": "msroute.policies.fixed:FixedPolicy",
    "greedy": "msroute.policies.bandit:GreedyPolicy",
    "cucb": "msroute.policies.bandit:CUCB",
    "cbwk": "msroute.policies.bandit:CBwK",
    "ts": "msroute.policies.bandit:ThompsonSampling",
    "ts-bwk": "msroute.policies.bandit:ThompsonSamplingBwK",
    "moe": "msroute.policies.moe:MoEGating",
    "omd": "msroute.policies.omd:OMDApproachability",
    "omd-contextual": "msroute.policies.omd:ContextualOMD",
}


def available_policies() -> list[str]:
    """The registered policy names, in registry order."""
    return list(POLICIES)


def get_policy_class(name: str) -> type[BasePolicy]:
    """The class registered under ``name`` (case-insensitive)."""
    key = name.lower()
    if key not in POLICIES:
        raise InvalidValueError(f"unknown policy {name!r}; available: {', '.join(POLICIES)}")
    module_name, _, cls_name = POLICIES[key].partition(":")
    cls: type[BasePolicy] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def make_policy(name: str, problem: Any, **kwargs: Any) -> BasePolicy:
    """Build the policy registered under ``name``; ``kwargs`` go to its constructor.

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
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise InvalidTypeError(
                f"policy {name!r} has no parameter {', '.join(unknown)}; "
                f"its parameters: {', '.join(accepted)}"
            )
    return cls(problem, **kwargs)
