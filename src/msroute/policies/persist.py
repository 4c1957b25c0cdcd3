"""Saving and resuming routing policies: one zip file of a JSON manifest and ``.npy`` arrays.

A router serving real traffic must survive restarts: ``save_policy`` writes everything a
policy has learned, and ``load_policy`` rebuilds it so that, fed the same feedback, it makes
exactly the decisions the original would have made, bit for bit (random stream included).

Format (``format_version`` 3, ``FORMAT_VERSION``)
-------------------------------------------------
One zip archive, readable by ``numpy.load(path, allow_pickle=False)`` (an ``NpzFile``) and by any
zip tool (``unzip -p router.npz manifest.json``):

* ``manifest.json`` — UTF-8 JSON: ``format`` (``"msroute-policy"``), ``format_version``,
  ``msroute_version``, ``policy`` (the registered name), ``kwargs`` (the constructor's keyword
  arguments; a ``SeedSequence`` seed as ``{"SeedSequence": {...}}``), ``problems`` (``m_draws``,
  ``cbar`` and ``constraints`` of each distinct problem, the latter by
  ``Constraints.to_dict``), ``problem_of_run`` (which problem each run uses), ``state`` (the
  non-array state: the round counter ``t``, the generator state of each run's streams under
  ``streams.uniforms.generators`` and the like, counters such as ``dual.n_steps``) and
  ``arrays`` (the names of the array state).
* ``problem.<i>.costs.npy`` — the cost matrix (K, d) of distinct problem ``i``.
* ``state.<name>.npy`` — one array of state each, e.g. ``state._q.npy``, ``state.dual.w.npy``.

Why one file rather than a directory: it is written to a temporary file and renamed over the
target, so a crash while saving never leaves a half-written checkpoint in place, and it is one
object to copy or upload. Why a hand-written zip rather than ``numpy.savez``: the manifest stays
a plain JSON member that people and other tools can read; the arrays are written by numpy's own
``.npy`` writer with ``allow_pickle=False``, exactly as ``savez`` would.

What the state is
-----------------
Each stateful class declares the attributes it adds in ``_state_attrs`` (``BasePolicy``: ``t``
and ``streams``; ``OMDApproachability``: ``_q``, ``_grad``, ..., ``dual``; ``SharedRewardStats``:
``counts``, ``means``, ``_rsqrt``; ...); ``state_dict`` collects them along the MRO and
walks into components that declare their own, giving flat dotted names (``dual.lam``). Allowed
values: numpy arrays, ``numpy.random.Generator`` (its ``bit_generator.state``), ``int``,
``float``, ``str``, ``bool``, ``None`` and declared components. Everything else a policy holds is
rebuilt by its constructor from the saved problems and keyword arguments, which the constructor
validates again.

Loading never executes code: the archive is read with ``allow_pickle=False`` and the manifest
is JSON. Each state entry is checked against the freshly built policy (same entries, same kind,
dtype and shape) before it replaces the fresh value. A class may declare, in ``_variable_attrs``,
state arrays whose length grows with what the policy has seen (OMD's sparse reward-model fit
keeps one entry per pair of experts routed together): their first axis may have any length,
and ``check_state`` then calls the component's ``validate_state(prefix)``, which checks
their content as the constructor would check an argument.

Examples
--------
>>> import tempfile, pathlib
>>> from msroute import Constraints, Problem, make_policy
>>> p = Problem([[1.0], [0.0], [0.5]], m_draws=2, constraints=Constraints(upper=[1.0]))
>>> pol = make_policy("omd", p, horizon=100, n_runs=2, seed=0)
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = pathlib.Path(tmp) / "router.npz"
...     pol.save(path)
...     twin = load_policy(path)
>>> bool((twin.select().draws == pol.select().draws).all())
True
"""

from __future__ import annotations

import io
import json
import os
import warnings
import zipfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeGuard, cast

import numpy as np

from msroute import _version
from msroute._atomic import DAMAGED_FILE_ERRORS, atomic_path
from msroute.errors import InvalidStateError, InvalidTypeError, InvalidValueError, PolicyFileError
from msroute.policies.registry import POLICIES, get_policy_class
from msroute.problem import Constraints, Problem

if TYPE_CHECKING:  # base.py calls save_policy; persist needs the class for annotations only
    from msroute.policies.base import BasePolicy

__all__ = [
    "FORMAT_VERSION",
    "PolicyFileError",
    "StateValue",
    "carry_state",
    "check_state",
    "expert_axes",
    "load_policy",
    "load_state_dict",
    "policy_bytes",
    "policy_from_bytes",
    "save_policy",
    "state_attrs",
    "state_dict",
    "state_rules",
    "variable_entries",
]

#: Version of the file layout written by ``save_policy``; files of a newer one are refused.
#: Version 2: decisions are values, so OMD no longer saves a last decision (``_ctx``,
#: ``_q_play``); version-1 files load with those two entries dropped. Version 3: Thompson
#: sampling draws from one xoshiro256++ generator per run (``streams.gamma_state``) instead of
#: three buffered numpy streams (``streams.normals``, ``streams.spare_uniforms``,
#: ``streams.spare_normals``); older files load with those dropped and the generator seeded
#: afresh (a Thompson policy warns that its draws restart). Version 4: a policy's
#: constructor arguments may be completed for older files by the class
#: (``BasePolicy._legacy_kwargs``: a default that changed since keeps its old value).
FORMAT_VERSION = 4
_OLD_STREAMS = tuple(
    f"streams.{stream}.{part}"
    for stream in ("normals", "spare_uniforms", "spare_normals")
    for part in ("generators", "buffer", "pos")
)
#: State entries that are no longer state after each format version (dropped from its files
#: and older ones).
_LEGACY_ENTRIES: dict[int, tuple[str, ...]] = {1: ("_ctx", "_q_play"), 2: _OLD_STREAMS}
#: State entries new in each format version: files of older versions keep the fresh policy's.
_NEW_ENTRIES: dict[int, tuple[str, ...]] = {3: ("streams.gamma_state",)}
_FORMAT = "msroute-policy"
_MANIFEST = "manifest.json"

#: One entry of a state dict: an array, a plain scalar, None or a generator's state (a dict).
StateValue = np.ndarray | int | float | str | bool | dict[str, Any] | list[dict[str, Any]] | None
_SCALARS = (bool, int, float, str)


# ---------------------------------------------------------------------- the state walk
def _declared(obj: object, attr: str) -> tuple[str, ...]:
    """The names ``obj``'s classes declare in ``attr``, bases first (along the MRO)."""
    kind = type(obj)
    found = _DECLARED.get((kind, attr))
    if found is None:  # a class's declarations are fixed: each is walked once
        names: dict[str, None] = {}
        for cls in reversed(kind.__mro__):
            names.update(dict.fromkeys(cls.__dict__.get(attr, ())))
        found = _DECLARED[(kind, attr)] = tuple(names)
    return found


#: ``_declared`` per (class, attribute) (``check_state`` runs after every update in debug mode).
_DECLARED: dict[tuple[type, str], tuple[str, ...]] = {}
#: ``_is_component`` per class.
_DECLARES_STATE: dict[type, bool] = {}


def state_attrs(obj: object) -> tuple[str, ...]:
    """The state attributes ``obj`` declares, bases first (``_state_attrs`` along the MRO)."""
    return _declared(obj, "_state_attrs")


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
        for name in _declared(part, "_variable_attrs")
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


def check_state(policy: BasePolicy) -> None:
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


# ---------------------------------------------------------------------- save
def save_policy(policy: BasePolicy, path: str | os.PathLike[str]) -> None:
    """Save a registered policy, its problems and its learned state to one file.

    The file is a zip of ``manifest.json`` and ``.npy`` arrays (see the module docstring); it is
    written next to ``path`` and renamed over it, so an existing checkpoint is replaced only by
    a complete one. Saving does not touch the policy (its random stream included).

    Parameters
    ----------
    policy : BasePolicy
        An instance of a class in ``msroute.policies.POLICIES`` (not a subclass of one).
    path : str or path-like
        Target file; no suffix is added (``.npz`` is a good one: ``numpy.load`` reads it).

    Raises
    ------
    TypeError
        The policy's class is not registered, or a constructor argument or state attribute is
        not of a type the format stores.
    """
    manifest, arrays = _archive(policy)
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as fh:
        _write_zip(fh, manifest, arrays)


def policy_bytes(policy: BasePolicy) -> bytes:
    """The file ``save_policy`` would write, as bytes (for a snapshot kept in a database).

    Raises as ``save_policy``; ``policy_from_bytes`` reads the bytes back.
    """
    buffer = io.BytesIO()
    _write_zip(buffer, *_archive(policy))
    return buffer.getvalue()


def _archive(policy: BasePolicy) -> tuple[str, dict[str, np.ndarray]]:
    """The manifest (JSON text) and the arrays of a policy's file."""
    cls = type(policy)
    if POLICIES.get(cls.name) != f"{cls.__module__}:{cls.__qualname__}":
        raise InvalidTypeError(
            f"only registered policies can be saved: {cls.__qualname__} (name {cls.name!r}) is "
            f"not the class registered under that name; add it to msroute.policies.POLICIES"
        )
    problems: list[Problem] = []
    index: dict[int, int] = {}
    problem_of_run = [index.setdefault(id(p), len(index)) for p in policy.problem_batch.problems]
    for p in policy.problem_batch.problems:
        if index[id(p)] == len(problems):
            problems.append(p)
    arrays: dict[str, np.ndarray] = {
        f"problem.{i}.costs": np.asarray(p.costs) for i, p in enumerate(problems)
    }
    scalars: dict[str, StateValue] = {}
    for key, value in state_dict(policy).items():
        if isinstance(value, np.ndarray):
            arrays[f"state.{key}"] = value
        else:
            scalars[key] = value
    manifest = {
        "format": _FORMAT,
        "format_version": FORMAT_VERSION,
        "msroute_version": _version.__version__,
        "policy": cls.name,
        "kwargs": {k: _encode_kwarg(k, v) for k, v in policy._init_kwargs.items()},
        "problems": [
            {
                "m_draws": p.m_draws,
                "cbar": p.cbar,
                "constraints": p.constraints.to_dict(),
                "expert_names": None if p.expert_names is None else list(p.expert_names),
                "cost_names": None if p.cost_names is None else list(p.cost_names),
            }
            for p in problems
        ],
        "problem_of_run": problem_of_run,
        "state": scalars,
        "arrays": sorted(k.removeprefix("state.") for k in arrays if k.startswith("state.")),
    }
    return json.dumps(manifest, indent=2), arrays


def _encode_kwarg(name: str, value: object) -> object:
    if value is None or type(value) in _SCALARS:
        return value
    if isinstance(value, np.generic) and type(value.item()) in _SCALARS:
        return value.item()
    if isinstance(value, np.random.SeedSequence):
        entropy = value.entropy
        return {
            "SeedSequence": {
                "entropy": (
                    entropy if entropy is None or isinstance(entropy, int) else list(entropy)
                ),
                "spawn_key": [int(k) for k in value.spawn_key],
                "pool_size": int(value.pool_size),
            }
        }
    raise InvalidTypeError(
        f"cannot save constructor argument {name}={value!r} ({type(value).__name__}); the "
        "format stores None, bool, int, float, str and a SeedSequence seed"
    )


def _write_zip(out: IO[bytes], manifest: str, arrays: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        # A fixed timestamp, as for the arrays: the same state gives the same bytes.
        info = zipfile.ZipInfo(_MANIFEST, date_time=(1980, 1, 1, 0, 0, 0))
        zf.writestr(info, manifest, compress_type=zipfile.ZIP_DEFLATED)
        for key, arr in arrays.items():
            with zf.open(f"{key}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)


# ---------------------------------------------------------------------- load
def load_policy(path: str | os.PathLike[str]) -> BasePolicy:
    """Rebuild a policy saved by ``save_policy``, ready to continue where it stopped.

    The policy is constructed again from its registered name, its problems and its keyword
    arguments, and its declared state (round counter, random stream, learned arrays) is then
    overwritten with the saved one. Nothing is unpickled.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    BasePolicy
        An instance of the registered class.

    Raises
    ------
    PolicyFileError
        The file is missing, is not a policy file, is corrupt or truncated, was written in a
        newer format version, names an unknown policy, or its state does not fit the policy.

    Warns
    -----
    UserWarning
        The file was written by another msroute version (the format is understood, but the
        algorithms may have changed, and with them the decisions).
    """
    p = Path(path)
    if not p.is_file():
        raise PolicyFileError(f"{p}: no such file (expected a policy saved by save_policy)")
    return _load(p, str(p))


def policy_from_bytes(blob: bytes, label: str = "policy bytes") -> BasePolicy:
    """Rebuild a policy from ``policy_bytes``, as ``load_policy``; errors name ``label``."""
    return _load(blob, label)


def _load(source: Path | bytes, p: str) -> BasePolicy:
    """``load_policy`` of a file or of its bytes; ``p`` names it in errors."""
    manifest, arrays = _read_zip(source, p)
    version = manifest.get("format_version")
    if manifest.get("format") != _FORMAT or type(version) is not int:
        raise PolicyFileError(
            f"{p}: not an msroute policy file (manifest.json lacks format={_FORMAT!r} and an "
            "integer format_version)"
        )
    if version > FORMAT_VERSION:
        raise PolicyFileError(
            f"{p}: written in policy format version {version} (msroute "
            f"{manifest.get('msroute_version')}); this msroute reads versions up to "
            f"{FORMAT_VERSION}: upgrade msroute to load it"
        )
    try:
        policy = _rebuild(manifest, arrays, version)
        check_state(policy)  # loaded values as strictly as constructor arguments
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        detail = f"missing entry {exc}" if isinstance(exc, KeyError) else str(exc)
        detail = detail if len(detail) <= 300 else f"{detail[:300]}... ({len(detail)} characters)"
        raise PolicyFileError(f"{p}: cannot rebuild the saved policy: {detail}") from exc
    except (MemoryError, OverflowError) as exc:
        raise PolicyFileError(
            f"{p}: the manifest asks for sizes that cannot be allocated ({type(exc).__name__}); "
            "the file is corrupt or not a policy saved by msroute"
        ) from exc
    saved_version = manifest.get("msroute_version")
    if saved_version != (current := _version.__version__):
        warnings.warn(
            f"{p} was saved by msroute {saved_version} and is loaded by msroute {current}: "
            "if the policy's algorithm changed in between, its next decisions may differ",
            UserWarning,
            stacklevel=3,
        )
    return policy


def _read_zip(source: Path | bytes, path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The manifest and every array of the archive (a file or its bytes), never unpickling."""

    def handle() -> IO[bytes]:
        return open(source, "rb") if isinstance(source, Path) else io.BytesIO(source)

    try:
        with handle() as fh:
            if fh.read(4) != b"PK\x03\x04":
                raise PolicyFileError(
                    f"{path}: not an msroute policy file: not a zip archive (empty, truncated "
                    "or another kind of file)"
                )
        # Our own handle: np.load leaves the file open when the archive is damaged.
        with handle() as fh, np.load(fh, allow_pickle=False) as npz:
            if _MANIFEST not in npz.files:
                raise PolicyFileError(
                    f"{path}: not an msroute policy file (no manifest.json; a plain .npz?)"
                )
            manifest = json.loads(npz[_MANIFEST].decode("utf-8"))
            arrays = {k: npz[k] for k in npz.files if k != _MANIFEST}
    except PolicyFileError:
        raise
    except DAMAGED_FILE_ERRORS as exc:
        raise PolicyFileError(
            f"{path}: unreadable policy file (truncated or corrupt?): {exc}"
        ) from exc
    except RuntimeError as exc:  # zipfile: an entry flagged encrypted (msroute never writes one)
        raise PolicyFileError(
            f"{path}: unreadable policy file (damaged zip flags?): {exc}"
        ) from exc
    if not isinstance(manifest, dict):
        raise PolicyFileError(f"{path}: manifest.json is not a JSON object")
    bad = sorted(k for k, v in arrays.items() if not isinstance(v, np.ndarray))
    if bad:
        raise PolicyFileError(f"{path}: members {bad} are not .npy arrays")
    return manifest, arrays


def _rebuild(manifest: dict[str, Any], arrays: dict[str, np.ndarray], version: int) -> BasePolicy:
    name = manifest["policy"]
    if not isinstance(name, str) or name.lower() not in POLICIES:
        raise InvalidValueError(
            f"unknown policy {name!r}; this msroute has: {', '.join(POLICIES)} "
            "(was the file written by a newer msroute or with a custom registry?)"
        )
    cls = get_policy_class(name)
    problems = [
        Problem(
            arrays[f"problem.{i}.costs"],
            entry["m_draws"],
            Constraints(**entry["constraints"]),
            cbar=entry["cbar"],
            expert_names=entry.get("expert_names"),
            cost_names=entry.get("cost_names"),
        )
        for i, entry in enumerate(manifest["problems"])
    ]
    runs = [problems[i] for i in manifest["problem_of_run"]]
    kwargs: dict[str, Any] = {k: _decode_kwarg(v) for k, v in manifest["kwargs"].items()}
    policy = cls(runs, **cls._legacy_kwargs(version, kwargs))
    state: dict[str, StateValue] = dict(manifest["state"])
    for key in manifest["arrays"]:
        state[key] = arrays[f"state.{key}"]
    fresh = state_dict(policy)
    for since, entries in _LEGACY_ENTRIES.items():
        for key in entries if version <= since else ():
            state.pop(key, None)
    for since, entries in _NEW_ENTRIES.items():
        for key in entries if version < since else ():
            state.setdefault(key, fresh[key])
    if version < 3 and getattr(cls, "thompson", False):
        warnings.warn(
            f"{cls.name}: saved in policy format version {version}, when Thompson sampling drew "
            "from other random streams; its draws restart from its seed's new stream, so its "
            "next decisions differ from those the saved policy would have made",
            UserWarning,
            stacklevel=4,
        )
    load_state_dict(policy, state)
    return policy


def _decode_kwarg(value: object) -> object:
    if isinstance(value, dict):
        if set(value) != {"SeedSequence"}:
            raise InvalidValueError(f"unknown constructor argument encoding {value!r}")
        s = value["SeedSequence"]
        return np.random.SeedSequence(
            s["entropy"], spawn_key=s["spawn_key"], pool_size=s["pool_size"]
        )
    return value
