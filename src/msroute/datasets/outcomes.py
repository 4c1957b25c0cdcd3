"""Recorded outcome tables: one row per prompt, each model's graded answer and its cost.

This is the format LLM-evaluation harnesses and RouterBench already write (CSV, or JSON Lines
with the same keys):

    prompt_id,category,small,large,small|usd,large|usd
    p1,math,0,1,0.00012,0.0021
    p2,math,1,1,0.00009,0.0018
    p3,code,0,0,0.00020,0.0035
    p4,code,1,1,0.00015,0.0029

* ``prompt_id`` (required): a unique id per row.
* ``category`` (optional): the prompt's task, revealed as the context before routing; without
  the column every prompt has the one context ``"all"``.
* ``prompt`` (optional): the prompt's text, from which a router can take its context instead
  (``msroute.prompts``: ``msroute bench --contexts text``, a router's ``contexts_from``).
* ``MODEL``: the model's graded score on the prompt, in ``[0, 1]`` (1 = correct). With more
  than one reward dimension per prompt, name the columns ``MODEL:DIMENSION`` instead (every
  model must have the same dimensions); the team's reward sums, over dimensions, the best
  member's score.
* ``MODEL|COST``: the prompt's cost of calling that model, per named cost (``usd``,
  ``latency_s``...), in the range of costs ``[0, 1e12]`` (``msroute._validation.COST_MAX``).
  Every model needs every cost name.

Cells are never guessed: a blank cell, ``nan``, a score outside ``[0, 1]``, a negative cost, a
repeated prompt id, a cost column of a model that has no score column, a model without a cost
column or two columns for one cell (``MODEL`` is ``MODEL:score``) raise ``DataFormatError``
naming the file, the line and the column(s).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from msroute._validation import (
    COST_MAX,
    FloatArray,
    IntArray,
    check_cost_range,
    parse_decimal,
    quoted,
    unique_keys,
)
from msroute.datasets.crowd import PathLike, decode_text
from msroute.errors import DataFormatError, InvalidValueError

if TYPE_CHECKING:  # scipy is imported where features are used, not with msroute
    import scipy.sparse as sp

__all__ = [
    "LLMROUTER_SHA256",
    "NO_CATEGORY",
    "OutcomeTable",
    "describe",
    "load_llmrouter",
    "load_outcomes",
    "read_outcomes",
]

#: The context of every prompt of a table without a ``category`` column.
NO_CATEGORY = "all"

#: The single reward dimension of a table whose score columns carry no ``:DIMENSION``.
SCORE = "score"

#: SHA-256 of the packaged LLMRouter table and its license, checked every time they are loaded.
LLMROUTER_SHA256 = {
    "llmrouter.csv": "2e6f4e5437c50d6dc206438ed3f47f9d9983741dcf8651692c1b028624b0aab6",
    "llmrouter.features.npz": "7c329d3a74dc296ea2b90cd7287d7eb34d67f089ee5d42cc0174365bf1285349",
    "llmrouter.LICENSE": "905c5b3e88f78dc96ed4d0b8ec1c0a20fbb3122988b7d992be64d751836ecc92",
}


@dataclass(frozen=True, eq=False)
class OutcomeTable:
    """Graded answers of K models on P prompts, the prompts' categories and per-call costs.

    Attributes
    ----------
    prompt_ids : tuple of str, length P
    categories : tuple of str, length X
        The context names, in order of first appearance.
    category : ndarray of int, shape (P,)
        Each prompt's context index in ``[0, X)``.
    models : tuple of str, length K
    dims : tuple of str, length N
        Reward dimensions (``("score",)`` for a table of plain score columns).
    scores : ndarray, shape (P, N, K)
        ``scores[p, n, i]``: model ``i``'s graded score on dimension ``n`` of prompt ``p``.
    cost_names : tuple of str, length d
    costs : ndarray, shape (P, K, d)
        ``costs[p, i, j]``: prompt ``p``'s cost ``j`` of calling model ``i``.
    source : str
        Where the table was read from.
    prompts : tuple of str or None
        Each prompt's text (a ``prompt`` column), or None.
    features : sparse matrix (P, ``msroute.prompts.DIM``) or None
        Each prompt's hashed n-gram counts where the texts are not given (the packaged table
        ships these instead of its prompts' texts).
    """

    prompt_ids: tuple[str, ...]
    categories: tuple[str, ...]
    category: IntArray
    models: tuple[str, ...]
    dims: tuple[str, ...]
    scores: FloatArray
    cost_names: tuple[str, ...]
    costs: FloatArray
    source: str = ""
    prompts: tuple[str, ...] | None = None
    features: sp.csr_matrix | None = None

    def __post_init__(self) -> None:
        p, k = len(self.prompt_ids), len(self.models)
        if self.prompts is not None and len(self.prompts) != p:
            raise InvalidValueError(f"prompts must hold {p} texts, got {len(self.prompts)}")
        if self.features is not None and self.features.shape[0] != p:
            raise InvalidValueError(f"features must have {p} rows, got {self.features.shape[0]}")
        n, d, x = len(self.dims), len(self.cost_names), len(self.categories)
        if p < 1 or k < 1 or n < 1 or d < 1 or x < 1:
            raise InvalidValueError(
                f"an outcome table needs at least one prompt, model, dimension, cost and "
                f"category, got P={p}, K={k}, N={n}, d={d}, X={x}"
            )
        scores = np.array(self.scores, dtype=np.float64)
        costs = np.array(self.costs, dtype=np.float64)
        cat = np.array(self.category, dtype=np.int64)
        if scores.shape != (p, n, k):
            raise InvalidValueError(f"scores must have shape {(p, n, k)}, got {scores.shape}")
        if costs.shape != (p, k, d):
            raise InvalidValueError(f"costs must have shape {(p, k, d)}, got {costs.shape}")
        if cat.shape != (p,) or (p and (cat.min() < 0 or cat.max() >= x)):
            raise InvalidValueError(f"category must be {p} indices in [0, {x})")
        if not (np.all(np.isfinite(scores)) and scores.min() >= 0.0 and scores.max() <= 1.0):
            raise InvalidValueError("scores must hold numbers in [0, 1]")
        if not (np.all(np.isfinite(costs)) and costs.min() >= 0.0 and costs.max() <= COST_MAX):
            raise InvalidValueError(
                f"costs must hold numbers in [0, {COST_MAX:g}] (the range of costs)"
            )
        for arr in (scores, costs, cat):
            arr.setflags(write=False)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "costs", costs)
        object.__setattr__(self, "category", cat)

    @property
    def n_prompts(self) -> int:
        """P."""
        return len(self.prompt_ids)

    @property
    def n_experts(self) -> int:
        """K, the number of models."""
        return len(self.models)

    @property
    def n_dims(self) -> int:
        """N, the reward dimensions per prompt."""
        return len(self.dims)

    @property
    def n_contexts(self) -> int:
        """X, the number of categories."""
        return len(self.categories)

    @property
    def has_text(self) -> bool:
        """Whether the prompts' texts or features are known (contexts can come from them)."""
        return self.prompts is not None or self.features is not None

    def prompt_counts(self) -> sp.csr_matrix:
        """The prompts' hashed n-gram counts (``msroute.prompts.features``), (P, DIM): the
        shipped features, else computed from the texts once. InvalidValueError without either."""
        if self.features is None:
            if self.prompts is None:
                raise InvalidValueError(
                    f"{self.source or 'the table'} has no prompt column: contexts cannot come "
                    "from the prompts' text"
                )
            from msroute.prompts.features import feature_matrix

            object.__setattr__(self, "features", feature_matrix(self.prompts))
        assert self.features is not None
        return self.features

    def category_labels(self) -> list[str]:
        """Each prompt's category name (the labels a context model by task learns)."""
        return [self.categories[i] for i in self.category.tolist()]

    def cost_index(self, name: str) -> int:
        """Column of cost ``name`` (an ``InvalidValueError`` naming the known ones)."""
        if name not in self.cost_names:
            raise InvalidValueError(
                f"cost {name!r} is not in the table; its costs are {', '.join(self.cost_names)}"
            )
        return self.cost_names.index(name)

    def mean_scores(self) -> FloatArray:
        """Each model's mean score per dimension over the prompts, shape (N, K)."""
        return np.asarray(self.scores.mean(axis=0), dtype=np.float64)

    def mean_costs(self) -> FloatArray:
        """Each model's mean cost per call over the prompts, shape (K, d)."""
        return np.asarray(self.costs.mean(axis=0), dtype=np.float64)

    def best_single(self, budget: float | None, cost: str) -> tuple[str | None, float, float]:
        """The best single model whose mean cost ``cost`` per prompt is at most ``budget``.

        What a team that hard-codes one model gets: ``(model, mean reward, mean cost)``, or
        ``(None, nan, nan)`` when no model is that cheap. ``budget=None``: no bound.
        """
        reward = self.scores.sum(axis=1).mean(axis=0)  # (K,)
        spend = self.mean_costs()[:, self.cost_index(cost)]
        ok = np.ones(self.n_experts, dtype=bool) if budget is None else spend <= budget
        if not np.any(ok):
            return None, math.nan, math.nan
        i = int(np.flatnonzero(ok)[np.argmax(reward[ok])])
        return self.models[i], float(reward[i]), float(spend[i])

    def subset(self, rows: IntArray, source: str | None = None) -> OutcomeTable:
        """The table of prompts ``rows`` (in that order), with the same categories (a category
        may then have no prompt)."""
        idx = np.asarray(rows, dtype=np.int64)
        return dataclasses.replace(
            self,
            prompt_ids=tuple(self.prompt_ids[i] for i in idx.tolist()),
            category=self.category[idx],
            scores=self.scores[idx],
            costs=self.costs[idx],
            source=self.source if source is None else source,
            prompts=None if self.prompts is None else tuple(self.prompts[i] for i in idx.tolist()),
            features=None if self.features is None else self.features[idx].tocsr(),
        )

    def with_models(self, models: Sequence[str]) -> OutcomeTable:
        """The table of these models only, in this order (an InvalidValueError names the models
        the table lacks)."""
        missing = [m for m in models if m not in self.models]
        if missing:
            raise InvalidValueError(
                f"{self.source or 'the table'} has no column for model(s) "
                f"{', '.join(map(repr, missing[:5]))} (its models: "
                f"{', '.join(map(repr, self.models[:10]))})"
            )
        order = [self.models.index(m) for m in models]
        return dataclasses.replace(
            self,
            models=tuple(models),
            scores=self.scores[:, :, order],
            costs=self.costs[:, order],
        )

    def with_costs(self, names: Sequence[str]) -> OutcomeTable:
        """The table of these costs only, in this order (an InvalidValueError names the costs
        the table lacks): a table's costs are matched by name, never by position."""
        missing = [n for n in names if n not in self.cost_names]
        if missing:
            raise InvalidValueError(
                f"{self.source or 'the table'} has no cost column for "
                f"{', '.join(map(repr, missing[:5]))} (MODEL|{missing[0]}; its costs: "
                f"{', '.join(map(repr, self.cost_names[:10]))})"
            )
        order = [self.cost_names.index(n) for n in names]
        return dataclasses.replace(self, cost_names=tuple(names), costs=self.costs[:, :, order])

    def with_contexts(self, names: Sequence[str], index: IntArray) -> OutcomeTable:
        """The same prompts in other contexts: ``names`` (X',) and each prompt's index (P,)."""
        return dataclasses.replace(
            self, categories=tuple(names), category=np.asarray(index, dtype=np.int64)
        )

    def digest(self) -> str:
        """SHA-256 over the table's numbers and names (recorded with results)."""
        h = hashlib.sha256()
        for part in (self.prompt_ids, self.categories, self.models, self.dims, self.cost_names):
            h.update("\x1f".join(part).encode())
            h.update(b"\x1e")
        for arr in (self.category, self.scores, self.costs):
            h.update(np.ascontiguousarray(arr).tobytes())
        if self.prompts is not None:  # a table without texts keeps the digest it always had
            h.update(
                b"\x1dprompts\x1e" + "\x1f".join(self.prompts).encode("utf-8", "surrogatepass")
            )
        return h.hexdigest()


# ---------------------------------------------------------------------------- parsing
@dataclass(frozen=True)
class _Layout:
    """How the columns of a header map to prompt id, category, scores and costs."""

    id_col: int
    cat_col: int | None
    text_col: int | None
    models: tuple[str, ...]
    dims: tuple[str, ...]
    cost_names: tuple[str, ...]
    score_cols: dict[tuple[int, int], int]  # (dim, model) -> column
    cost_cols: dict[tuple[int, int], int]  # (model, cost) -> column


def _layout(header: Sequence[str], where: str) -> _Layout:
    """The columns' roles, in time linear in the number of columns (a table of 20,000 models
    is read as fast as its rows allow)."""
    names = [h.strip() for h in header]
    first: dict[str, int] = {}
    for j, name in enumerate(names):
        if not name:
            raise DataFormatError(f"{where}: column {j + 1} has no name")
        if name in first:
            raise DataFormatError(f"{where}: column {quoted(name)} appears twice")
        first[name] = j
    if "prompt_id" not in first:
        raise DataFormatError(
            f"{where}: no 'prompt_id' column (expected prompt_id[,category],MODEL...,MODEL|COST...)"
        )
    id_col = first["prompt_id"]
    cat_col = first.get("category")
    text_col = first.get("prompt")
    # dicts as ordered sets: the models, dimensions and costs in order of first appearance
    models: dict[str, int] = {}
    dims: dict[str, int] = {}
    cost_names: dict[str, int] = {}
    scores: dict[tuple[str, str], int] = {}
    costs: dict[tuple[str, str], int] = {}
    for j, name in enumerate(names):
        if j in (id_col, cat_col, text_col):
            continue
        if "|" in name:
            model, _, cost = name.partition("|")
            if not model or not cost:
                raise DataFormatError(f"{where}: column {quoted(name)} must be MODEL|COST")
            costs[(model, cost)] = j
            cost_names.setdefault(cost, len(cost_names))
            continue
        model, colon, dim = name.partition(":")
        if colon and (not model or not dim):
            raise DataFormatError(
                f"{where}: column {quoted(name)} must be MODEL or MODEL:DIMENSION"
            )
        dim = dim if colon else SCORE
        if (model, dim) in scores:  # ``small`` is ``small:score``: one cell, two columns
            raise DataFormatError(
                f"{where}: columns {quoted(names[scores[(model, dim)]])} and {quoted(name)} "
                f"both name model {quoted(model)}'s {quoted(dim)} score (a column without "
                f":DIMENSION is the {SCORE!r} dimension); keep one"
            )
        models.setdefault(model, len(models))
        dims.setdefault(dim, len(dims))
        scores[(model, dim)] = j
    if not models:
        raise DataFormatError(f"{where}: no score column (one per model, named by the model)")
    priced: set[str] = set()
    for model, cost in costs:
        if model not in models:
            raise DataFormatError(
                f"{where}: cost column {quoted(model + '|' + cost)} names model {quoted(model)}, "
                "which has no score column"
            )
        priced.add(model)
    for model in models:
        for dim in dims:
            if (model, dim) not in scores:
                col = model if dim == SCORE else f"{model}:{dim}"
                raise DataFormatError(
                    f"{where}: model {quoted(model)} has no score column {quoted(col)} (every "
                    f"model needs every dimension: {quoted(', '.join(dims), 200)})"
                )
        if model not in priced:
            raise DataFormatError(
                f"{where}: model {quoted(model)} has no cost column (add {quoted(model + '|usd')}"
                " or another MODEL|COST column)"
            )
        for cost in cost_names:
            if (model, cost) not in costs:
                raise DataFormatError(
                    f"{where}: model {quoted(model)} has no {quoted(model + '|' + cost)} column "
                    f"(every model needs every cost: {quoted(', '.join(cost_names), 200)})"
                )
    return _Layout(
        id_col=id_col,
        cat_col=cat_col,
        text_col=text_col,
        models=tuple(models),
        dims=tuple(dims),
        cost_names=tuple(cost_names),
        score_cols={(dims[d], models[m]): j for (m, d), j in scores.items()},
        cost_cols={(models[m], cost_names[c]): j for (m, c), j in costs.items()},
    )


def _cell_number(cell: object, where: str, column: str, *, score: bool) -> float:
    if isinstance(cell, bool) or cell is None:
        raise DataFormatError(f"{where}, column {quoted(column)}: expected a number, got {cell!r}")
    if isinstance(cell, int | float):
        value = float(cell) if not isinstance(cell, int) or abs(cell) < 2**1023 else math.inf
    else:
        text = str(cell).strip()
        if not text:
            raise DataFormatError(
                f"{where}, column {quoted(column)}: the cell is blank (blank cells are refused, "
                "not read as 0)"
            )
        try:
            value = parse_decimal(text)
        except ValueError:
            raise DataFormatError(
                f"{where}, column {quoted(column)}: expected a number, got {quoted(text)}"
            ) from None
    if not math.isfinite(value):
        raise DataFormatError(f"{where}, column {quoted(column)}: {value} is not a finite number")
    if score and not 0.0 <= value <= 1.0:
        raise DataFormatError(
            f"{where}, column {quoted(column)}: score {value:g} must be in [0, 1] (1 = correct)"
        )
    if not score and value < 0.0:
        raise DataFormatError(f"{where}, column {quoted(column)}: cost {value:g} must be >= 0")
    if not score:
        check_cost_range(value, f"{where}, column {quoted(column)}", DataFormatError)
    return value


def _table(
    rows: Sequence[tuple[str, Sequence[object]]], header: Sequence[str], lay: _Layout, source: str
) -> OutcomeTable:
    """Build the table from (location, cells) rows laid out as ``lay``."""
    if not rows:
        raise DataFormatError(f"{source} has a header but no prompt row")
    p, n, k, d = len(rows), len(lay.dims), len(lay.models), len(lay.cost_names)
    scores = np.empty((p, n, k))
    costs = np.empty((p, k, d))
    ids: list[str] = []
    seen: dict[str, str] = {}
    cats: list[str] = []
    texts: list[str] = []
    for r, (where, cells) in enumerate(rows):
        if len(cells) != len(header):
            raise DataFormatError(
                f"{where}: expected {len(header)} fields ({quoted(', '.join(header), 200)}), "
                f"got {len(cells)}"
            )
        pid = cells[lay.id_col]
        if not isinstance(pid, str | int) or isinstance(pid, bool) or not str(pid).strip():
            raise DataFormatError(f"{where}, column 'prompt_id': expected a non-empty id")
        pid = str(pid).strip()
        if pid in seen:
            raise DataFormatError(f"{where}: prompt_id {quoted(pid)} repeats ({seen[pid]})")
        seen[pid] = where
        ids.append(pid)
        if lay.cat_col is not None:
            cat = cells[lay.cat_col]
            if not isinstance(cat, str) or not cat.strip():
                raise DataFormatError(f"{where}, column 'category': expected a non-empty name")
            cats.append(cat.strip())
        if lay.text_col is not None:
            text = cells[lay.text_col]
            if not isinstance(text, str):
                raise DataFormatError(f"{where}, column 'prompt': expected the prompt's text")
            texts.append(text)
        for (dim, model), j in lay.score_cols.items():
            scores[r, dim, model] = _cell_number(cells[j], where, header[j], score=True)
        for (model, c), j in lay.cost_cols.items():
            costs[r, model, c] = _cell_number(cells[j], where, header[j], score=False)
    names = list(dict.fromkeys(cats)) if cats else [NO_CATEGORY]
    index = {c: i for i, c in enumerate(names)}
    category = np.array([index[c] for c in cats] if cats else [0] * p, dtype=np.int64)
    return OutcomeTable(
        prompt_ids=tuple(ids),
        categories=tuple(names),
        category=category,
        models=lay.models,
        dims=lay.dims,
        scores=scores,
        cost_names=lay.cost_names,
        costs=costs,
        source=source,
        prompts=None if lay.text_col is None else tuple(texts),
    )


def _from_csv(text: str, source: str) -> OutcomeTable:
    reader = csv.reader(io.StringIO(text))
    rows: list[tuple[str, list[str]]] = []
    header: list[str] | None = None
    header_at = ""
    start = 1
    try:
        for row in reader:
            where = f"{source}, line {start}"
            start = reader.line_num + 1
            if len(row) <= 1 and not "".join(row).strip():  # a blank line (not blank cells)
                continue
            if header is None:
                header, header_at = [c.strip() for c in row], where
            else:
                rows.append((where, row))
    except csv.Error as exc:
        raise DataFormatError(f"{source}, line {reader.line_num}: {exc}") from None
    if header is None:
        raise DataFormatError(
            f"{source} is empty: expected a header 'prompt_id[,category],MODEL...,MODEL|COST...'"
        )
    return _table(rows, header, _layout(header, header_at), source)


def _from_jsonl(text: str, source: str) -> OutcomeTable:
    header: list[str] | None = None
    header_at = ""
    rows: list[tuple[str, list[object]]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}, line {lineno}"
        try:
            obj = json.loads(line, object_pairs_hook=unique_keys)
        except (ValueError, RecursionError) as exc:  # ValueError: also an integer too long
            raise DataFormatError(f"{where}: not a JSON object ({quoted(str(exc), 200)})") from None
        if not isinstance(obj, dict):
            raise DataFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if header is None:
            header, header_at = list(obj), where
        elif set(obj) != set(header):
            missing = sorted(set(header) - set(obj))
            extra = sorted(set(obj) - set(header))
            raise DataFormatError(
                f"{where}: keys differ from the first row's"
                + (f"; missing {', '.join(map(quoted, missing))}" if missing else "")
                + (f"; unexpected {', '.join(map(quoted, extra))}" if extra else "")
            )
        rows.append((where, [obj[key] for key in header]))
    if header is None:
        raise DataFormatError(f"{source} is empty: expected one JSON object per line")
    return _table(rows, header, _layout(header, header_at), source)


def read_outcomes(text: str, source: str, *, jsonl: bool = False) -> OutcomeTable:
    """Parse an outcome table from text (CSV, or JSON Lines with ``jsonl=True``)."""
    return _from_jsonl(text, source) if jsonl else _from_csv(text, source)


def load_outcomes(path: PathLike) -> OutcomeTable:
    """Read an outcome table from a CSV file, or a JSON Lines file (``.jsonl``/``.ndjson``).

    Parameters
    ----------
    path : str or PathLike

    Returns
    -------
    OutcomeTable

    Raises
    ------
    DataFormatError
        A malformed file: the message names the file, the line and the column.
    OSError
        The file cannot be read.
    """
    source = os.fspath(path)
    text = decode_text(Path(source).read_bytes(), source, "a CSV or JSON Lines file")
    jsonl = Path(source).suffix.lower() in (".jsonl", ".ndjson")
    return read_outcomes(text, source, jsonl=jsonl)


def _packaged(name: str) -> bytes:
    raw = resources.files("msroute.datasets").joinpath("data", name).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != LLMROUTER_SHA256[name]:
        raise DataFormatError(
            f"the packaged file {name} fails its SHA-256 check (got {digest}, expected "
            f"{LLMROUTER_SHA256[name]}): reinstall msroute"
        )
    return raw


def load_llmrouter() -> OutcomeTable:
    """The packaged LLMRouter table: 9 open LLMs graded on 6,108 prompts of 14 tasks.

    Scores are the graded answers of the public LLMRouter data (MIT, ``llmrouter.LICENSE``);
    ``usd`` is list price x an estimated token count (docs: "Routing real LLMs").
    The prompts' texts are not shipped: their hashed n-gram counts are
    (``llmrouter.features.npz``, ``msroute.prompts.features``), so that contexts can be taken
    from the text (``msroute bench llmrouter --contexts text``). Every file is checked against
    its SHA-256 on load.
    """
    from msroute.prompts.features import features_from_bytes

    _packaged("llmrouter.LICENSE")
    text = decode_text(_packaged("llmrouter.csv"), "llmrouter.csv", "a CSV file")
    table = read_outcomes(text, "llmrouter.csv")
    name = "llmrouter.features.npz"
    features = features_from_bytes(_packaged(name), table.prompt_ids, name)
    return dataclasses.replace(table, features=features)


def describe(table: OutcomeTable) -> dict[str, Any]:
    """A JSON-ready summary of a table (recorded with results)."""
    return {
        "source": table.source,
        "sha256": table.digest(),
        "prompts": table.n_prompts,
        "models": list(table.models),
        "categories": list(table.categories),
        "dims": list(table.dims),
        "cost_names": list(table.cost_names),
    }
