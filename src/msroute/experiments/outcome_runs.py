"""The tables of one outcome-bench run: what it streams, what the router sees, what it starts from.

``msroute bench --outcomes STREAM`` (or ``llmrouter``) streams the table's prompts. Three
options change what a run is made of (``OutcomeBenchConfig``):

* ``--warm-start EVAL``: the router starts from the eval table EVAL (``msroute.warmstart``),
  whose models must be the stream's (matched by name);
* ``--warm-split F``: one table split by prompt, per seed (a seeded permutation): the router
  starts from a fraction F of the prompts and the run streams the rest, so the benefit is
  measured on prompts the prior never saw (``OPT^ctx`` is that of the streamed part);
* ``--contexts category|text|none``: what the router sees of a prompt: its category (the
  default), a context from its text (``msroute.prompts``: a context model fitted on the eval
  table's prompts, their texts, scores and categories, with the seed's number: the eval table's
  task predicted from the text when it has two or more categories, else a cluster; the eval
  table's prompts are in their held-out contexts, ``ContextModel.eval_contexts``; without an
  eval table, clusters of the streamed prompts themselves, whose categories stay hidden, a
  hindsight), or nothing. The comparators stay per category, so the rows compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from msroute.datasets.outcomes import NO_CATEGORY, OutcomeTable, load_llmrouter, load_outcomes
from msroute.errors import InvalidValueError

__all__ = ["CONTEXT_SOURCES", "LLMROUTER", "RunTables", "load_table", "run_tables"]

#: The packaged table's name (``msroute bench llmrouter``).
LLMROUTER = "llmrouter"

#: What the router may see of a prompt.
CONTEXT_SOURCES = ("category", "text", "none")

#: Spawn key of the per-seed split of ``--warm-split``.
_SPLIT_KEY = 0x73706C


def _text_contexts(stream: OutcomeTable, warm: OutcomeTable | None, seed: int) -> RunTables:
    """The run's tables with the contexts of a context model fitted on the eval table's prompts
    and categories (clusters of the stream's prompts without one) as the router's."""
    from msroute.prompts.model import fit_context_model

    fit_on = stream if warm is None else warm
    model = fit_context_model(
        fit_on.prompt_counts(),
        fit_on.scores.sum(axis=1),
        labels=None if warm is None else warm.category_labels(),
        seed=seed,
        source=fit_on.source,
    )
    routed = stream.with_contexts(model.names, model.assign_matrix(stream.prompt_counts()))
    if warm is not None:
        warm = warm.with_contexts(model.names, model.eval_contexts(warm.prompt_counts()))
    return RunTables(stream, routed, warm, dict(model.info))


@cache
def load_table(name: str) -> OutcomeTable:
    """The packaged table (``"llmrouter"``) or a user's outcome file (read once per process)."""
    return load_llmrouter() if name == LLMROUTER else load_outcomes(name)


@dataclass(frozen=True)
class RunTables:
    """The tables of one run.

    Attributes
    ----------
    stream : OutcomeTable
        The prompts the run streams, in their categories (the comparators' contexts).
    routed : OutcomeTable
        The same prompts in the contexts the router sees.
    warm : OutcomeTable or None
        The eval table the router starts from, in the router's contexts.
    """

    stream: OutcomeTable
    routed: OutcomeTable
    warm: OutcomeTable | None
    model_info: dict[str, Any] | None = None


def _aligned(warm: OutcomeTable, stream: OutcomeTable) -> OutcomeTable:
    """``warm`` with its models in the stream's order (the same models and cost names, else an
    InvalidValueError naming the difference)."""
    if set(warm.models) != set(stream.models):
        missing = sorted(set(stream.models) - set(warm.models))
        extra = sorted(set(warm.models) - set(stream.models))
        raise InvalidValueError(
            f"the warm-start table {warm.source} has other models than the stream"
            + (f"; missing {', '.join(missing[:5])}" if missing else "")
            + (f"; not in the stream {', '.join(extra[:5])}" if extra else "")
        )
    if warm.cost_names != stream.cost_names or warm.dims != stream.dims:
        raise InvalidValueError(
            f"the warm-start table {warm.source} has costs {list(warm.cost_names)} and "
            f"dimensions {list(warm.dims)}; the stream {list(stream.cost_names)} and "
            f"{list(stream.dims)}"
        )
    return warm.with_models(stream.models)


def _split(table: OutcomeTable, fraction: float, seed: int) -> tuple[OutcomeTable, OutcomeTable]:
    """(warm, stream): a seeded ``fraction`` of the prompts, and the rest (each in table order)."""
    order = np.random.default_rng(np.random.SeedSequence([seed, _SPLIT_KEY])).permutation(
        table.n_prompts
    )
    n_warm = round(fraction * table.n_prompts)
    if not 0 < n_warm < table.n_prompts:
        raise InvalidValueError(
            f"--warm-split {fraction:g} of {table.n_prompts} prompts leaves one side empty"
        )
    return (
        table.subset(np.sort(order[:n_warm]), f"{table.source} (warm part, seed {seed})"),
        table.subset(np.sort(order[n_warm:]), f"{table.source} (streamed part, seed {seed})"),
    )


@cache
def run_tables(
    table: str,
    *,
    seed: int,
    warm_start: str | None = None,
    warm_split: float | None = None,
    contexts: str = "category",
) -> RunTables:
    """The tables of seed ``seed``'s runs (module docstring; kept for the process: a bench's
    cells of one seed share them)."""
    full = load_table(table)
    warm: OutcomeTable | None = None
    stream = full
    if warm_split is not None:
        warm, stream = _split(full, warm_split, seed)
    elif warm_start is not None:
        warm = _aligned(load_table(warm_start), full)
    if contexts == "category":
        return RunTables(stream, stream, warm)
    if contexts == "none":
        one = (NO_CATEGORY,)
        return RunTables(
            stream,
            stream.with_contexts(one, np.zeros(stream.n_prompts, dtype=np.int64)),
            None if warm is None else warm.with_contexts(one, np.zeros(warm.n_prompts, np.int64)),
        )
    if contexts == "text":
        return _text_contexts(stream, warm, seed)
    raise InvalidValueError(
        f"contexts == {contexts!r}, must be one of {', '.join(CONTEXT_SOURCES)}"
    )
