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
import warnings
from collections.abc import Iterator, MutableMapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from msroute.errors import InvalidTypeError, InvalidValueError

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

#: The entry-point group third-party policies register under.
ENTRY_POINT_GROUP = "msroute.policies"

#: msroute's own policies and the ``module:Class`` that implements each.
_BUILTIN: dict[str, str] = {
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
    "omd-contextual": "msroute.policies.omd_contextual:ContextualOMD",
}


class _PolicyTable(MutableMapping[str, str]):
    """Name -> ``module:Class``: msroute's policies, then the installed plugins' (read once)."""

    def __init__(self, builtin: dict[str, str]) -> None:
        self._builtin = dict(builtin)
        self._data = dict(builtin)
        self._plugins_read = False

    def _read_plugins(self) -> None:
        if self._plugins_read:
            return
        self._plugins_read = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            name = ep.name.lower()
            if name in self._builtin:
                warnings.warn(
                    f"entry point {ep.value!r} of group {ENTRY_POINT_GROUP!r} reuses msroute's "
                    f"policy name {name!r}; it is ignored",
                    UserWarning,
                    stacklevel=3,
                )
                continue
            self._data.setdefault(name, ep.value)

    def reload(self) -> None:
        """Forget the plugins read so far; the next access reads the installed ones again."""
        self._data = {
            **self._builtin,
            **{k: v for k, v in self._data.items() if k in self._builtin},
        }
        self._plugins_read = False

    def __getitem__(self, key: str) -> str:
        self._read_plugins()
        return self._data[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._read_plugins()
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        self._read_plugins()
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        self._read_plugins()
        return iter(self._data)

    def __len__(self) -> int:
        self._read_plugins()
        return len(self._data)


#: Registered policy names and the ``module:Class`` that implements each: msroute's own, then
#: those of installed plugins (entry-point group ``msroute.policies``).
_TABLE = _PolicyTable(_BUILTIN)
POLICIES: MutableMapping[str, str] = _TABLE


def reload_plugins() -> None:
    """Read the installed plugins again (after installing one into a running interpreter)."""
    _TABLE.reload()


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
        accepted.append("pacing")
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise InvalidTypeError(
                f"policy {name!r} has no parameter {', '.join(unknown)}; "
                f"its parameters: {', '.join(accepted)}"
            )
    return cls.build(problem, **kwargs)
