"""A context model by task: the contexts are an eval table's tasks, a prompt's the one predicted
from its words.

An eval table often says each prompt's task (an outcome table's ``category`` column), where live
traffic does not. ``fit_tasks`` (what ``msroute.prompts.fit_context_model(..., labels=...)``
fits, its default when the labels name two or more tasks, into a ``ContextModel`` by task)
learns to tell the tasks apart from the prompts' hashed n-gram counts
(``msroute.prompts.features``):

1. TF-IDF over the buckets in at least two prompts, each prompt's vector scaled to unit length
   (``msroute.prompts.features.Vocabulary``, as the clusters');
2. a ridge regression of each task's indicator (1 for the task's prompts, 0 for the others) on
   those vectors, penalty ``STRENGTH`` on the weights and none on the intercepts (a
   least-squares classifier; conjugate gradients from zero, to a relative residual of
   ``TOL``): a weight per (bucket, task) and a bias per task. A prompt's context is the task
   of the highest score, its TF-IDF vector's product with the task's weights plus the task's
   bias: the linear form of a context model by scores, assigned as cheaply;
3. the held-out contexts of the fitted prompts: ``FOLDS``-fold cross-fitting (the whole fit,
   vocabulary included, on the other folds' prompts, then each prompt of the fold assigned),
   kept per prompt by the key of its features (``msroute.prompts.features.row_keys``).

Why the held-out contexts: fitted on a prompt, the classifier knows its task, so it would put
each of the table's prompts in its own task and a warm start's prior per context would be that
of the prompts labelled with it. A new prompt is mistaken for another task now and then (a
multiple-choice science question for a trivia one); the prior of a context is worth most when it
is that of the prompts that will be sent there, mistakes included. A warm start takes the
table's contexts from ``ContextModel.eval_contexts``, which gives each prompt the model was
fitted on its held-out context.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from msroute._validation import FloatArray, IntArray
from msroute.errors import InvalidValueError
from msroute.prompts.features import Vocabulary, row_keys

__all__ = ["FOLDS", "MIN_PER_TASK", "STRENGTH", "TaskFit", "fit_tasks", "task_labels"]

#: Ridge penalty of the weights (against the sum of squared errors over the prompts).
STRENGTH = 0.1
#: Folds of the held-out contexts.
FOLDS = 5
#: The fewest prompts a task is learned from.
MIN_PER_TASK = 2
#: Conjugate gradients: the relative residual reached, and the iterations at most.
TOL = 1e-4
MAX_ITER = 1000
#: Spawn key of the folds.
_FOLD_KEY = 0x7461736B


def task_labels(labels: Iterable[str], p: int) -> tuple[IntArray, tuple[str, ...]]:
    """Each prompt's task index and the tasks' names in order of first appearance, from ``p``
    labels (InvalidValueError: not one non-empty string per prompt)."""
    if isinstance(labels, str | bytes):
        raise InvalidValueError("labels: give one task per prompt, not one string")
    items = list(labels)
    if len(items) != p:
        raise InvalidValueError(f"labels: {len(items)} given for {p} prompts; give each its task")
    for i, label in enumerate(items):
        if not isinstance(label, str) or not label.strip():
            raise InvalidValueError(
                f"labels[{i}] == {label!r:.80}: each prompt's task must be a non-empty string"
            )
    names = tuple(dict.fromkeys(items))
    index = {name: j for j, name in enumerate(names)}
    return np.array([index[label] for label in items], dtype=np.int64), names


def _regression(z: sp.csr_matrix, tasks: IntArray, k: int) -> tuple[FloatArray, FloatArray]:
    """The weights (V, k) and biases (k,) of the ridge regression of the tasks' indicators on
    the rows of ``z`` (module docstring): the intercepts by centring (``z``'s column means
    ``mu``, applied without densifying ``z``), the weights by conjugate gradients on
    ``(Zc' Zc + STRENGTH I) W = Zc' Yc``, each task's column on its own step sizes."""
    p, v = z.shape
    truth = np.zeros((p, k))
    truth[np.arange(p), tasks] = 1.0
    mean = truth.mean(axis=0)
    mu = np.asarray(z.mean(axis=0)).ravel()
    zt = sp.csr_matrix(z.T)

    def normal(w: FloatArray) -> FloatArray:  # (Zc' Zc + STRENGTH I) w
        u = np.asarray(z @ w) - mu @ w
        return np.asarray(zt @ u) - np.outer(mu, u.sum(axis=0)) + STRENGTH * w

    w = np.zeros((v, k))
    r = np.asarray(zt @ (truth - mean))  # Zc' Yc: Yc's columns sum to 0
    goal = TOL**2 * (r * r).sum(axis=0)
    d, rr = r.copy(), (r * r).sum(axis=0)
    for _ in range(MAX_ITER):
        if np.all(rr <= goal):
            break
        q = normal(d)
        step = rr / np.maximum((d * q).sum(axis=0), 1e-300)
        w += step * d
        r -= step * q
        new = (r * r).sum(axis=0)
        d = r + (new / np.maximum(rr, 1e-300)) * d
        rr = new
    return w, mean - mu @ w


def _classifier(
    counts: sp.csr_matrix, tasks: IntArray, k: int
) -> tuple[Vocabulary, FloatArray, FloatArray]:
    """The vocabulary, weights and biases fitted on these prompts."""
    words = Vocabulary.of(counts)
    w, b = _regression(words.tfidf(counts), tasks, k)
    return words, w, b


def _held_out(counts: sp.csr_matrix, tasks: IntArray, k: int, seed: int) -> IntArray:
    """Each prompt's context from the classifier fitted on the other folds (module docstring)."""
    p = counts.shape[0]
    order = np.random.default_rng(np.random.SeedSequence([seed, _FOLD_KEY])).permutation(p)
    out = np.zeros(p, dtype=np.int64)
    for f in range(min(FOLDS, p)):
        test = np.sort(order[f::FOLDS])
        fit = np.setdiff1d(order, test)
        words, w, b = _classifier(counts[fit], tasks[fit], k)
        out[test] = np.argmax(np.asarray(words.tfidf(counts[test]) @ w) + b, axis=1)
    return out


@dataclass(frozen=True)
class TaskFit:
    """A fitted classifier of the tasks (module docstring).

    Attributes
    ----------
    words : Vocabulary
        Its buckets and their idf.
    weights : ndarray, shape (V, k)
        Each bucket's weight per task, on the unit TF-IDF vector.
    bias : ndarray, shape (k,)
        Each task's bias.
    held_out_keys : ndarray of uint64, shape (H,)
        The fitted prompts' keys (``row_keys``), sorted and distinct.
    held_out_contexts : ndarray of int64, shape (H,)
        The task of each of them in the fit without it (of its first, if repeated).
    info : dict
        How it was fitted.
    """

    words: Vocabulary
    weights: FloatArray
    bias: FloatArray
    held_out_keys: npt.NDArray[np.uint64]
    held_out_contexts: IntArray
    info: dict[str, Any]


def fit_tasks(
    counts: sp.csr_matrix, tasks: IntArray, names: tuple[str, ...], *, seed: int = 0
) -> TaskFit:
    """Fit the classifier (module docstring) on prompts' feature counts (P, ``DIM``) and their
    tasks (indices into ``names``, ``task_labels``); ``seed`` seeds the folds.

    Raises
    ------
    InvalidValueError
        Fewer than two tasks, or a task of fewer than ``MIN_PER_TASK`` prompts (a column
        that is not the prompts' tasks, such as their ids).
    """
    k = len(names)
    sizes = np.bincount(tasks, minlength=k)
    if k < 2:
        raise InvalidValueError(
            f"labels: one task ({names[0]!r}) only; a context model by task needs two or more "
            "(fit by scores instead)"
        )
    small = [names[j] for j in np.flatnonzero(sizes < MIN_PER_TASK)]
    if small:
        raise InvalidValueError(
            f"labels: {len(small)} of the {k} tasks have fewer than {MIN_PER_TASK} prompts "
            f"({', '.join(map(repr, small[:5]))}{', ...' if len(small) > 5 else ''}); a task is "
            "learned from its prompts: give each prompt's task, or fit by scores instead"
        )
    words, w, b = _classifier(counts, tasks, k)
    held = _held_out(counts, tasks, k, seed)
    keys, first = np.unique(row_keys(counts), return_index=True)
    info = {
        "by": "task",
        "k": k,
        "strength": STRENGTH,
        "folds": FOLDS,
        "held_out_accuracy": round(float(np.mean(held == tasks)), 6),
    }
    return TaskFit(words, w, np.asarray(b, dtype=np.float64), keys, held[first], info)
