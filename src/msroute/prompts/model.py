"""A context model: which cluster of an eval table's prompts, or which of its tasks, a new
prompt belongs to.

``fit_context_model`` fits it on the hashed n-gram counts of a table's prompts
(``msroute.prompts.features``) and their task labels or scores. Given labels of two or more
tasks (an outcome table's ``category`` column) and no number of clusters, the contexts are the
tasks, each prompt's the task predicted from its words (``by="task"``, a classifier:
``msroute.prompts.tasks``). Otherwise the contexts are clusters of the prompts:

1. the vocabulary: the buckets in at least two prompts (one prompt's own words tell nothing
   about another's), weighted ``(1 + log count) x idf``, ``idf = log((1 + P) / (1 + df)) + 1``,
   each prompt's vector scaled to unit length (TF-IDF);
2. a truncated SVD of that matrix (a seeded randomized SVD): the prompts' coordinates in the
   directions that carry most of the table's words, where prompts of one task sit together even
   when they share few words;
3. the clusters, one of two ways (``by``):

   * ``"scores"`` (routing-aware, the default; ``SCORE_DIMS`` directions): a ridge regression
     (closed form, strength ``RIDGE``) of every model's score on the coordinates predicts each
     prompt's scores, each prediction centred on its mean over the models (what tells models
     apart, not how hard the prompt is), and k-means (Euclidean) groups the prompts by those
     predictions: prompts that favour different models go apart even when their words are
     alike, and prompts whose words differ but favour the same models may share a cluster;
   * ``"words"`` (``DIMS`` directions): spherical k-means of the coordinates themselves.

   Both take k-means++ starts, ``RESTARTS`` of them, the tightest kept.

The number of clusters, when not given, is chosen from the table by a held-out criterion that
asks what routing needs: for each candidate ``k``, two-fold cross-fitting (the whole fit, SVD,
regression and k-means, on one half of the prompts, each cluster's best model on that half, its
reward on the other half's prompts in their clusters) and the ``k`` of the highest held-out
reward.

A prompt's cluster is a linear function of its TF-IDF vector, so the model keeps one weight per
(vocabulary bucket, cluster), and a prompt's score for cluster ``j`` is ``sum over its buckets of
(1 + log count) W[bucket, j]``, the cluster of the highest score its cluster:

* by words, ``W = idf x (V C^T)`` (``V`` the SVD's directions, ``C`` the centroids; the order
  of the cosines is that of these scores);
* by scores, the nearest centroid ``c_j`` of the predicted scores ``yhat = u A + a`` (``u`` the
  prompt's coordinates) is the largest ``yhat . c_j - |c_j|^2 / 2``: ``W = idf x (V A C^T)``,
  the score divided by the length of the prompt's TF-IDF vector (``idf`` kept for it) plus a
  per-cluster ``bias = a C^T - |c_j|^2 / 2``.

A prompt that has no bucket of the vocabulary goes to ``fallback``: the largest cluster by
words, the cluster of the highest bias by scores (where a prompt without known words lands).

A model by task has the form of one by scores (a weight per bucket and task, divided by the
length of the prompt's TF-IDF vector, plus a bias per task), and keeps for a warm start the
context each prompt it was fitted on gets from a fit without it (``held_out_keys``,
``held_out_contexts``; ``eval_contexts``).

Saved as one zip of ``manifest.json`` and ``.npy`` arrays (``msroute._npzip``; never pickled):
``vocab.npy`` (int64, sorted buckets), ``weights.npy`` (float32, (V, k)), by scores and by task
also ``idf.npy`` (float32, (V,)) and ``bias.npy`` (float64, (k,)), by task ``held_out_keys.npy``
(uint64, sorted) and ``held_out_contexts.npy`` (int64), and the manifest's names, fallback,
featurizer and how the model was fitted. A model by words is written as format version 1 (the
files of earlier msroute versions, read as they were), one by scores as version 2, one by task
as version 3. The same model gives the same bytes, and ``sha256`` names them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from msroute import _version
from msroute._atomic import atomic_path
from msroute._npzip import read_zip, zip_bytes
from msroute._validation import FloatArray, IntArray, text_name
from msroute.errors import DataFormatError, InvalidValueError
from msroute.prompts.features import (
    DIM,
    FEATURIZER,
    Vocabulary,
    feature_matrix,
    prompt_features,
    row_keys,
)
from msroute.prompts.tasks import fit_tasks, task_labels

__all__ = [
    "BY",
    "DIMS",
    "K_CANDIDATES",
    "RIDGE",
    "SCORE_DIMS",
    "ContextModel",
    "ContextModelError",
    "fit_context_model",
    "load_context_model",
]

#: How the contexts are fitted (module docstring): the tasks predicted from the words, or
#: clusters by predicted scores or by words.
BY = ("task", "scores", "words")
#: SVD directions of the clusters by words.
DIMS = 64
#: SVD directions of the clusters by scores (the regression's inputs).
SCORE_DIMS = 128
#: Ridge strength of the clusters by scores, relative to the coordinates' mean variance.
RIDGE = 0.01
#: k-means restarts (the tightest clustering is kept).
RESTARTS = 5
#: The numbers of clusters tried when none is given (those that leave at least
#: ``MIN_PER_CLUSTER`` prompts per cluster on average in half the table).
K_CANDIDATES = (2, 4, 8, 12, 16, 24, 32, 48, 64)
MIN_PER_CLUSTER = 20
#: Two-fold splits of the criterion.
FOLD_REPEATS = 2
_FORMAT = "msroute-context-model"
#: Format version of a model by words, by scores and by task.
_WORDS_VERSION, _SCORES_VERSION, _TASK_VERSION = 1, 2, 3
_VERSIONS = (_WORDS_VERSION, _SCORES_VERSION, _TASK_VERSION)
_ITER = 60


class ContextModelError(DataFormatError):
    """A context model file cannot be read: missing, not a model, damaged or of another
    featurizer or format version. The message names the file."""


@dataclass(frozen=True, eq=False)
class ContextModel:
    """A fitted context model (module docstring).

    Attributes
    ----------
    vocab : ndarray of int64, shape (V,)
        The vocabulary's hash buckets, sorted.
    weights : ndarray of float32, shape (V, k)
        Each bucket's weight per cluster.
    names : tuple of str, length k
        The clusters' context names: distinct, non-empty UTF-8 text (a router's contexts,
        which its journal records and a reopen validates as configured contexts).
    fallback : int
        The cluster of a prompt without a vocabulary bucket.
    info : dict
        How the model was fitted (prompts, k and the criterion per candidate, seed).
    idf : ndarray of float32, shape (V,), optional
        By scores: each bucket's idf; a prompt's scores are divided by the length of its
        TF-IDF vector. None by words.
    bias : ndarray of float64, shape (k,), optional
        By scores: each cluster's bias, added to the divided scores. None by words.
    held_out_keys : ndarray of uint64, shape (H,), optional
        By task: the keys (``msroute.prompts.features.row_keys``) of the prompts the model was
        fitted on, sorted and distinct. None otherwise.
    held_out_contexts : ndarray of int64, shape (H,), optional
        By task: the context of each of those prompts in a fit without it (cross-fitted).
    """

    vocab: IntArray
    weights: FloatArray
    names: tuple[str, ...]
    fallback: int
    info: dict[str, Any] = field(default_factory=dict)
    idf: FloatArray | None = None
    bias: FloatArray | None = None
    held_out_keys: npt.NDArray[np.uint64] | None = None
    held_out_contexts: IntArray | None = None

    def __post_init__(self) -> None:
        v, k = self.weights.shape
        if self.vocab.shape != (v,) or len(self.names) != k or not 0 <= self.fallback < k:
            raise InvalidValueError(
                f"a context model needs vocab (V,), weights (V, k), k names and a fallback "
                f"in [0, k): got {self.vocab.shape}, {self.weights.shape}, {len(self.names)} "
                f"names, fallback {self.fallback}"
            )
        for i, name in enumerate(self.names):
            text_name(name, f"names[{i}]")
        twice = sorted({n for n in self.names if self.names.count(n) > 1})
        if twice:
            raise InvalidValueError(f"names must be distinct; {twice[:5]} repeat")
        if v and (np.any(np.diff(self.vocab) <= 0) or self.vocab[0] < 0 or self.vocab[-1] >= DIM):
            raise InvalidValueError(f"vocab must be sorted distinct buckets in [0, {DIM})")
        if not np.all(np.isfinite(self.weights)):
            raise InvalidValueError("weights must be finite")
        if (self.idf is None) != (self.bias is None):
            raise InvalidValueError("a context model by scores needs both idf and bias")
        if self.idf is not None and self.bias is not None:
            if self.idf.shape != (v,) or self.bias.shape != (k,):
                raise InvalidValueError(
                    f"idf must have shape ({v},) and bias ({k},): got {self.idf.shape}, "
                    f"{self.bias.shape}"
                )
            if not (np.all(self.idf > 0) and np.all(np.isfinite(self.bias))):
                raise InvalidValueError("idf must be positive and finite, bias finite")
        self._check_held_out()

    def _check_held_out(self) -> None:
        keys, contexts = self.held_out_keys, self.held_out_contexts
        if keys is None and contexts is None:
            return
        if keys is None or contexts is None or self.idf is None:
            raise InvalidValueError(
                "a context model by task needs idf, bias, held_out_keys and held_out_contexts"
            )
        if keys.dtype != np.uint64 or keys.ndim != 1 or contexts.shape != keys.shape:
            raise InvalidValueError(
                f"held_out_keys must be uint64 (H,) and held_out_contexts (H,): got "
                f"{keys.dtype} {keys.shape}, {contexts.shape}"
            )
        if np.any(keys[1:] <= keys[:-1]):
            raise InvalidValueError("held_out_keys must be sorted and distinct")
        if contexts.size and (contexts.min() < 0 or contexts.max() >= self.k):
            raise InvalidValueError(f"held_out_contexts must be contexts in [0, {self.k})")

    @property
    def k(self) -> int:
        """The number of clusters."""
        return len(self.names)

    @property
    def format_version(self) -> int:
        """The file's format version: 1 by words, 2 by scores, 3 by task (module docstring)."""
        if self.idf is None:
            return _WORDS_VERSION
        return _SCORES_VERSION if self.held_out_keys is None else _TASK_VERSION

    def _scored(self, sums: FloatArray, squares: FloatArray) -> FloatArray:
        """Prompts' scores per cluster by scores, (n, k), from the weighted sums ``sums`` of
        their ``1 + log count`` per bucket and the squared lengths ``squares`` (n,) of their
        TF-IDF vectors: the sums divided by the lengths, plus the bias (module docstring)."""
        assert self.bias is not None
        lengths = np.sqrt(squares).reshape(-1, 1)
        return np.asarray(sums / np.where(lengths > 0, lengths, 1.0) + self.bias)

    def assign(self, text: str) -> int:
        """The cluster of one prompt."""
        ids, counts = prompt_features(text)
        at = np.searchsorted(self.vocab, ids)
        at[at == self.vocab.size] = 0
        hit = self.vocab[at] == ids if self.vocab.size else np.zeros(ids.size, dtype=bool)
        if not hit.any():
            return self.fallback
        tf = 1.0 + np.log(counts[hit])
        sums = tf @ self.weights[at[hit]].astype(np.float64)
        if self.idf is None:
            return int(np.argmax(sums))
        tfidf = tf * self.idf[at[hit]].astype(np.float64)
        return int(np.argmax(self._scored(sums[None, :], np.array([tfidf @ tfidf]))))

    def context_of(self, text: str) -> str:
        """The context name of one prompt."""
        return self.names[self.assign(text)]

    def assign_matrix(self, counts: sp.csr_matrix) -> IntArray:
        """The clusters of many prompts given as their feature counts, (P, ``DIM``)."""
        x = sp.csr_matrix(counts)[:, self.vocab]
        x.data = 1.0 + np.log(x.data)
        scores = np.asarray(x @ self.weights.astype(np.float64))
        if self.idf is not None:
            idf = self.idf.astype(np.float64)
            scores = self._scored(scores, np.asarray(x.multiply(x) @ (idf * idf)))
        out: IntArray = np.argmax(scores, axis=1).astype(np.int64)
        out[np.diff(x.indptr) == 0] = self.fallback
        return out

    def assign_texts(self, texts: Sequence[str]) -> IntArray:
        """The clusters of many prompts."""
        out: IntArray = np.array([self.assign(t) for t in texts], dtype=np.int64)
        return out

    def eval_contexts(self, counts: sp.csr_matrix) -> IntArray:
        """The contexts of an eval table's prompts (feature counts, (P, ``DIM``)) that a warm
        start's prior per context is taken from: ``assign_matrix``'s, except that a prompt the
        model by task was fitted on gets its held-out context, the one a fit without it gives
        it. Fitted on a prompt, the classifier knows its task; the prior of a task's context
        is then of the prompts that the model sends there, those of other tasks it mistakes
        for it included."""
        out = self.assign_matrix(counts)
        keys, held = self.held_out_keys, self.held_out_contexts
        if keys is None or held is None or not keys.size:
            return out
        mine = row_keys(counts)
        at = np.minimum(np.searchsorted(keys, mine), keys.size - 1)
        hit = keys[at] == mine
        out[hit] = held[at[hit]]
        return out

    # ------------------------------------------------------------------ files
    def _archive(self) -> tuple[str, dict[str, np.ndarray]]:
        manifest = {
            "format": _FORMAT,
            "format_version": self.format_version,
            "msroute_version": _version.__version__,
            "featurizer": FEATURIZER,
            "names": list(self.names),
            "fallback": self.fallback,
            "info": self.info,
        }
        arrays: dict[str, np.ndarray] = {
            "vocab": np.asarray(self.vocab, dtype=np.int64),
            "weights": np.asarray(self.weights, dtype=np.float32),
        }
        if self.idf is not None and self.bias is not None:
            arrays["idf"] = np.asarray(self.idf, dtype=np.float32)
            arrays["bias"] = np.asarray(self.bias, dtype=np.float64)
        if self.held_out_keys is not None and self.held_out_contexts is not None:
            arrays["held_out_keys"] = np.asarray(self.held_out_keys, dtype=np.uint64)
            arrays["held_out_contexts"] = np.asarray(self.held_out_contexts, dtype=np.int64)
        return json.dumps(manifest, indent=2, sort_keys=True), arrays

    def to_bytes(self) -> bytes:
        """The model's file, as bytes."""
        return zip_bytes(*self._archive())

    @property
    def sha256(self) -> str:
        """SHA-256 of the model's file (what a journal records)."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the model to ``path`` (atomically); returns its SHA-256."""
        blob = self.to_bytes()
        with atomic_path(Path(path)) as tmp:
            tmp.write_bytes(blob)
        return hashlib.sha256(blob).hexdigest()

    @classmethod
    def from_bytes(cls, blob: bytes, label: str = "context model bytes") -> ContextModel:
        """The model of a file's bytes (``ContextModelError`` naming ``label``)."""
        manifest, arrays = read_zip(blob, label, "context model", ContextModelError)
        version = manifest.get("format_version")
        if manifest.get("format") != _FORMAT or version not in _VERSIONS:
            raise ContextModelError(
                f"{label}: not an msroute context model of format version 1, 2 or 3 (format "
                f"{manifest.get('format')!r}, version {version!r})"
            )
        if manifest.get("featurizer") != FEATURIZER:
            raise ContextModelError(
                f"{label}: fitted on features {manifest.get('featurizer')!r}; this msroute "
                f"computes {FEATURIZER!r}: fit the model again"
            )
        by_scores, by_task = version != _WORDS_VERSION, version == _TASK_VERSION
        try:
            return cls(
                vocab=np.asarray(arrays["vocab"], dtype=np.int64),
                weights=np.asarray(arrays["weights"], dtype=np.float32),
                names=_name_list(manifest["names"], label),
                fallback=int(manifest["fallback"]),
                info=dict(manifest.get("info") or {}),
                idf=np.asarray(arrays["idf"], dtype=np.float32) if by_scores else None,
                bias=np.asarray(arrays["bias"], dtype=np.float64) if by_scores else None,
                held_out_keys=np.asarray(arrays["held_out_keys"]) if by_task else None,
                held_out_contexts=(
                    np.asarray(arrays["held_out_contexts"], dtype=np.int64) if by_task else None
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ContextModelError(f"{label}: not a valid context model: {exc}") from exc


def _name_list(value: object, label: str) -> tuple[str, ...]:
    """A manifest's context names: a list (its entries checked by ``ContextModel``), never a
    string read as its characters (``ContextModelError`` naming the file ``label``)."""
    if not isinstance(value, list):
        raise ContextModelError(
            f"{label}: not a valid context model: names must be a list, got {value!r:.80}"
        )
    return tuple(value)


def load_context_model(path: str | os.PathLike[str]) -> ContextModel:
    """Read a model saved by ``ContextModel.save`` (``ContextModelError`` if unreadable)."""
    p = Path(path)
    try:
        blob = p.read_bytes()
    except OSError as exc:
        raise ContextModelError(f"{p}: cannot read the context model: {exc}") from exc
    return ContextModel.from_bytes(blob, str(p))


# ---------------------------------------------------------------------- fitting
@dataclass(frozen=True)
class _Space(Vocabulary):
    """The TF-IDF + SVD coordinates fitted on some prompts."""

    basis: FloatArray  # (V, r)

    @classmethod
    def fit(cls, counts: sp.csr_matrix, rng: np.random.Generator, dims: int) -> _Space:
        words = Vocabulary.of(counts)
        r = max(1, min(dims, words.vocab.size - 1, counts.shape[0] - 1))
        return cls(words.vocab, words.idf, _top_directions(words.tfidf(counts), r, rng))

    def project(self, counts: sp.csr_matrix) -> FloatArray:
        """The prompts' coordinates: their unit TF-IDF vectors in the SVD's directions."""
        return np.asarray(self.tfidf(counts) @ self.basis)

    def coords(self, counts: sp.csr_matrix) -> FloatArray:
        """The coordinates scaled to unit length (the clusters by words)."""
        z = self.project(counts)
        norms = np.linalg.norm(z, axis=1, keepdims=True)
        return np.asarray(z / np.where(norms > 0, norms, 1.0))


@dataclass(frozen=True)
class _Predictor:
    """Every model's score predicted from a prompt's coordinates (ridge regression with an
    intercept), centred on its mean over the models: ``yhat = u slope + offset``."""

    space: _Space
    slope: FloatArray  # (r, K)
    offset: FloatArray  # (K,)

    @classmethod
    def fit(
        cls, counts: sp.csr_matrix, rewards: FloatArray, rng: np.random.Generator
    ) -> _Predictor:
        space = _Space.fit(counts, rng, SCORE_DIMS)
        u = space.project(counts)
        u_mean, y_mean = u.mean(axis=0), rewards.mean(axis=0)
        uc = u - u_mean
        gram = uc.T @ uc
        strength = RIDGE * max(float(np.trace(gram)) / gram.shape[0], 1e-12)
        b = np.linalg.solve(gram + strength * np.eye(gram.shape[0]), uc.T @ (rewards - y_mean))
        k = rewards.shape[1]
        centre = np.eye(k) - 1.0 / k
        return cls(space, b @ centre, (y_mean - u_mean @ b) @ centre)

    def predict(self, counts: sp.csr_matrix) -> FloatArray:
        return np.asarray(self.space.project(counts) @ self.slope + self.offset)


def _top_directions(y: sp.csr_matrix, r: int, rng: np.random.Generator) -> FloatArray:
    """The top ``r`` right singular vectors of ``y`` (P, V): a randomized SVD with two power
    iterations (Halko, Martinsson and Tropp 2011), seeded; every factorization is of a
    (P, r + 10) or (r + 10, r + 10) matrix. Fewer when ``y`` has a lower rank: a direction
    whose singular value is below ``1e-6`` of the largest is noise, dropped."""
    width = min(r + 10, min(y.shape))
    q, _ = np.linalg.qr(np.asarray(y @ rng.standard_normal((y.shape[1], width))))
    for _ in range(2):
        q, _ = np.linalg.qr(np.asarray(y @ np.asarray(y.T @ q)))
    b = np.asarray(y.T @ q)  # (V, width): y's rows in the range found
    values, vectors = np.linalg.eigh(b.T @ b)
    top = np.argsort(values)[::-1][:r]
    top = top[values[top] > 1e-12 * max(float(values[top[0]]), 1e-300)]
    scale = np.sqrt(np.maximum(values[top], 1e-300))
    return np.asarray(b @ vectors[:, top] / scale)


def _nearness(z: FloatArray, c: FloatArray, spherical: bool) -> FloatArray:
    """(n, k): how near each row of ``z`` is to each centroid, the nearest the largest: the
    cosine for unit rows (spherical), else ``z . c - |c|^2 / 2`` (Euclidean)."""
    near = z @ c.T
    return near if spherical else near - 0.5 * (c * c).sum(axis=1)


def _kmeans(
    z: FloatArray, k: int, rng: np.random.Generator, *, spherical: bool
) -> tuple[FloatArray, IntArray]:
    """k-means of the rows ``z``, spherical (unit rows, centroids on the unit sphere) or
    Euclidean: the tightest of ``RESTARTS`` k-means++ runs."""
    best: tuple[float, FloatArray, IntArray] | None = None
    n = z.shape[0]
    half_sq = np.zeros(n) if spherical else 0.5 * (z * z).sum(axis=1)

    def gap(i: int) -> FloatArray:  # how far every row is from row i (k-means++ draws by it)
        if spherical:
            return np.asarray(np.maximum(1.0 - z @ z[i], 0.0))
        return np.asarray(((z - z[i]) ** 2).sum(axis=1))

    for _ in range(RESTARTS):
        centers = [int(rng.integers(n))]
        far = gap(centers[0])
        for _ in range(k - 1):
            total = float(far.sum())
            pick = int(rng.choice(n, p=far / total)) if total > 0 else int(rng.integers(n))
            centers.append(pick)
            far = np.minimum(far, gap(pick))
        c = z[centers].copy()
        labels = np.full(n, -1, dtype=np.int64)
        for _ in range(_ITER):
            new = np.argmax(_nearness(z, c, spherical), axis=1)
            if np.array_equal(new, labels):
                break
            labels = new
            sums = np.asarray(_one_hot(labels, k).T @ z)
            sizes = np.bincount(labels, minlength=k).astype(np.float64)
            norms = np.linalg.norm(sums, axis=1) if spherical else sizes
            empty = norms == 0 if spherical else sizes == 0
            if empty.any():  # an empty cluster restarts at the prompts farthest from theirs
                nearest = np.max(_nearness(z, c, spherical), axis=1) - half_sq
                far_rows = np.argsort(nearest)[: int(empty.sum())]
                sums[empty], norms[empty] = z[far_rows], 1.0
            c = sums / norms[:, None]
        near = _nearness(z, c, spherical)
        tight = float(np.max(near, axis=1).sum())
        if best is None or tight > best[0]:
            best = (tight, c, np.argmax(near, axis=1))
    assert best is not None
    return best[1], best[2]


def _one_hot(labels: IntArray, k: int) -> sp.csr_matrix:
    """The (n, k) indicator matrix of ``labels``."""
    n = labels.size
    return sp.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, k))


def _embedding(
    counts: sp.csr_matrix, rewards: FloatArray | None, by: str, rng: np.random.Generator
) -> tuple[_Space | _Predictor, FloatArray]:
    """What the clusters of ``by`` are fitted to, and the fitted prompts' points in it."""
    if by == "words":
        space = _Space.fit(counts, rng, DIMS)
        return space, space.coords(counts)
    assert rewards is not None
    pred = _Predictor.fit(counts, rewards, rng)
    return pred, pred.predict(counts)


def _points(fitted: _Space | _Predictor, counts: sp.csr_matrix) -> FloatArray:
    return fitted.coords(counts) if isinstance(fitted, _Space) else fitted.predict(counts)


def _held_out(
    counts: sp.csr_matrix,
    rewards: FloatArray,
    ks: Sequence[int],
    by: str,
    rng: np.random.Generator,
) -> list[float]:
    """Per candidate k: the mean held-out reward of each cluster's best model, two-fold,
    ``FOLD_REPEATS`` times (the whole fit on each fitting half)."""
    out = np.zeros(len(ks))
    folds = []
    spherical = by == "words"
    for _ in range(FOLD_REPEATS):
        order = rng.permutation(counts.shape[0])
        halves = (order[: order.size // 2], order[order.size // 2 :])
        folds += [halves, halves[::-1]]
    for fit, test in folds:
        fitted, z_fit = _embedding(counts[fit], rewards[fit], by, rng)
        z_test = _points(fitted, counts[test])
        for i, k in enumerate(ks):
            c, labels = _kmeans(z_fit, k, rng, spherical=spherical)
            sums = np.asarray(_one_hot(labels, k).T @ rewards[fit])
            best = np.argmax(sums, axis=1)  # each cluster's best model on the fitting half
            there = np.argmax(_nearness(z_test, c, spherical), axis=1)
            out[i] += float(rewards[test, best[there]].sum())
    return list(out / (FOLD_REPEATS * counts.shape[0]))


def fit_context_model(
    counts: sp.csr_matrix | Sequence[str],
    rewards: FloatArray | None = None,
    *,
    k: int | None = None,
    by: str | None = None,
    labels: Sequence[str] | None = None,
    seed: int = 0,
    source: str = "",
) -> ContextModel:
    """Fit a context model on prompts (module docstring).

    Parameters
    ----------
    counts : sparse matrix (P, ``DIM``) or sequence of str
        The prompts' feature counts (``msroute.prompts.features.feature_matrix``), or the texts.
    rewards : ndarray, shape (P, K), optional
        Each model's reward on each prompt: what the clusters by scores are fitted to, and
        what chooses ``k``.
    k : int, optional
        The number of clusters (default: chosen by the held-out criterion among
        ``K_CANDIDATES``). Not with ``by="task"`` (one context per task).
    by : {"task", "scores", "words"}, optional
        The tasks predicted from the words (needs ``labels``; ``msroute.prompts.tasks``), or
        clusters of the prompts by their predicted scores (needs ``rewards``) or by their
        words. Default: ``"task"`` when ``labels`` name two or more tasks and ``k`` is not
        given, else ``"scores"``.
    labels : sequence of str, length P, optional
        Each prompt's task (an outcome table's ``category``).
    seed : int, default 0
        Seeds the SVD, the k-means starts and the criterion's folds (by task, the folds of the
        held-out contexts).
    source : str
        Where the prompts come from (recorded in ``info``).
    """
    x = feature_matrix(counts) if not sp.issparse(counts) else sp.csr_matrix(counts)
    assert isinstance(x, sp.csr_matrix)
    p = x.shape[0]
    if x.shape[1] != DIM:
        raise InvalidValueError(f"counts must have {DIM} columns (the hash buckets)")
    if by is not None and by not in BY:
        raise InvalidValueError(f"by == {by!r}, must be one of {', '.join(map(repr, BY))}")
    if labels is not None or by == "task":
        tasks = None if labels is None else task_labels(labels, p)
        if by is None and k is None and tasks is not None and len(tasks[1]) > 1:
            by = "task"
        if by == "task":
            if k is not None:
                raise InvalidValueError(
                    f"k == {k!r}: a context model by task has one context per task; leave k out"
                )
            if tasks is None:
                raise InvalidValueError("give the labels (each prompt's task) to fit by task")
            fit = fit_tasks(x, *tasks, seed=seed)
            return ContextModel(
                vocab=fit.words.vocab.astype(np.int64),
                weights=(fit.words.idf[:, None] * fit.weights).astype(np.float32),
                names=tasks[1],
                fallback=int(np.argmax(fit.bias)),
                info={"prompts": p, "seed": seed, "source": source, **fit.info},
                idf=fit.words.idf.astype(np.float32),
                bias=fit.bias,
                held_out_keys=fit.held_out_keys,
                held_out_contexts=fit.held_out_contexts,
            )
    by = by or "scores"
    r: FloatArray | None = None
    if rewards is not None:
        r = np.asarray(rewards, dtype=np.float64)
        if r.shape[0] != p or r.ndim != 2 or not np.all(np.isfinite(r)):
            raise InvalidValueError(f"rewards must be finite, of shape ({p}, K), got {r.shape}")
    elif by == "scores":
        raise InvalidValueError("give the rewards that the clusters by scores are fitted to")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x637478]))
    info: dict[str, Any] = {"prompts": p, "seed": seed, "source": source, "by": by}
    info["dims"] = DIMS if by == "words" else SCORE_DIMS
    if by == "scores":
        info["ridge"] = RIDGE
    if k is None:
        if r is None:
            raise InvalidValueError("give k, or the rewards that choose it")
        ks = [c for c in K_CANDIDATES if c <= max(1, p // 2 // MIN_PER_CLUSTER)] or [1]
        scores = _held_out(x, r, ks, by, rng)
        k = ks[int(np.argmax(scores))]
        info["criterion"] = {str(c): round(float(s), 6) for c, s in zip(ks, scores, strict=True)}
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= p:
        raise InvalidValueError(f"k == {k!r}, must be an integer in [1, {p}] (the prompts)")
    k = int(k)
    info["k"] = k
    width = len(str(k - 1))
    names = tuple(f"text-{j:0{width}d}" for j in range(k))
    fitted, z = _embedding(x, r, by, rng)
    if isinstance(fitted, _Predictor):
        c, _ = _kmeans(z, k, rng, spherical=False)
        space = fitted.space
        bias = fitted.offset @ c.T - 0.5 * (c * c).sum(axis=1)
        return ContextModel(
            vocab=space.vocab.astype(np.int64),
            weights=(space.idf[:, None] * (space.basis @ (fitted.slope @ c.T))).astype(np.float32),
            names=names,
            fallback=int(np.argmax(bias)),
            info=info,
            idf=space.idf.astype(np.float32),
            bias=bias,
        )
    weights = np.zeros((fitted.vocab.size, 1))
    clusters = np.zeros(p, np.int64)
    if k > 1:
        c, clusters = _kmeans(z, k, rng, spherical=True)
        weights = fitted.idf[:, None] * (fitted.basis @ c.T)
    return ContextModel(
        vocab=fitted.vocab.astype(np.int64),
        weights=weights.astype(np.float32),
        names=names,
        fallback=int(np.argmax(np.bincount(clusters, minlength=k))),
        info=info,
    )
