"""The registered policy names: msroute's own and those of installed plugins.

Each name maps to the ``module:Class`` that implements it; the classes are imported only when
``msroute.policies.registry.get_policy_class`` asks for one, so this table sits below every
policy (saving a policy checks its class against it). Plugins register under the entry-point
group ``msroute.policies`` (``msroute.policies.registry`` shows how).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, MutableMapping
from importlib.metadata import entry_points

__all__ = ["ENTRY_POINT_GROUP", "POLICIES", "available_policies", "reload_plugins"]

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
