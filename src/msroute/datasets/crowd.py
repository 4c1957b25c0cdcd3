"""Crowd-labelling data: parsing, checksums and the annotation tables (the paper's Section 6.1).

The paper's experiments use the TREC 2010 Crowdsourcing Track relevance judgements as
distributed with the SpectralMethodsMeetEM repository: ``trec_crowd.txt`` holds one
annotation per line (``task worker response``) and ``trec_truth.txt`` one gold label per line
(``task gold``). A second public crowd data set in the same format ships too: ``web``, web-page
relevance judgements on five grades (``web_crowd.txt``, ``web_truth.txt``; 176 workers, 2,653
tasks and 15,539 annotations after the join, 139 reliable workers). All packaged files are
checked against their SHA-256 on load, so a pip-installed msroute needs no other file.

``load_crowd`` joins annotations and gold labels on the task id; an annotation is correct
when ``response == gold`` (so binary and multi-class labels both work); a worker's accuracy is
the mean correctness of their annotations; workers with fewer than 5 annotations are unreliable
(TREC: 677 workers, 2,275 tasks, 12,863 annotations, 270 reliable workers). The instances built
from the result are in ``msroute.datasets.instance``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from msroute._validation import FloatArray, IntArray, check_positive_int, quoted, read_only
from msroute.errors import DataFormatError, DataWarning, InvalidTypeError, InvalidValueError

__all__ = [
    "DATASETS",
    "DEFAULT_DATASET",
    "TREC2010_SHA256",
    "WEB_SHA256",
    "CrowdData",
    "check_dataset",
    "decode_text",
    "load_crowd",
]

#: SHA-256 of the packaged TREC 2010 files, checked every time they are loaded.
TREC2010_SHA256: Mapping[str, str] = {
    "trec_crowd.txt": "821141b1e95b1ff516ebccf6869f2ac88ca93035d6991b8039d76275866de402",
    "trec_truth.txt": "405b4ff78e79b912252f19ff68116e71abe3a21c2051c7c701e7a16acbeae3e4",
}

#: SHA-256 of the packaged web relevance files (5 grades), checked every time they are loaded.
WEB_SHA256: Mapping[str, str] = {
    "web_crowd.txt": "5b1ad44cebdcf59d42c83393a7dc3f4aa46746f5428c4caac275350247da6d6f",
    "web_truth.txt": "7ff13173d6ad447e6959fa5226bcbef756ebe34d712eae908de30036824fc94f",
}

#: The data sets that ship with msroute: name -> (title, crowd file, truth file).
DATASETS: Mapping[str, tuple[str, str, str]] = {
    "trec": ("TREC 2010", "trec_crowd.txt", "trec_truth.txt"),
    "web": ("web relevance", "web_crowd.txt", "web_truth.txt"),
}

#: The data set of the paper, used when none is named.
DEFAULT_DATASET = "trec"

#: The paper's reliability threshold: workers with fewer annotations are discarded.
DEFAULT_MIN_ANNOTATIONS = 5

#: How the sorted tasks can be cut into skill dimensions (see ``build_instance``).
SPLITS: tuple[str, ...] = ("round-robin", "contiguous")

_CROWD_COLUMNS = ("task", "worker", "response")
_TRUTH_COLUMNS = ("task", "gold")
#: Any character that cannot appear in a file of ASCII integers separated by whitespace.
_FOREIGN_CHAR = re.compile(r"[^0-9+\-\s]")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = int(np.iinfo(np.int64).max)
_SPACE, _TAB, _NEWLINE, _RETURN, _PLUS, _MINUS, _ZERO, _NINE = b" \t\n\r+-09"

PathLike = str | os.PathLike[str]


# ---------------------------------------------------------------------------- parsing
def _parse_table(text: str, source: str, columns: tuple[str, ...]) -> tuple[IntArray, IntArray]:
    """Parse whitespace-separated integer rows.

    Returns the table, shape (n, len(columns)), and the 1-based line number of each row.
    Blank lines are skipped; anything else that is not exactly ``len(columns)`` ASCII integers
    raises ``DataFormatError`` naming ``source`` and the line.
    """
    fast = _plain_table(text, len(columns))
    if fast is not None:
        return fast
    ncol = len(columns)
    layout = " ".join(columns)
    rows: list[list[str]] = []
    linenos: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != ncol:
            raise DataFormatError(
                f"{source}, line {lineno}: expected {ncol} whitespace-separated integers "
                f"({layout}), got {len(fields)} field(s): {quoted(line.strip())}"
            )
        rows.append(fields)
        linenos.append(lineno)
    if not rows:
        raise DataFormatError(f"{source} is empty: no data line (expected rows '{layout}')")
    table: IntArray | None = None
    if _FOREIGN_CHAR.search(text) is None:
        try:
            table = np.array(rows, dtype=np.int64)
        except (ValueError, OverflowError):
            table = None
    if table is None:  # locate the first bad field, then report it
        for fields, lineno in zip(rows, linenos, strict=True):
            for name, value in zip(columns, fields, strict=True):
                if _INTEGER.fullmatch(value) is None:
                    raise DataFormatError(
                        f"{source}, line {lineno}: {name} must be an integer, got {quoted(value)}"
                    )
                # Length first: int() of thousands of digits raises a bare ValueError.
                if len(value.lstrip("+-").lstrip("0")) > 19 or abs(int(value)) > _INT64_MAX:
                    raise DataFormatError(
                        f"{source}, line {lineno}: {name} {quoted(value)} does not fit in 64 bits"
                    )
        raise DataFormatError(f"{source}: could not read the integers")  # pragma: no cover
    return table, np.asarray(linenos, dtype=np.int64)


def _plain_table(text: str, ncol: int) -> tuple[IntArray, IntArray] | None:
    """``_parse_table``'s result, read in bulk, when the text is plainly well formed: ASCII
    lines of digits, signs, spaces and tabs ended by LF or CRLF, each blank or exactly ``ncol``
    integers of at most 18 digits (which fit in 64 bits), every sign leading its digits.
    None otherwise, even for some valid files: ``_parse_table`` then reads the text line by
    line, and names the problem of a malformed one."""
    if not text.isascii():
        return None
    raw = text.encode("ascii")
    chars = np.frombuffer(raw, dtype=np.uint8)
    newline = chars == _NEWLINE
    blank = (chars == _SPACE) | (chars == _TAB) | newline
    returns = np.flatnonzero(chars == _RETURN)  # only in CRLF (a lone CR ends a line)
    if returns.size and (returns[-1] + 1 == chars.size or not newline[returns + 1].all()):
        return None
    blank[returns] = True
    sign = (chars == _PLUS) | (chars == _MINUS)
    if not (blank | sign | ((chars >= _ZERO) & (chars <= _NINE))).all():
        return None
    before = np.concatenate([[True], blank[:-1]])  # a field starts after a blank
    after = np.concatenate([blank[1:], [True]])
    starts = np.flatnonzero(~blank & before)
    ends = np.flatnonzero(~blank & after) + 1
    if not starts.size or (ends - starts - sign[starts] > 18).any():
        return None
    if (sign & ~before).any() or (sign & after).any():  # a sign amid a field or alone
        return None
    fields_before = np.searchsorted(starts, np.flatnonzero(newline))  # of each line end
    per_line = np.diff(fields_before, prepend=0, append=starts.size)
    if ((per_line != 0) & (per_line != ncol)).any():
        return None
    values = np.fromstring(raw, dtype=np.int64, sep=" ")  # any whitespace separates
    lines = np.flatnonzero(per_line) + 1
    return values.reshape(lines.size, ncol), lines.astype(np.int64)


def _unique_annotations(crowd: IntArray, lines: IntArray, source: str) -> IntArray:
    """The annotations with exact duplicates counted once; conflicting duplicates are an error.

    An annotation is one worker's label of one task: the same (task, worker, response) row
    twice counts once (with a ``DataWarning`` saying how many rows were
    dropped), and the same worker giving one task two different labels raises
    ``DataFormatError`` naming both lines. Rows keep their file order.
    """
    order = np.lexsort((lines, crowd[:, 1], crowd[:, 0]))
    srt = crowd[order]
    same = np.all(srt[1:, :2] == srt[:-1, :2], axis=1)
    clash = np.flatnonzero(same & (srt[1:, 2] != srt[:-1, 2]))
    if clash.size:
        j = int(clash[0])
        task, worker = int(srt[j, 0]), int(srt[j, 1])
        raise DataFormatError(
            f"{source}, line {lines[order[j + 1]]}: worker {worker} labels task {task} "
            f"{srt[j + 1, 2]}, but line {lines[order[j]]} gives it {srt[j, 2]} (conflicting "
            "duplicate annotations; keep one of the two lines)"
        )
    dropped = order[1:][same]
    if dropped.size == 0:
        return crowd
    first = int(lines[dropped.min()])
    warnings.warn(
        f"{source}: {dropped.size} exact duplicate annotation(s) (same task, worker and label) "
        f"counted once; the first repeat is line {first}",
        DataWarning,
        stacklevel=3,
    )
    keep = np.ones(crowd.shape[0], dtype=bool)
    keep[dropped] = False
    return crowd[keep]


def _read_text(path: PathLike) -> tuple[str, str]:
    """Text of a user file and the name used for it in messages."""
    source = os.fspath(path)
    raw = Path(source).read_bytes()  # OSError propagates
    return decode_text(raw, source), source


def decode_text(raw: bytes, source: str, expected: str = "whitespace-separated integers") -> str:
    """A user file's bytes as text (UTF-8, an optional BOM dropped); a
    ``DataFormatError`` naming the file, the byte and what was
    ``expected`` otherwise."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataFormatError(
            f"{source} is not a text file (byte {exc.start} is not UTF-8); expected {expected}"
        ) from None


def check_dataset(dataset: str) -> str:
    """``dataset`` if it names a packaged data set, else a ValueError listing them."""
    if dataset not in DATASETS:
        raise InvalidValueError(
            f"dataset == {dataset!r}, must be one of the packaged data sets: {', '.join(DATASETS)}"
        )
    return dataset


def _read_packaged(name: str, title: str) -> tuple[str, str]:
    """Text of a packaged file after its SHA-256 check."""
    source = f"{name} (packaged {title} data)"
    expected = {**TREC2010_SHA256, **WEB_SHA256}[name]  # read now: tests patch them
    raw = resources.files("msroute.datasets").joinpath("data", name).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != expected:
        raise DataFormatError(
            f"{source} fails its SHA-256 check (got {digest}, expected "
            f"{expected}): the installation is damaged; reinstall msroute"
        )
    return decode_text(raw, source), source


def _join(
    crowd: IntArray,
    truth: IntArray,
    truth_lines: IntArray,
    crowd_source: str,
    truth_source: str,
    source: str,
) -> CrowdData:
    """Inner join of annotations and gold labels on the task id."""
    order = np.argsort(truth[:, 0], kind="stable")
    tasks, gold, lines = truth[order, 0], truth[order, 1], truth_lines[order]
    dup = np.flatnonzero(tasks[1:] == tasks[:-1])
    clash = dup[gold[dup + 1] != gold[dup]]
    if clash.size:
        j = int(clash[0])
        raise DataFormatError(
            f"{truth_source}, line {lines[j + 1]}: task {tasks[j]} has gold label {gold[j + 1]} "
            f"but line {lines[j]} gives it {gold[j]}"
        )
    keep = np.concatenate([[True], tasks[1:] != tasks[:-1]])
    tasks, gold = tasks[keep], gold[keep]
    pos = np.minimum(np.searchsorted(tasks, crowd[:, 0]), tasks.size - 1)
    found = tasks[pos] == crowd[:, 0]
    if not found.any():
        raise DataFormatError(
            f"no task of {crowd_source} has a gold label in {truth_source}: the inner join on "
            "task id is empty (are the files swapped?)"
        )
    joined = crowd[found]
    return CrowdData(
        ann_task=joined[:, 0],
        ann_worker=joined[:, 1],
        ann_response=joined[:, 2],
        ann_gold=gold[pos[found]],
        source=source,
    )


@functools.lru_cache(maxsize=len(DATASETS))
def _load_packaged(dataset: str) -> CrowdData:
    title, crowd_name, truth_name = DATASETS[dataset]
    crowd_text, crowd_source = _read_packaged(crowd_name, title)
    truth_text, truth_source = _read_packaged(truth_name, title)
    crowd = _unique_annotations(
        *_parse_table(crowd_text, crowd_source, _CROWD_COLUMNS), crowd_source
    )
    truth, truth_lines = _parse_table(truth_text, truth_source, _TRUTH_COLUMNS)
    source = f"{title} (packaged {crowd_name} + {truth_name})"
    return _join(crowd, truth, truth_lines, crowd_source, truth_source, source)


def load_crowd(
    crowd_path: PathLike | None = None,
    truth_path: PathLike | None = None,
    *,
    dataset: str | None = None,
) -> CrowdData:
    """Load crowd annotations joined with gold labels (Section 6.1).

    Parameters
    ----------
    crowd_path : str or path, optional
        Annotations, one per line: ``task worker response`` (whitespace-separated integers).
    truth_path : str or path, optional
        Gold labels, one per line: ``task gold``.
        Give both paths, or neither for a packaged data set (SHA-256 checked).
    dataset : {"trec", "web"}, optional
        Which packaged data set to load when no path is given (default "trec", the paper's
        TREC 2010 files; "web" is the five-grade web relevance set). Not with paths.

    Returns
    -------
    CrowdData
        The annotations whose task has a gold label (inner join on the task id). Blank lines
        are skipped; a task listed twice in ``truth_path`` with the same label counts once;
        an annotation repeated exactly (same task, worker and label) counts once, with a
        ``DataWarning`` saying how many repeats were dropped.

    Raises
    ------
    DataFormatError
        A field that is not an integer, a wrong number of fields, an empty file, a task with
        two different gold labels, a worker giving one task two different labels, or no task
        in common; the message names the file and line(s).
    OSError
        A file cannot be read.

    Examples
    --------
    >>> data = load_crowd()
    >>> data.n_workers, data.n_tasks, data.n_annotations
    (677, 2275, 12863)
    >>> len(data.reliable_workers())
    270
    >>> web = load_crowd(dataset="web")
    >>> web.n_workers, web.n_tasks, web.n_annotations, len(web.reliable_workers())
    (176, 2653, 15539, 139)
    """
    if crowd_path is None and truth_path is None:
        return _load_packaged(check_dataset(DEFAULT_DATASET if dataset is None else dataset))
    if dataset is not None:
        raise InvalidValueError(
            f"dataset == {dataset!r} names packaged data: give it or crowd_path and "
            "truth_path, not both"
        )
    if crowd_path is None or truth_path is None:
        missing = "crowd_path" if crowd_path is None else "truth_path"
        raise InvalidValueError(
            f"{missing} is missing: give both crowd_path and truth_path, or neither for the "
            "packaged data"
        )
    crowd_text, crowd_source = _read_text(crowd_path)
    truth_text, truth_source = _read_text(truth_path)
    crowd = _unique_annotations(
        *_parse_table(crowd_text, crowd_source, _CROWD_COLUMNS), crowd_source
    )
    truth, truth_lines = _parse_table(truth_text, truth_source, _TRUTH_COLUMNS)
    source = f"{crowd_source} + {truth_source}"
    return _join(crowd, truth, truth_lines, crowd_source, truth_source, source)


# ---------------------------------------------------------------------------- CrowdData
def _int_vector(value: ArrayLike, name: str) -> IntArray:
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise InvalidValueError(f"{name} must be 1-d, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidTypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return read_only(arr.astype(np.int64, copy=True))


@dataclass(frozen=True, eq=False)
class CrowdData:
    """Annotations with their gold labels, and per-worker statistics (Section 6.1).

    Built by ``load_crowd``; it can also be made from in-memory arrays (already joined:
    every annotation has a gold label). All arrays are read-only.

    Parameters
    ----------
    ann_task, ann_worker, ann_response, ann_gold : array_like of int, shape (A,)
        Task id, worker id, response and the task's gold label of each annotation.
    source : str, optional
        Where the data comes from (used in messages and reports).

    Attributes
    ----------
    task_ids : ndarray of int, shape (n_tasks,)
        Sorted distinct task ids.
    worker_ids : ndarray of int, shape (n_workers,)
        Sorted distinct worker ids.
    accuracy : ndarray of float, shape (n_workers,)
        Mean correctness of each worker's annotations, aligned with ``worker_ids``.
    annotation_counts : ndarray of int, shape (n_workers,)
        Number of annotations of each worker, aligned with ``worker_ids``.

    Examples
    --------
    >>> d = CrowdData([1, 2, 2], [7, 7, 9], [0, 1, 0], [0, 1, 1])
    >>> d.n_workers, d.n_tasks, d.n_annotations
    (2, 2, 3)
    >>> d.accuracy.tolist(), d.annotation_counts.tolist()
    ([1.0, 0.0], [2, 1])
    >>> d.reliable_workers(min_annotations=2).tolist()
    [7]
    """

    ann_task: IntArray
    ann_worker: IntArray
    ann_response: IntArray
    ann_gold: IntArray
    source: str = "in-memory data"
    task_ids: IntArray = field(init=False, repr=False)
    worker_ids: IntArray = field(init=False, repr=False)
    accuracy: FloatArray = field(init=False, repr=False)
    annotation_counts: IntArray = field(init=False, repr=False)
    _worker_pos: IntArray = field(init=False, repr=False)
    _task_rank: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        arrays = {}
        for name in ("ann_task", "ann_worker", "ann_response", "ann_gold"):
            arrays[name] = _int_vector(getattr(self, name), name)
            object.__setattr__(self, name, arrays[name])
        sizes = {a.size for a in arrays.values()}
        if len(sizes) != 1:
            raise InvalidValueError(
                "ann_task, ann_worker, ann_response and ann_gold must have the same length, got "
                + ", ".join(str(a.size) for a in arrays.values())
            )
        if not sizes.pop():
            raise DataFormatError(f"{self.source} has no annotation")
        worker_ids, worker_pos, counts = np.unique(
            self.ann_worker, return_inverse=True, return_counts=True
        )
        task_ids, task_rank = np.unique(self.ann_task, return_inverse=True)
        hits = np.bincount(worker_pos, weights=self.correct, minlength=worker_ids.size)
        derived = {
            "task_ids": task_ids,
            "worker_ids": worker_ids,
            "accuracy": hits / counts,
            "annotation_counts": counts.astype(np.int64),
            "_worker_pos": worker_pos.astype(np.int64),
            "_task_rank": task_rank.astype(np.int64),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, read_only(value))

    @property
    def correct(self) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Whether each annotation is correct (``response == gold``), shape (A,)."""
        return np.asarray(self.ann_response == self.ann_gold)

    @property
    def n_workers(self) -> int:
        """Number of distinct workers."""
        return int(self.worker_ids.size)

    @property
    def n_tasks(self) -> int:
        """Number of distinct tasks (all with a gold label)."""
        return int(self.task_ids.size)

    @property
    def n_annotations(self) -> int:
        """Number of annotations."""
        return int(self.ann_task.size)

    def __repr__(self) -> str:
        return (
            f"CrowdData(n_workers={self.n_workers}, n_tasks={self.n_tasks}, "
            f"n_annotations={self.n_annotations}, source={self.source!r})"
        )

    def reliable_workers(self, min_annotations: int = DEFAULT_MIN_ANNOTATIONS) -> IntArray:
        """Sorted ids of the workers with at least ``min_annotations`` annotations.

        Returns
        -------
        ndarray of int, shape (n_reliable,)
        """
        m = check_positive_int(min_annotations, "min_annotations", minimum=0)
        return read_only(self.worker_ids[self.annotation_counts >= m])

    def worker_index(self, workers: Sequence[int] | ArrayLike) -> IntArray:
        """Positions of ``workers`` in ``worker_ids`` (for the per-worker arrays).

        Raises
        ------
        DataFormatError
            The list is empty, holds an id twice, or an id absent from the data.
        TypeError
            The list holds something other than integers.
        """
        ids = np.asarray(workers)
        if ids.ndim != 1:
            raise DataFormatError(f"the worker list must be 1-d, got shape {ids.shape}")
        if ids.size == 0:
            raise DataFormatError("the worker list is empty")
        if not np.issubdtype(ids.dtype, np.integer):
            raise InvalidTypeError(f"worker ids must be integers, got {ids.tolist()!r}")
        uniq, counts = np.unique(ids, return_counts=True)
        if np.any(counts > 1):
            raise DataFormatError(
                f"the worker list repeats id(s) {uniq[counts > 1].tolist()}; each worker can "
                "appear once"
            )
        pos = np.minimum(np.searchsorted(self.worker_ids, ids), self.worker_ids.size - 1)
        unknown = ids[self.worker_ids[pos] != ids]
        if unknown.size:
            shown = unknown[:10].tolist()
            more = f" and {unknown.size - 10} more" if unknown.size > 10 else ""
            raise DataFormatError(
                f"unknown worker id(s) {shown}{more}: not in {self.source} "
                f"(ids range from {self.worker_ids[0]} to {self.worker_ids[-1]})"
            )
        return pos.astype(np.int64)

    def summary(self, min_annotations: int = DEFAULT_MIN_ANNOTATIONS) -> dict[str, Any]:
        """Counts and statistics as a JSON-ready dict (``msroute data stats``)."""
        reliable = self.reliable_workers(min_annotations)
        rel_acc = self.accuracy[np.isin(self.worker_ids, reliable)]
        return {
            "source": self.source,
            "workers": self.n_workers,
            "tasks": self.n_tasks,
            "annotations": self.n_annotations,
            "min_annotations": int(min_annotations),
            "reliable_workers": int(reliable.size),
            "labels": np.unique(self.ann_gold).tolist(),
            "correct_fraction": float(self.correct.mean()),
            "reliable_mean_accuracy": float(rel_acc.mean()) if rel_acc.size else None,
            "max_annotations_per_worker": int(self.annotation_counts.max()),
        }
