"""Saving and resuming routing policies: one zip file of a JSON manifest and ``.npy`` arrays.

A router serving real traffic must survive restarts: ``save_policy`` writes everything a
policy has learned, and ``load_policy`` rebuilds it so that, fed the same feedback, it makes
exactly the decisions the original would have made, bit for bit (random stream included).

Format (``format_version`` 8, ``FORMAT_VERSION``)
-------------------------------------------------
One zip archive, readable by ``numpy.load(path, allow_pickle=False)`` (an ``NpzFile``) and by any
zip tool (``unzip -p router.npz manifest.json``):

* ``manifest.json`` — UTF-8 JSON: ``format`` (``"msroute-policy"``), ``format_version``,
  ``msroute_version``, ``policy`` (the registered name), ``kwargs`` (the constructor's keyword
  arguments; a ``SeedSequence`` seed as ``{"SeedSequence": {...}}``, a list or 1-d array as
  ``{"list": [...]}``, a string-keyed mapping as ``{"dict": {...}}``), ``problems`` (``m_draws``,
  ``cbar`` and ``constraints`` of each distinct problem, the latter by
  ``Constraints.to_dict``), ``problem_of_run`` (which problem each run uses), ``state`` (the
  non-array state: the round counter ``t``, ``pacer`` (None for a policy that is not
  paced; a paced one's ``kwargs`` hold ``pacing: true`` and its pacer's arrays are
  ``state.pacer.spend`` and the like), the generator state of each run's streams under
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
The entries are those of ``msroute.policies.state_walk.state_dict`` (each class declares its
own in ``_state_attrs``). Loading never executes code: the archive is read with
``allow_pickle=False`` and the manifest is JSON; each entry is checked against the freshly
built policy (``load_state_dict``) and the result as strictly as constructor arguments
(``check_state``).

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

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from msroute import _version
from msroute._npzip import read_zip
from msroute.core.problem import Constraints, Problem
from msroute.errors import InvalidTypeError, InvalidValueError, PolicyFileError
from msroute.policies.archive import FORMAT, FORMAT_VERSION, policy_bytes, save_policy
from msroute.policies.registry import POLICIES, get_policy_class
from msroute.policies.state_walk import (
    StateValue,
    check_state,
    load_state_dict,
    state_dict,
)
from msroute.policies.warm import RewardPrior

if TYPE_CHECKING:  # base.py saves through msroute.policies.archive, never through this module
    from msroute.policies.base import BasePolicy

__all__ = [
    "FORMAT_VERSION",
    "PolicyFileError",
    "load_policy",
    "policy_bytes",
    "policy_from_bytes",
    "save_policy",
]

_OLD_STREAMS = tuple(
    f"streams.{stream}.{part}"
    for stream in ("normals", "spare_uniforms", "spare_normals")
    for part in ("generators", "buffer", "pos")
)
#: State entries that are no longer state after each format version (dropped from its files
#: and older ones).
_LEGACY_ENTRIES: dict[int, tuple[str, ...]] = {1: ("_ctx", "_q_play"), 2: _OLD_STREAMS}
#: State entries new in each format version: files of older versions keep the fresh policy's.
_NEW_ENTRIES: dict[int, tuple[str, ...]] = {
    3: ("streams.gamma_state",),
    5: ("pacer",),
    6: tuple(
        f"prior.{name}"
        for name in RewardPrior._state_attrs
        if name not in ("anchor", "price", "fade", "explored")
    ),  # OMD's warm start
    7: ("prior.anchor", "prior.price"),  # its anchor
    8: ("prior.fade",),  # its margin
    9: ("prior.explored",),  # its floor
}


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
    if not isinstance(path, str | os.PathLike):
        raise InvalidTypeError(f"path must be a file path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise PolicyFileError(f"{p}: no such file (expected a policy saved by save_policy)")
    return _load(p, str(p))


def policy_from_bytes(blob: bytes, label: str = "policy bytes") -> BasePolicy:
    """Rebuild a policy from ``policy_bytes``, as ``load_policy``; errors name ``label``."""
    return _load(blob, label)


def _load(source: Path | bytes, p: str) -> BasePolicy:
    """``load_policy`` of a file or of its bytes; ``p`` names it in errors."""
    manifest, arrays = read_zip(source, p, "policy", PolicyFileError)
    version = manifest.get("format_version")
    if manifest.get("format") != FORMAT or type(version) is not int:
        raise PolicyFileError(
            f"{p}: not an msroute policy file (manifest.json lacks format={FORMAT!r} and an "
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
    policy = cls.build(runs, **cls._recorded_kwargs(cls._legacy_kwargs(version, kwargs)))
    state: dict[str, StateValue] = dict(manifest["state"])
    for key in manifest["arrays"]:
        state[key] = arrays[f"state.{key}"]
    fresh = state_dict(policy)
    for since, entries in _LEGACY_ENTRIES.items():
        for key in entries if version <= since else ():
            state.pop(key, None)
    for since, entries in _NEW_ENTRIES.items():
        for key in entries if version < since else ():
            if key in fresh:  # a policy of another class has no such entry
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
        if set(value) == {"list"} and isinstance(value["list"], list):
            return [_decode_kwarg(v) for v in value["list"]]
        if set(value) == {"dict"} and isinstance(value["dict"], dict):
            return {k: _decode_kwarg(v) for k, v in value["dict"].items()}
        if set(value) != {"SeedSequence"}:
            raise InvalidValueError(f"unknown constructor argument encoding {value!r:.80}")
        s = value["SeedSequence"]
        return np.random.SeedSequence(
            s["entropy"], spawn_key=s["spawn_key"], pool_size=s["pool_size"]
        )
    return value
