"""The declared state of a policy: collected, checked, loaded and carried over a new expert set.

Each stateful class declares the attributes it adds in ``_state_attrs`` (``BasePolicy``: ``t``
and ``streams``; ``OMDApproachability``: ``_q``, ``_grad``, ..., ``dual``; ``SharedRewardStats``:
``counts``, ``means``, ``_rsqrt``; ...); ``state_dict`` collects them along the MRO and
walks into components that declare their own, giving flat dotted names (``dual.lam``). Allowed
values: numpy arrays, ``numpy.random.Generator`` (its ``bit_generator.state``), ``int``,
``float``, ``str``, ``bool``, ``None`` and declared components. Everything else a policy holds is
rebuilt by its constructor from the saved problems and keyword arguments, which the constructor
validates again.

Each state entry is checked against the freshly built policy (same entries, same kind,
dtype and shape) before it replaces the fresh value. A class may declare, in ``_variable_attrs``,
state arrays whose length grows with what the policy has seen (OMD's sparse reward-model fit
keeps one entry per pair of experts routed together): their first axis may have any length,
and ``check_state`` then calls the component's ``validate_state(prefix)``, which checks
their content as the constructor would check an argument.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, TypeGuard, cast

import numpy as np

from msroute.errors import InvalidStateError, InvalidTypeError, InvalidValueError

__all__ = [
    "StateValue",
    "carry_state",
    "check_state",
    "declared_names",
    "expert_axes",
    "load_state_dict",
    "state_attrs",
    "state_dict",
    "state_rules",
    "variable_entries",
]

#: One entry of a state dict: an array, a plain scalar, None or a generator's state (a dict).
StateValue = np.ndarray | int | float | str | bool | dict[str, Any] | list[dict[str, Any]] | None
_SCALARS = (bool, int, float, str)


# ---------------------------------------------------------------------- the state walk
def declared_names(kind: type, attr: str) -> tuple[str, ...]:
    """The names class ``kind`` and its bases declare in ``attr``, bases first (along the MRO):
    ``_state_attrs``, ``_variable_attrs``, ``_constraint_attrs``."""
    found = _DECLARED.get((kind, attr))
    if found is None:  # a class's declarations are fixed: each is walked once
        names: dict[str, None] = {}
        for cls in reversed(kind.__mro__):
            names.update(dict.fromkeys(cls.__dict__.get(attr, ())))
        found = _DECLARED[(kind, attr)] = tuple(names)
    return found


#: ``declared_names`` per (class, attribute): ``check_state`` runs after every update in
#: debug mode.
_DECLARED: dict[tuple[type, str], tuple[str, ...]] = {}
#: ``_is_component`` per class.
_DECLARES_STATE: dict[type, bool] = {}


def state_attrs(obj: object) -> tuple[str, ...]:
    """The state attributes ``obj`` declares, bases first (``_state_attrs`` along the MRO)."""
    return declared_names(type(obj), "_state_attrs")


def _components(obj: object, prefix: str = "") -> list[tuple[str, object]]:
    """``obj`` and every component of its state, each with the prefix of its entries."""
    out: list[tuple[str, object]] = [(prefix, obj)]
    for name in state_attrs(obj):
        value = getattr(obj, name)
        if isinstance(value, np.ndarray | np.random.Generator) or _is_generators(value):
            continue
        if _is_component(value):
            out.extend(_components(value, f"{prefix}{name}."))
    return out


def variable_entries(obj: object) -> frozenset[str]:
    """The dotted names of the state arrays whose length varies (a sparse statistic grows
    with what it has seen): declared by a class in ``_variable_attrs``, a subset of its
    ``_state_attrs``. Their first axis may have any length; dtype and the other axes are
    fixed, and the component's ``validate_state`` checks their content."""
    return frozenset(
        prefix + name
        for prefix, part in _components(obj)
        for name in declared_names(type(part), "_variable_attrs")
    )


def expert_axes(obj: object) -> dict[str, int]:
    """The dotted names of the state arrays that run along the expert axis, each with that axis
    (counted from the end): declared by each class in ``_expert_axes`` (a mapping of its own
    attribute names to the axis), collected along the MRO and through the components."""
    out: dict[str, int] = {}
    for prefix, part in _components(obj):
        for cls in reversed(type(part).__mro__):
            for name, axis in cls.__dict__.get("_expert_axes", {}).items():
                out[prefix + name] = axis
    return out


def carry_state(
    old: object, new: object, old_index: Sequence[int | None], fresh: Collection[str] = ()
) -> None:
    """Load into ``new`` (fresh, over a changed expert set) what ``old`` learned.

    New expert ``j`` is old expert ``old_index[j]``, or a new one (None). Each array the classes
    declare along the expert axis (``expert_axes``) keeps the kept experts' entries and the
    fresh values of the new ones; every other entry whose shape did not change is carried as
    it is; the rest (an array sized by K that is not per expert, a sparse statistic) starts
    fresh, and so do the attributes of ``new`` named in ``fresh`` (with their components).

    Raises
    ------
    InvalidValueError
        ``old`` and ``new`` are not of one class, or a declared axis does not have the length
        of the expert set (a wrong declaration).
    """
    if type(old) is not type(new):
        raise InvalidValueError(
            f"carry_state: {type(old).__name__} into {type(new).__name__} (one class only)"
        )
    old_state, new_state = state_dict(old), state_dict(new)
    axes = expert_axes(new)
    variable = variable_entries(new)
    new_cols = [j for j, i in enumerate(old_index) if i is not None]
    old_cols = [i for i in old_index if i is not None]
    restart = tuple(fresh)
    for key, value in old_state.items():
        if key.split(".", 1)[0] in restart:
            continue
        fresh_value = new_state[key]
        if key in variable:
            continue
        if key in axes and isinstance(value, np.ndarray) and isinstance(fresh_value, np.ndarray):
            axis = axes[key]
            if fresh_value.shape[axis] != len(old_index):
                raise InvalidValueError(
                    f"carry_state: {key!r} is declared along the expert axis {axis}, but its "
                    f"shape is {fresh_value.shape} with {len(old_index)} experts"
                )
            out = fresh_value.copy()
            np.moveaxis(out, axis, -1)[..., new_cols] = np.moveaxis(value, axis, -1)[..., old_cols]
            new_state[key] = out
        elif not isinstance(value, np.ndarray) or (
            isinstance(fresh_value, np.ndarray) and value.shape == fresh_value.shape
        ):
            new_state[key] = value
    load_state_dict(new, new_state)


def _is_generators(value: object) -> TypeGuard[tuple[np.random.Generator, ...]]:
    """A tuple of generators (one random stream per run)."""
    return isinstance(value, tuple) and all(isinstance(g, np.random.Generator) for g in value)


def _is_component(value: object) -> bool:
    """An instance whose class declares ``_state_attrs`` (possibly empty: a stateless piece)."""
    if isinstance(value, type):
        return False
    kind = type(value)
    found = _DECLARES_STATE.get(kind)
    if found is None:
        found = _DECLARES_STATE[kind] = any("_state_attrs" in vars(c) for c in kind.__mro__)
    return found


def state_dict(
    obj: object, prefix: str = "", *, exclude: Collection[str] = ()
) -> dict[str, StateValue]:
    """The declared state of a policy or component, flat, with dotted names (copies).

    Parameters
    ----------
    obj : object
        A policy or a stateful component (anything whose class declares ``_state_attrs``).
    prefix : str, optional
        Prepended to every name (used for nested components).
    exclude : collection of str, optional
        Attributes of ``obj`` itself to leave out (the live router's undo point leaves out the
        random streams, which learning never touches).

    Returns
    -------
    dict
        ``name -> value``: arrays (copied), plain scalars, ``None``, and for a
        ``numpy.random.Generator`` its ``bit_generator.state`` (a JSON-able dict).
    """
    out: dict[str, StateValue] = {}
    for name in state_attrs(obj):
        if name in exclude:
            continue
        value = getattr(obj, name)
        key = prefix + name
        if isinstance(value, np.ndarray):
            out[key] = value.copy()
        elif isinstance(value, np.random.Generator):
            out[key] = dict(value.bit_generator.state)
        elif _is_generators(value):
            out[key] = [dict(g.bit_generator.state) for g in value]
        elif value is None or type(value) in _SCALARS:
            out[key] = value
        elif _is_component(value):
            out.update(state_dict(value, key + "."))
        else:
            raise InvalidTypeError(
                f"state attribute {key!r} of {type(obj).__name__} holds a "
                f"{type(value).__name__}; declare only arrays, plain scalars, None, a Generator "
                "or components with their own _state_attrs"
            )
    return out


def state_rules(obj: object) -> dict[str, str]:
    """The rules a loaded state's entries must satisfy beyond being finite, by dotted name:
    ``"nonnegative"``, ``"positive"`` or ``"inf_allowed"`` (+inf is a value; NaN never is),
    declared by each class in ``_state_rules`` for its own attributes."""
    return _rules_of_parts(_components(obj))


def _rules_of_parts(parts: list[tuple[str, object]]) -> dict[str, str]:
    """``state_rules`` of the components ``parts`` (``_components``' list)."""
    out: dict[str, str] = {}
    for prefix, part in parts:
        for name, rule in _rules_by(type(part)).items():
            out[prefix + name] = rule
    return out


def _rules_by(kind: type) -> dict[str, str]:
    """The ``_state_rules`` a class and its bases declare (bases first, a subclass wins),
    walked once per class (kept in ``_RULES``)."""
    found = _RULES.get(kind)
    if found is None:
        found = {}
        for cls in reversed(kind.__mro__):
            found.update(cls.__dict__.get("_state_rules", {}))
        _RULES[kind] = found
    return found


#: ``_rules_by`` per class.
_RULES: dict[type, dict[str, str]] = {}


def check_state(policy: object) -> None:
    """Check every value a policy has learned, as strictly as its constructor's arguments.

    The generic rules: every float array is finite, every integer (round counter, step and
    visit counts) ``>= 0``. Then what each class declares for its own entries in
    ``_state_rules`` (counts, multipliers, reward sums and cost estimates ``>= 0``, Beta
    posteriors ``> 0``, entries where +inf is a value), and whatever each component checks in
    its ``validate_state(prefix)`` (the random streams: uniforms in ``[0, 1)``, read positions
    inside their buffer, generator states that can move; OMD: q on the floored simplex; OMD's
    reward-model fit: symmetric co-occurrence counts consistent with the rounds they count).
    This function knows no class's attribute names. Run after every update in debug mode
    (``msroute.policies.set_debug_checks``), in the tests of every policy, and on every file
    ``load_policy`` reads.

    Raises
    ------
    InvalidStateError
        Naming the first entry that breaks a rule and how.
    """
    state = state_dict(policy)
    parts = _components(policy)
    rules = _rules_of_parts(parts)
    for key, value in state.items():
        if isinstance(value, bool) or value is None or isinstance(value, str | dict | list):
            continue
        arr = np.asarray(value)
        rule = rules.get(key)
        finite = arr if rule != "inf_allowed" else np.where(arr == np.inf, 0.0, arr)
        if arr.dtype.kind == "f" and not np.all(np.isfinite(finite)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise InvalidStateError(f"state entry {key!r} has {bad} NaN or infinite value(s)")
        if (arr.dtype.kind in "iu" or rule == "nonnegative") and arr.size and arr.min() < 0:
            raise InvalidStateError(f"state entry {key!r} must be >= 0, min is {arr.min()}")
        if rule == "positive" and arr.size and arr.min() <= 0:
            raise InvalidStateError(f"state entry {key!r} must be > 0, min is {arr.min()}")
    for prefix, part in parts:  # the rules a component states for itself
        validate = getattr(part, "validate_state", None)
        if callable(validate):
            validate(prefix)


def load_state_dict(
    obj: object, state: dict[str, StateValue], *, exclude: Collection[str] = ()
) -> None:
    """Overwrite the declared state of ``obj`` with ``state`` (as made by ``state_dict``).

    ``exclude`` names attributes of ``obj`` that ``state`` leaves out (kept as they are).

    Every entry is checked first against ``obj``'s own: the same names, and per entry the same
    kind (array, generator, scalar type, None), and for arrays the same dtype and shape (any
    length along the first axis for the entries of ``variable_entries``). Arrays are copied
    in (C-ordered, writable), the generator's state is set in place.

    Raises
    ------
    ValueError
        Naming the first entry that is missing, unexpected or does not match.
    """
    expected = state_dict(obj, exclude=exclude)
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise InvalidValueError(
            f"the state does not fit a {type(obj).__name__}: missing entries {missing}, "
            f"unexpected entries {extra}"
        )
    variable = variable_entries(obj)
    for key, current in expected.items():
        _check_entry(key, current, state[key], key in variable)
    _assign(obj, state, "", exclude)


def _check_entry(key: str, current: StateValue, value: StateValue, variable: bool = False) -> None:
    """``value`` can replace ``current``: same kind; an array of the same dtype and shape (of
    any length along its first axis if ``variable``)."""
    if isinstance(current, np.ndarray):
        if not isinstance(value, np.ndarray):
            raise InvalidValueError(
                f"state entry {key!r} must be an array, got {type(value).__name__}"
            )
        if variable and value.ndim == current.ndim and value.shape[1:] == current.shape[1:]:
            shape_ok = True
        else:
            shape_ok = value.shape == current.shape
        if value.dtype != current.dtype or not shape_ok:
            want = f"(n, {', '.join(map(str, current.shape[1:]))})" if variable else current.shape
            raise InvalidValueError(
                f"state entry {key!r} must be {current.dtype} of shape {want}, "
                f"got {value.dtype} of shape {value.shape}"
            )
    elif isinstance(current, dict):  # a generator's state
        if not isinstance(value, dict) or value.get("bit_generator") != current["bit_generator"]:
            raise InvalidValueError(
                f"state entry {key!r} must be the state of a {current['bit_generator']} "
                f"bit generator, got {value!r}"
            )
    elif isinstance(current, list):  # the states of one generator per run
        if not isinstance(value, list) or len(value) != len(current):
            raise InvalidValueError(
                f"state entry {key!r} must list {len(current)} generator states"
            )
        for i, (cur, val) in enumerate(zip(current, value, strict=True)):
            _check_entry(f"{key}[{i}]", cur, val)
    elif type(value) is not type(current):
        raise InvalidValueError(
            f"state entry {key!r} must be {type(current).__name__}, got {type(value).__name__}"
        )


def _assign(
    obj: object, state: dict[str, StateValue], prefix: str, exclude: Collection[str] = ()
) -> None:
    for name in state_attrs(obj):
        if name in exclude:
            continue
        key = prefix + name
        current = getattr(obj, name)
        if isinstance(current, np.ndarray):
            # C order: the policies update some arrays in place through ``reshape(-1)`` views.
            setattr(obj, name, np.array(state[key], dtype=current.dtype, order="C", copy=True))
        elif isinstance(current, np.random.Generator):
            current.bit_generator.state = cast(dict[str, Any], state[key])  # checked
        elif _is_generators(current):
            for gen, gen_state in zip(current, cast(list[Any], state[key]), strict=True):
                gen.bit_generator.state = gen_state
        elif current is None or type(current) in _SCALARS:
            setattr(obj, name, state[key])
        else:  # a component: checked by state_dict
            _assign(current, state, key + ".")
