"""Frozen value classes that are quick to build: one instance dictionary set at once.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``
(about 0.1 us a field); a live router builds several such values a query (its events, the
routed decision, the policy's decision), so ``quick_init`` gives a frozen dataclass without
slots an ``__init__`` that sets the instance's ``__dict__`` in one call instead. The class
stays frozen (assigning a field still raises ``FrozenInstanceError``), and its fields, defaults,
``__post_init__``, ``__repr__`` and ``__eq__`` are the dataclass's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from msroute.errors import InvalidTypeError

__all__ = ["quick_init"]

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of frozen dataclass ``cls`` (no slots, no ``init=False``
    fields, no default factories) by one that sets its instance dictionary in one call."""
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if (
        not dataclasses.is_dataclass(cls)
        or not cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        or hasattr(cls, "__slots__")
        or any(not f.init or f.default_factory is not dataclasses.MISSING for f in params)
    ):
        raise InvalidTypeError(f"quick_init takes a frozen dataclass without slots, not {cls!r}")
    defaults = {f"_d_{f.name}": f.default for f in params if f.default is not dataclasses.MISSING}
    args = ", ".join(
        f.name if f.default is dataclasses.MISSING else f"{f.name}=_d_{f.name}" for f in params
    )
    items = ", ".join(f"{f.name!r}: {f.name}" for f in params)
    post = "\n    self.__post_init__()" if hasattr(cls, "__post_init__") else ""
    source = f"def __init__(self, {args}):\n    _set(self, '__dict__', {{{items}}}){post}\n"
    namespace: dict[str, Any] = {"_set": object.__setattr__, **defaults}
    exec(source, namespace)  # the dataclass module builds its __init__ the same way
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
