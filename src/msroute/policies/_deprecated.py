"""Deprecated class attributes of ``BasePolicy``, kept for one release.

``label``, ``color`` and ``relative_cost`` served the figures and the sweep's scheduler from the
policy classes; they now live with what uses them (``msroute.plotting.policy_label`` and
``policy_color``, ``msroute.experiments.cell_costs.relative_cost``). Reading one from a class or
an instance still gives its value, with a ``DeprecationWarning``. A class that declares the
attribute itself (a plugin's ``label``, say) shadows the alias and is read by the figures.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["DeprecatedPolicyAttribute"]

_MOVED = {
    "label": "msroute.plotting.policy_label(name)",
    "color": "msroute.plotting.policy_color(name)",
    "relative_cost": "msroute.experiments.cell_costs.relative_cost(name)",
}


class DeprecatedPolicyAttribute:
    """A class attribute read through the function that now owns it, with a warning."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        cls = type(obj) if owner is None else owner
        warnings.warn(
            f"{cls.__name__}.{self.attribute} is deprecated and will be removed in the next "
            f"release; use {_MOVED[self.attribute]}",
            DeprecationWarning,
            stacklevel=2,
        )
        name = str(getattr(cls, "name", ""))
        if self.attribute == "relative_cost":
            from msroute.experiments.cell_costs import relative_cost

            return relative_cost(name)
        from msroute.plotting.style import POLICY_STYLES

        style = POLICY_STYLES.get(name.lower())
        if self.attribute == "label":
            return style.label if style is not None else ""
        return style.color if style is not None else None
