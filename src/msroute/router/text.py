"""A router's contexts from the prompt's text: its context model, fitted or loaded, and checked.

``contexts_from = {prompts = "eval.csv", by, k, seed}`` (``msroute.router.config``) fits a
context model (``msroute.prompts``) on the prompt column of an outcome table when the router is
created: by default, on a table of two or more categories, a classifier of its tasks (the
contexts are the tasks), else clusters; ``{model = "contexts.npz"}`` takes one fitted before. The
router's contexts are the model's, and ``Router.route(prompt=...)`` (the HTTP decision's
``prompt``) takes a prompt's text instead of a context name: the model assigns it, and the
decision is journaled in that context, as one given by name (the text itself is not journaled).
A warm start from a table with a prompt column starts each context from the table's prompts in
it (``ContextModel.eval_contexts``: those the model was fitted on in their held-out contexts).

A fitted model is saved beside the journal (``JOURNAL.contexts.npz``), a given one stays where it
is; the configuration the journal records names the model's path (absolute, or relative to the
journal's folder), its SHA-256 and the contexts. A reopen loads that file and refuses it if its
bytes changed: new prompts would go to other contexts than those the router learned.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msroute.datasets.outcomes import OutcomeTable, load_outcomes
from msroute.errors import (
    DataFormatError,
    InvalidFeedbackError,
    InvalidValueError,
    RouterConfigError,
)
from msroute.router.config import RouterConfig

if TYPE_CHECKING:  # scipy is imported when a router has a context model, not with msroute
    from msroute.prompts.model import ContextModel

__all__ = [
    "MODEL_SUFFIX",
    "adopt_contexts_from",
    "apply_contexts_from",
    "prompt_context",
    "prompt_table",
    "save_model",
]

#: The file of a model fitted for a router: beside its journal, named after it.
MODEL_SUFFIX = ".contexts.npz"

#: The keys a user writes (the router adds ``sha256`` and, for a fitted model, ``model``).
_GIVEN = ("prompts", "model", "k", "by", "seed")


def prompt_table(path: str, what: str) -> OutcomeTable:
    """The outcome table at ``path``, which must have a prompt column (RouterConfigError naming
    ``what``, the key)."""
    try:
        table = load_outcomes(path)
    except (DataFormatError, OSError) as exc:
        raise RouterConfigError(f"{what}: cannot read {path!r}: {exc}") from exc
    if table.prompts is None:
        raise RouterConfigError(f"{what}: {path!r} has no prompt column (the prompts' texts)")
    return table


def _read_model(path: Path, sha256: str | None) -> tuple[ContextModel, str]:
    from msroute.prompts.model import ContextModel, ContextModelError

    try:
        blob = path.read_bytes()
        model = ContextModel.from_bytes(blob, str(path))
    except (OSError, ContextModelError) as exc:
        raise RouterConfigError(f"contexts_from.model: cannot read {str(path)!r}: {exc}") from exc
    digest = hashlib.sha256(blob).hexdigest()
    if sha256 is not None and digest != sha256:
        raise RouterConfigError(
            f"contexts_from.model: {str(path)!r} is not the context model this router was "
            f"created with (SHA-256 {digest}, the journal recorded {sha256}): restore that "
            "model, or create a new router for this one"
        )
    return model, digest


def apply_contexts_from(
    cfg: RouterConfig, journal: Path | None
) -> tuple[RouterConfig, ContextModel | None]:
    """The configuration with its contexts from its ``contexts_from`` model, and the model
    (None without ``contexts_from``): fitted (and saved beside ``journal``, None for a router in
    memory) or loaded for a new router, loaded and checked against its SHA-256 for a recorded
    one.

    Raises
    ------
    RouterConfigError
        The prompts' table or the model cannot be read, or a recorded model's bytes changed.
    """
    given = cfg.contexts_from
    if given is None:
        return cfg, None
    folder = Path(".") if journal is None else journal.parent
    if "sha256" in given:  # a router that applied it: its recorded model
        if "model" not in given:
            raise RouterConfigError("contexts_from: the model of a router in memory is gone")
        model, _ = _read_model(folder / given["model"], given["sha256"])
        if model.names != cfg.contexts:
            raise RouterConfigError("contexts_from: the model's contexts are not the router's")
        return cfg, model
    resolved: dict[str, Any] = dict(given)
    if "model" in given:
        path = Path(given["model"]).resolve()
        model, digest = _read_model(path, None)
        resolved["model"] = str(path)
    else:
        from msroute.prompts.model import fit_context_model

        table = prompt_table(given["prompts"], "contexts_from.prompts")
        try:
            model = fit_context_model(
                table.prompt_counts(),
                table.scores.sum(axis=1),
                k=given.get("k"),
                by=given.get("by"),
                labels=table.category_labels(),
                seed=given["seed"],
                source=given["prompts"],
            )
        except InvalidValueError as exc:
            raise RouterConfigError(
                f"contexts_from: cannot fit a context model on {given['prompts']!r}: {exc}"
            ) from exc
        digest = model.sha256
        if journal is not None:  # saved there once the journal is created (save_model)
            resolved["model"] = journal.name + MODEL_SUFFIX  # relative to the journal's folder
    resolved["sha256"] = digest
    return dataclasses.replace(cfg, contexts=model.names, contexts_from=resolved), model


def save_model(cfg: RouterConfig, model: ContextModel | None, journal: Path | None) -> None:
    """Save a model fitted for a new router beside its journal, just created (a file left there
    by a router whose journal is gone is replaced)."""
    given = cfg.contexts_from
    if model is None or journal is None or given is None or "prompts" not in given:
        return
    if model.save(journal.parent / given["model"]) != given["sha256"]:
        raise RouterConfigError("contexts_from: the model's file is not the model fitted")


def adopt_contexts_from(wanted: RouterConfig, current: RouterConfig) -> RouterConfig:
    """``wanted`` (a configuration file a running router is reopened with) with the current
    contexts and model where its ``contexts_from`` asks for what the router already applied; a
    different one is left to be refused as a change of a fixed key."""
    new, cur = wanted.contexts_from, current.contexts_from
    if new is None or cur is None or "sha256" in new:
        return wanted
    asked = {k: new.get(k) for k in _GIVEN}
    if "model" in new:
        asked["model"] = str(Path(new["model"]).resolve())
    had = {k: cur.get(k) for k in _GIVEN}
    if "prompts" in cur:
        had["model"] = asked["model"]  # the model fitted on the prompts, whatever its file
    if asked != had:
        return wanted
    return dataclasses.replace(wanted, contexts=current.contexts, contexts_from=cur)


def prompt_context(model: ContextModel | None, context: str | None, prompt: object) -> str:
    """The context of a decision asked with a prompt's text (InvalidFeedbackError: both a
    context and a prompt, a prompt that is not text, or a router without a context model)."""
    if context is not None:
        raise InvalidFeedbackError("give a context or a prompt, not both")
    if not isinstance(prompt, str):
        raise InvalidFeedbackError(f"prompt: must be the prompt's text, got {prompt!r:.80}")
    if model is None:
        raise InvalidFeedbackError(
            "prompt: this router takes no prompt text (no contexts_from model); give its context"
        )
    return model.context_of(prompt)
