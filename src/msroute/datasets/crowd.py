"""Crowd-labelling data and the MSR instances built from it (the paper's Section 6.1).

The paper's experiments use the TREC 2010 Crowdsourcing Track relevance judgements as
distributed with the SpectralMethodsMeetEM repository: ``trec_crowd.txt`` holds one
annotation per line (``task worker response``) and ``trec_truth.txt`` one gold label per line
(``task gold``). A second public crowd data set in the same format ships too: ``web``, web-page
relevance judgements on five grades (``web_crowd.txt``, ``web_truth.txt``; 176 workers, 2,653
tasks and 15,539 annotations after the join, 139 reliable workers). All packaged files are
checked against their SHA-256 on load, so a pip-installed msroute needs no other file.

Section 6.1, as implemented here:

* inner join of annotations and gold labels on the task id; an annotation is correct when
  ``response == gold`` (so binary and multi-class labels both work); a worker's accuracy is the
  mean correctness of their annotations; workers with fewer than 5 annotations are unreliable
  (TREC: 677 workers, 2,275 tasks, 12,863 annotations, 270 reliable workers);
* a pool of K workers, drawn uniformly without replacement from the reliable ones
  (:func:`sample_instance`) or given explicitly (:func:`build_instance`);
* the sorted task ids are split round-robin into N groups (the j-th task goes to group
  ``j mod N``); ``V_base[n, i]`` is worker i's accuracy on group n's tasks, imputed with the
  worker's overall accuracy when they have no annotation in group n;
* costs, computed within the pool: workload = annotation count / the pool's largest count, and
  an expert flag = 1 for the pool's ``n_flagged`` (10) most accurate workers, ties going to the
  lower worker id.

Optionally (``shrinkage="eb"``, off for the paper's instance) every accuracy is an
empirical-Bayes posterior mean instead of a raw hit rate, in two levels fitted to the pool's
annotation counts: a worker's accuracy is shrunk toward the pool's mean, and their accuracy on a
task group toward their own shrunk accuracy (:func:`fit_beta_prior`,
:func:`fit_beta_strength`), so that a worker with 5 of 5 gold answers right no longer counts as
a perfect expert, nor one with 1 of 1 in a group as perfect on that group.
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

from msroute._validation import FloatArray, IntArray, check_positive_int, quoted
from msroute.errors import DataFormatError, DataWarning, InvalidTypeError, InvalidValueError

__all__ = [
    "DATASETS",
    "TREC2010_SHA256",
    "WEB_SHA256",
    "CrowdData",
    "Instance",
    "build_instance",
    "fit_beta_prior",
    "fit_beta_strength",
    "load_crowd",
    "sample_instance",
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

#: How the sorted tasks can be cut into skill dimensions (see :func:`build_instance`).
SPLITS: tuple[str, ...] = ("round-robin", "contiguous")

_CROWD_COLUMNS = ("task", "worker", "response")
_TRUTH_COLUMNS = ("task", "gold")
#: Any character that cannot appear in a file of ASCII integers separated by whitespace.
_FOREIGN_CHAR = re.compile(r"[^0-9+\-\s]")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = int(np.iinfo(np.int64).max)

PathLike = str | os.PathLike[str]


def _readonly(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    arr.setflags(write=False)
    return arr


# ---------------------------------------------------------------------------- parsing
def _parse_table(text: str, source: str, columns: tuple[str, ...]) -> tuple[IntArray, IntArray]:
    """Parse whitespace-separated integer rows.

    Returns the table, shape (n, len(columns)), and the 1-based line number of each row.
    Blank lines are skipped; anything else that is not exactly ``len(columns)`` ASCII integers
    raises :class:`DataFormatError` naming ``source`` and the line.
    """
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


def _unique_annotations(crowd: IntArray, lines: IntArray, source: str) -> IntArray:
    """The annotations with exact duplicates counted once; conflicting duplicates are an error.

    An annotation is one worker's label of one task: the same (task, worker, response) row
    twice counts once (with a :class:`~msroute.errors.DataWarning` saying how many rows were
    dropped), and the same worker giving one task two different labels raises
    :class:`DataFormatError` naming both lines. Rows keep their file order.
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
    return _decode(raw, source), source


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataFormatError(
            f"{source} is not a text file (byte {exc.start} is not UTF-8); expected "
            "whitespace-separated integers"
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
    return _decode(raw, source), source


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
        :class:`~msroute.errors.DataWarning` saying how many repeats were dropped.

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
    return _readonly(arr.astype(np.int64, copy=True))


@dataclass(frozen=True, eq=False)
class CrowdData:
    """Annotations with their gold labels, and per-worker statistics (Section 6.1).

    Built by :func:`load_crowd`; it can also be made from in-memory arrays (already joined:
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
            object.__setattr__(self, name, _readonly(value))

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
        return _readonly(self.worker_ids[self.annotation_counts >= m])

    def worker_index(self, workers: Sequence[int] | ArrayLike) -> IntArray:
        """Positions of ``workers`` in :attr:`worker_ids` (for the per-worker arrays).

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


# ---------------------------------------------------------------------------- Instance
COST_NAMES: tuple[str, str] = ("workload", "expert")


@dataclass(frozen=True, eq=False)
class Instance:
    """One MSR instance built from crowd data: a pool of K workers over N skill dimensions.

    Parameters
    ----------
    workers : tuple of int, length K
        Worker ids; column i of every array is ``workers[i]``.
    skills_base : ndarray, shape (N, K)
        ``V_base`` of Section 6.1, entries in [0, 1].
    costs : ndarray, shape (K, 2)
        Cost vectors ``c_i`` = (workload, expert flag).
    accuracy : ndarray, shape (K,)
        Overall accuracy of each worker.
    annotations : ndarray of int, shape (K,)
        Annotation count of each worker.
    n_flagged : int
        Number of workers flagged as experts.
    cost_names : tuple of str
        Names of the cost coordinates, ``("workload", "expert")``.
    source : str
        The data the instance comes from.
    prior : (float, float, float) or None
        ``(a, b, t)`` of ``build_instance(shrinkage="eb")``: the workers' Beta(a, b) prior and
        the groups' strength t; None for raw hit rates.
    """

    workers: tuple[int, ...]
    skills_base: FloatArray
    costs: FloatArray
    accuracy: FloatArray
    annotations: IntArray
    n_flagged: int
    cost_names: tuple[str, ...] = COST_NAMES
    source: str = ""
    prior: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        workers = tuple(int(w) for w in self.workers)
        k = len(workers)
        skills = np.array(self.skills_base, dtype=np.float64)
        costs = np.array(self.costs, dtype=np.float64)
        accuracy = np.array(self.accuracy, dtype=np.float64)
        annotations = np.array(self.annotations, dtype=np.int64)
        names = tuple(str(n) for n in self.cost_names)
        if skills.ndim != 2 or skills.shape[1] != k or skills.shape[0] < 1:
            raise InvalidValueError(f"skills_base must have shape (N, {k}), got {skills.shape}")
        if costs.shape != (k, len(names)):
            raise InvalidValueError(f"costs must have shape ({k}, {len(names)}), got {costs.shape}")
        for name, arr in (("accuracy", accuracy), ("annotations", annotations)):
            if arr.shape != (k,):
                raise InvalidValueError(f"{name} must have shape ({k},), got {arr.shape}")
        object.__setattr__(self, "workers", workers)
        object.__setattr__(self, "skills_base", _readonly(skills))
        object.__setattr__(self, "costs", _readonly(costs))
        object.__setattr__(self, "accuracy", _readonly(accuracy))
        object.__setattr__(self, "annotations", _readonly(annotations))
        object.__setattr__(self, "n_flagged", int(self.n_flagged))
        object.__setattr__(self, "cost_names", names)
        if self.prior is not None:
            a, b, t = (float(x) for x in self.prior)
            object.__setattr__(self, "prior", (a, b, t))

    @property
    def n_dims(self) -> int:
        """Number of skill dimensions N."""
        return int(self.skills_base.shape[0])

    @property
    def n_experts(self) -> int:
        """Number of experts K in the pool."""
        return len(self.workers)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; :meth:`from_dict` rebuilds the instance exactly."""
        return {
            "workers": list(self.workers),
            "n_dims": self.n_dims,
            "n_experts": self.n_experts,
            "n_flagged": self.n_flagged,
            "cost_names": list(self.cost_names),
            "skills_base": self.skills_base.tolist(),
            "costs": self.costs.tolist(),
            "accuracy": self.accuracy.tolist(),
            "annotations": self.annotations.tolist(),
            "source": self.source,
            "prior": None if self.prior is None else list(self.prior),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Instance:
        """Inverse of :meth:`to_dict` (the derived ``n_dims`` and ``n_experts`` are ignored)."""
        return cls(
            workers=tuple(d["workers"]),
            skills_base=np.asarray(d["skills_base"], dtype=np.float64),
            costs=np.asarray(d["costs"], dtype=np.float64),
            accuracy=np.asarray(d["accuracy"], dtype=np.float64),
            annotations=np.asarray(d["annotations"], dtype=np.int64),
            n_flagged=int(d["n_flagged"]),
            cost_names=tuple(d.get("cost_names", COST_NAMES)),
            source=str(d.get("source", "")),
            prior=None if d.get("prior") is None else tuple(d["prior"]),
        )


#: Lower bound of the fitted intra-class correlation ``rho = 1 / (a + b + 1)`` (see
#: :func:`fit_beta_strength`): no overdispersion at all would mean an infinitely strong prior.
_RHO_MIN = 1e-6


def fit_beta_strength(hits: ArrayLike, trials: ArrayLike, groups: ArrayLike | None = None) -> float:
    """Empirical-Bayes strength ``a + b`` of a Beta prior of binomial counts (method of moments).

    Unit ``j`` has ``hits[j]`` successes in ``trials[j]`` trials; its success rate is drawn from
    a Beta prior of strength ``a + b`` around its group's mean (one group when ``groups`` is
    None). The strength comes from the intra-class correlation ``rho = 1 / (a + b + 1)``: in
    group g (``J_g`` units with a trial, ``n_g`` trials, pooled rate ``p_g``) the weighted sum
    of squares ``S_g = sum_j n_j (x_j - p_g)^2`` (``x_j = hits_j / n_j``) has expectation
    ``p_g (1 - p_g) [(J_g - 1) + rho (n_g - sum_j n_j^2 / n_g - (J_g - 1))]`` under the
    beta-binomial model (Kleinman 1973), so, pooled over the groups::

        rho = sum_g (S_g - p_g (1 - p_g) (J_g - 1))
              / sum_g p_g (1 - p_g) (n_g - sum_j n_j^2 / n_g - (J_g - 1))

    clipped to ``[1e-6, 1]``: no overdispersion at all gives the strongest prior
    (``a + b = 1e6 - 1``), ``rho = 1`` none (``a + b = 0``).

    Parameters
    ----------
    hits, trials : array_like, shape (J,)
        Successes and trials of each unit (``0 <= hits <= trials``); units with no trial are
        ignored.
    groups : array_like of int, shape (J,), optional
        Group of each unit; each group has its own prior mean, all share the strength.

    Returns
    -------
    float
        ``a + b``.

    Raises
    ------
    ValueError
        Shapes differ, hits outside ``[0, trials]``, or no group has two units with a trial and
        a pooled rate strictly between 0 and 1 (nothing to fit).

    Examples
    --------
    >>> round(fit_beta_strength([1, 3, 5], [2, 4, 5]), 4)
    7.2199
    """
    h = np.asarray(hits, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    g = np.zeros(h.shape, dtype=np.int64) if groups is None else np.asarray(groups)
    if h.ndim != 1 or h.shape != n.shape or h.shape != g.shape:
        raise InvalidValueError(
            f"hits, trials and groups must be 1-d of one shape, got {h.shape}, {n.shape}, {g.shape}"
        )
    if np.any(n < 0) or np.any(h < 0) or np.any(h > n):
        raise InvalidValueError("hits must lie in [0, trials] and trials must be >= 0")
    used = n > 0
    h, n, g = h[used], n[used], g[used]
    _, g = np.unique(g, return_inverse=True)
    units = np.bincount(g).astype(np.float64)
    total = np.bincount(g, weights=n)
    p = np.bincount(g, weights=h) / total
    pq = p * (1.0 - p)
    s = np.bincount(g, weights=n * (h / n - p[g]) ** 2)
    num = float(np.sum(s - pq * (units - 1.0)))
    den = float(np.sum(pq * (total - np.bincount(g, weights=n**2) / total - (units - 1.0))))
    if not den > 0:
        raise InvalidValueError(
            "cannot fit a Beta prior: no group has two units with a trial and a pooled rate "
            "strictly between 0 and 1"
        )
    rho = min(max(num / den, _RHO_MIN), 1.0)
    return 1.0 / rho - 1.0


def fit_beta_prior(hits: ArrayLike, trials: ArrayLike) -> tuple[float, float]:
    """Empirical-Bayes Beta(a, b) prior of binomial counts: mean the pooled rate
    ``sum hits / sum trials``, strength :func:`fit_beta_strength`.

    The posterior mean of unit ``j`` is ``(hits_j + a) / (trials_j + a + b)``.

    Examples
    --------
    >>> a, b = fit_beta_prior([1, 3, 5], [2, 4, 5])
    >>> round(a / (a + b), 4), round(a + b, 4)
    (0.8182, 7.2199)
    """
    strength = fit_beta_strength(hits, trials)
    p = float(np.sum(np.asarray(hits, dtype=np.float64))) / float(
        np.sum(np.asarray(trials, dtype=np.float64))
    )
    return p * strength, (1.0 - p) * strength


def build_instance(
    data: CrowdData,
    workers: Sequence[int] | ArrayLike,
    n_dims: int,
    n_flagged: int = 10,
    *,
    split: str = "round-robin",
    shrinkage: str | None = None,
) -> Instance:
    """Build the instance of Section 6.1 for an explicit pool of workers.

    Parameters
    ----------
    data : CrowdData
    workers : sequence of int, length K
        Worker ids; the order is kept (column i is ``workers[i]``).
    n_dims : int
        N, the number of task groups (skill dimensions); at most ``data.n_tasks``.
    n_flagged : int, default 10
        How many of the pool's most accurate workers get the expert flag (ties go to the lower
        worker id); at most K.
    split : {"round-robin", "contiguous"}, default "round-robin"
        How the sorted tasks are cut into N groups: the paper's round-robin (task j goes to
        group ``j mod N``, so every group is a uniform sample of the tasks), or N contiguous
        blocks of the sorted ids (task j goes to group ``j N // n_tasks``; in TREC 2010 the ids
        run topic by topic, so blocks keep related tasks together and the groups differ).
    shrinkage : {None, "eb"}, default None
        None (the paper's): accuracies are raw hit rates. ``"eb"``: two-level empirical Bayes,
        fitted to the pool's counts. (1) Worker i's overall accuracy is the posterior mean
        ``mu_i = (H_i + a) / (A_i + a + b)`` (``H_i`` right of ``A_i`` gold answers) under the
        Beta(a, b) that :func:`fit_beta_prior` fits to the K workers' counts (mean: the pool's
        pooled accuracy). (2) Their accuracy on group n is ``(h_ni + t mu_i) / (a_ni + t)``
        with ``t`` the strength :func:`fit_beta_strength` fits to the (worker, group) counts
        around each worker's own rate (a group with no answer gets ``mu_i``). On the paper's
        round-robin groups the groups are random samples of the tasks, so ``t`` comes out large
        and a worker's groups differ little. The expert flag ranks the shrunk ``mu_i``.

    Returns
    -------
    Instance
        ``skills_base`` (N, K): the tasks grouped as ``split`` says (the groups are over all
        tasks of ``data``); entry ``[n, i]`` is worker i's accuracy on
        group n, or their overall accuracy if they have no annotation there. ``costs`` (K, 2):
        workload = annotation count / the pool's largest count, and the expert flag.
        With ``shrinkage``, ``prior`` holds ``(a, b, t)``.

    Raises
    ------
    DataFormatError
        The worker list is empty, repeats an id or holds an id absent from ``data``.

    Examples
    --------
    >>> d = CrowdData([1, 2, 3, 1], [7, 7, 7, 9], [0, 1, 1, 0], [0, 1, 0, 0])
    >>> inst = build_instance(d, [9, 7], n_dims=2, n_flagged=1)
    >>> inst.skills_base.tolist()  # tasks 1, 3 -> group 0; task 2 -> group 1
    [[1.0, 0.5], [1.0, 1.0]]
    >>> inst.costs.tolist()
    [[0.3333333333333333, 1.0], [1.0, 0.0]]
    """
    if not isinstance(data, CrowdData):
        raise InvalidTypeError(
            f"data must be a CrowdData (see load_crowd), got {type(data).__name__}"
        )
    pos = data.worker_index(workers)
    ids = data.worker_ids[pos]
    k = int(ids.size)
    n = check_positive_int(n_dims, "n_dims")
    if n > data.n_tasks:
        raise InvalidValueError(
            f"n_dims == {n}, must be <= the number of tasks ({data.n_tasks}) so that every "
            "task group is non-empty"
        )
    if split not in SPLITS:
        raise InvalidValueError(f"split == {split!r}, must be one of {', '.join(SPLITS)}")
    flagged = check_positive_int(n_flagged, "n_flagged", minimum=0)
    if flagged > k:
        raise InvalidValueError(f"n_flagged == {flagged}, must be <= the pool size K = {k}")

    column = np.full(data.n_workers, -1, dtype=np.int64)
    column[pos] = np.arange(k)
    col = column[data._worker_pos]
    mine = col >= 0
    rank = data._task_rank[mine]
    group = rank % n if split == "round-robin" else rank * n // data.n_tasks
    cell = group * k + col[mine]
    hits = np.bincount(cell, weights=data.correct[mine], minlength=n * k).reshape(n, k)
    seen = np.bincount(cell, minlength=n * k).reshape(n, k)
    accuracy = data.accuracy[pos]
    annotations = data.annotation_counts[pos]
    prior: tuple[float, float, float] | None = None
    if shrinkage is not None:
        if shrinkage != "eb":
            raise InvalidValueError(f"shrinkage == {shrinkage!r}, must be None or 'eb'")
        worker_hits = hits.sum(axis=0)  # every task is in one group: the worker's totals
        a, b = fit_beta_prior(worker_hits, annotations)
        accuracy = (worker_hits + a) / (annotations + a + b)
        t = fit_beta_strength(hits.ravel(), seen.ravel(), groups=np.tile(np.arange(k), n))
        skills = (hits + t * accuracy[None, :]) / (seen + t)
        prior = (a, b, t)
    else:
        skills = np.where(seen > 0, hits / np.maximum(seen, 1), accuracy[None, :])

    workload = annotations / annotations.max()
    expert = np.zeros(k)
    expert[np.lexsort((ids, -accuracy))[:flagged]] = 1.0
    return Instance(
        workers=tuple(int(w) for w in ids),
        skills_base=skills,
        costs=np.column_stack([workload, expert]),
        accuracy=accuracy,
        annotations=annotations,
        n_flagged=flagged,
        source=data.source,
        prior=prior,
    )


def sample_instance(
    data: CrowdData,
    n_experts: int = 50,
    n_dims: int = 3,
    seed: int | np.random.SeedSequence | np.random.Generator | None = None,
    *,
    n_flagged: int = 10,
    min_annotations: int = DEFAULT_MIN_ANNOTATIONS,
    split: str = "round-robin",
    shrinkage: str | None = None,
) -> Instance:
    """Draw a pool of workers and build its instance, as each seed of Section 6.1 does.

    The pool is ``n_experts`` workers drawn uniformly without replacement from
    ``data.reliable_workers(min_annotations)``; its columns are in increasing worker id (so
    index ties in a policy go to the lower id, like the expert flag's).

    Parameters
    ----------
    data : CrowdData
    n_experts : int, default 50
        K, the pool size.
    n_dims : int, default 3
        N, the number of skill dimensions.
    seed : int, SeedSequence or Generator, optional
        The instance stream of a run; the same seed gives the same pool.
    n_flagged : int, default 10
    min_annotations : int, default 5
    split : {"round-robin", "contiguous"}, default "round-robin"
        How tasks are grouped (see :func:`build_instance`).
    shrinkage : {None, "eb"}, default None
        Empirical-Bayes shrinkage of the accuracies (see :func:`build_instance`).

    Returns
    -------
    Instance

    Raises
    ------
    DataFormatError
        Fewer reliable workers than ``n_experts``.

    Examples
    --------
    >>> inst = sample_instance(load_crowd(), n_experts=50, n_dims=3, seed=0)
    >>> inst.skills_base.shape, inst.costs.shape, int(inst.costs[:, 1].sum())
    ((3, 50), (50, 2), 10)
    """
    k = check_positive_int(n_experts, "n_experts")
    reliable = data.reliable_workers(min_annotations)
    if reliable.size < k:
        raise DataFormatError(
            f"{data.source} has only {reliable.size} reliable workers (>= {min_annotations} "
            f"annotations), fewer than the {k} requested"
        )
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    pool = np.sort(rng.choice(reliable, size=k, replace=False))
    return build_instance(data, pool, n_dims, n_flagged=n_flagged, split=split, shrinkage=shrinkage)
