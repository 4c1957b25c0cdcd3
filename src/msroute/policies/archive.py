"""Writing a policy file: its format version and ``save_policy`` (``msroute.policies.persist``
describes the format and reads it back).

Saving reads a policy through ``Saveable`` and checks its class against the registered names
only, so ``BasePolicy.save`` reaches this module without the policy classes, the registry or
the loading half (which builds policies) in its imports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from msroute import _version
from msroute._atomic import atomic_path
from msroute._npzip import write_zip, zip_bytes
from msroute.core.problem import Problem
from msroute.core.problem_batch import ProblemBatch
from msroute.errors import InvalidTypeError
from msroute.policies.names import POLICIES
from msroute.policies.state_walk import _SCALARS, StateValue, state_dict

__all__ = ["FORMAT", "FORMAT_VERSION", "Saveable", "policy_bytes", "save_policy"]

#: Version of the file layout written by ``save_policy``; files of a newer one are refused.
#: Version 2: decisions are values, so OMD no longer saves a last decision (``_ctx``,
#: ``_q_play``); version-1 files load with those two entries dropped. Version 3: Thompson
#: sampling draws from one xoshiro256++ generator per run (``streams.gamma_state``) instead of
#: three buffered numpy streams (``streams.normals``, ``streams.spare_uniforms``,
#: ``streams.spare_normals``); older files load with those dropped and the generator seeded
#: afresh (a Thompson policy warns that its draws restart). Version 4: a policy's
#: constructor arguments may be completed for older files by the class
#: (``BasePolicy._legacy_kwargs``: a default that changed since keeps its old value). Version 5:
#: a paced policy saves its pacer. Version 6: OMD saves its warm start's prior
#: (``msroute.policies.warm.RewardPrior``); older files load with none (all zeros). Version 7:
#: the prior's anchor and price; older files load with none (a warm start without the anchor,
#: as it ran). Version 8: whether the prior's price fades with the spend's slack (its margin);
#: older files load without (the price gated by the dual, as it ran). Version 9: whether the
#: prior counts as explored for the decaying floor; older files load without (the floor counting
#: the anchor's steps, as it ran).
FORMAT_VERSION = 9
#: The ``format`` a policy file's manifest names.
FORMAT = "msroute-policy"


class Saveable(Protocol):
    """What saving reads of a policy besides its declared state (``BasePolicy`` has all):
    its class's registered name, the problems of its runs and its constructor's keyword
    arguments."""

    name: ClassVar[str]

    @property
    def problem_batch(self) -> ProblemBatch: ...

    @property
    def _init_kwargs(self) -> dict[str, Any]: ...


def save_policy(policy: Saveable, path: str | os.PathLike[str]) -> None:
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
        write_zip(fh, manifest, arrays)


def policy_bytes(policy: Saveable) -> bytes:
    """The file ``save_policy`` would write, as bytes (for a snapshot kept in a database).

    Raises as ``save_policy``; ``policy_from_bytes`` reads the bytes back.
    """
    return zip_bytes(*_archive(policy))


def _archive(policy: Saveable) -> tuple[str, dict[str, np.ndarray]]:
    """The manifest (JSON text) and the arrays of a policy's file."""
    cls = type(policy)
    if not isinstance(getattr(cls, "name", None), str):  # not a policy class at all
        raise InvalidTypeError(
            f"policy must be a policy (save_policy(policy, path)), got {cls.__name__}"
        )
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
        "format": FORMAT,
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
    if isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim == 1):
        return {"list": [_encode_kwarg(f"{name}[{i}]", v) for i, v in enumerate(value)]}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode_kwarg(f"{name}[{k!r}]", v) for k, v in value.items()}}
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
        "format stores None, bool, int, float, str, a SeedSequence seed, and lists (1-d arrays) "
        "and string-keyed mappings of these"
    )
