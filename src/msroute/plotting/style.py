"""How the figures name, color and order policies, constraint levels and environments.

The labels and colors of msroute's policies live here, with the figures that use them, and not
on the policy classes: a policy's decisions do not depend on how it is drawn. A plugin policy
may still declare ``label`` and ``color`` class attributes; the figures read them (the
conformance kit and the registry never do). Every policy keeps one color across figures;
OMD-Approachability (``"omd"``) is always blue and drawn above the other lines.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from msroute.policies.registry import POLICIES, get_policy_class

__all__ = [
    "BAND_ALPHA",
    "ENV_ORDER",
    "LEVEL_COLORS",
    "LEVEL_ORDER",
    "POLICY_ORDER",
    "POLICY_STYLES",
    "TOP_ZORDER",
    "PolicyStyle",
    "env_label",
    "level_label",
    "ordered",
    "policy_color",
    "policy_handles",
    "policy_label",
    "policy_legend",
]


class PolicyStyle(NamedTuple):
    """How the figures draw one policy."""

    label: str
    color: str


#: The label and color of each of msroute's registered policies (Fixed has none: its label is
#: its name, its color from the spare palette).
POLICY_STYLES: dict[str, PolicyStyle] = {
    "omd": PolicyStyle("OMD-Approachability", "#1f77b4"),
    "omd-contextual": PolicyStyle("Contextual OMD", "#17becf"),
    "ts-bwk": PolicyStyle("TS-BwK", "#8c564b"),
    "cbwk": PolicyStyle("CBwK", "#d62728"),
    "moe": PolicyStyle("MoE", "#e377c2"),
    "ts": PolicyStyle("TS", "#9467bd"),
    "cucb": PolicyStyle("CUCB", "#2ca02c"),
    "greedy": PolicyStyle("Greedy", "#ff7f0e"),
    "random": PolicyStyle("Random", "#7f7f7f"),
    "uniform": PolicyStyle("Uniform", "#000000"),
}

#: Display order of the constraint levels (unknown levels follow, sorted by name).
LEVEL_ORDER: tuple[str, ...] = ("tight", "medium", "loose", "none")
ENV_ORDER: tuple[str, ...] = ("stochastic", "regime")
POLICY_ORDER: tuple[str, ...] = tuple(POLICY_STYLES)

#: Colors of policies without a style of their own, chosen by a stable hash of the name.
_EXTRA_COLORS: tuple[str, ...] = ("#bcbd22", "#393b79", "#637939", "#843c39", "#7b4173")
_LEVEL_LABELS = {"tight": "Tight", "medium": "Medium", "loose": "Loose", "none": "Unconstrained"}
LEVEL_COLORS = {"tight": "#d62728", "medium": "#ff7f0e", "loose": "#2ca02c", "none": "#7f7f7f"}
_ENV_LABELS = {"stochastic": "Stochastic", "regime": "Regime-switching"}

TOP_ZORDER = 10.0  # OMD-Approachability is drawn above every other line
BAND_ALPHA = 0.15


def _declared(name: str, attribute: str) -> str | None:
    """A plugin class's own ``label`` or ``color`` (a non-empty string in the namespace of the
    class or one of its bases), or None."""
    if name.lower() not in POLICIES:  # e.g. a sweep label such as ``cbwk[round]``
        return None
    for cls in get_policy_class(name).__mro__:
        value = vars(cls).get(attribute)
        if isinstance(value, str) and value:
            return value
    return None


def policy_color(name: str) -> str:
    """The color of a policy in every figure.

    Parameters
    ----------
    name : str
        Registered policy name, e.g. ``"omd"``.

    Returns
    -------
    str
        A hex color: msroute's own for its policies (``"omd"`` is blue), a plugin class's
        ``color`` where it declares one; any other name gets a color from a spare palette
        chosen by a stable hash of the name.

    Examples
    --------
    >>> policy_color("omd")
    '#1f77b4'
    """
    style = POLICY_STYLES.get(name.lower())
    if style is not None:
        return style.color
    declared = _declared(name, "color")
    if declared is not None:
        return declared
    return _EXTRA_COLORS[zlib.crc32(name.encode()) % len(_EXTRA_COLORS)]


def policy_label(name: str) -> str:
    """The readable name of a policy: msroute's own label, a plugin class's ``label``, or the
    name itself.

    Examples
    --------
    >>> policy_label("ts-bwk")
    'TS-BwK'
    """
    style = POLICY_STYLES.get(name.lower())
    if style is not None:
        return style.label
    return _declared(name, "label") or name


def ordered(names: Iterable[str], order: Sequence[str]) -> list[str]:
    """Distinct ``names``, the known ones in ``order``, the others after them sorted."""
    present = set(names)
    known = [n for n in order if n in present]
    return known + sorted(present.difference(order))


def level_label(level: str) -> str:
    return _LEVEL_LABELS.get(level, level)


def env_label(env: str) -> str:
    return _ENV_LABELS.get(env, env)


def policy_handles(policies: Sequence[str], kind: str) -> list[Line2D]:
    """Legend entries for ``policies`` (``kind`` is ``"line"`` or ``"patch"``)."""
    handles = []
    for p in policies:
        if kind == "line":
            handles.append(Line2D([], [], color=policy_color(p), lw=2, label=policy_label(p)))
        else:
            handles.append(
                Line2D(
                    [],
                    [],
                    color=policy_color(p),
                    marker="s",
                    ls="",
                    markersize=9,
                    label=policy_label(p),
                )
            )
    return handles


def policy_legend(fig: Figure, policies: Sequence[str], kind: Literal["line", "patch"]) -> None:
    """One legend of the policies under the whole figure."""
    fig.legend(
        handles=policy_handles(policies, kind),
        loc="outside lower center",
        ncols=min(len(policies), 9),
        frameon=False,
    )
