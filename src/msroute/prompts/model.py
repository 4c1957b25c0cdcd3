"""A context model: which cluster of an eval table's prompts a new prompt belongs to.

``fit_context_model`` fits it on the hashed n-gram counts of a table's prompts
(``msroute.prompts.features``):

1. the vocabulary: the buckets in at least two prompts (one prompt's own words tell nothing
   about another's), weighted ``(1 + log count) x idf``, ``idf = log((1 + P) / (1 + df)) + 1``,
   each prompt's vector scaled to unit length (TF-IDF);
2. a truncated SVD of that matrix (``DIMS`` directions, a seeded randomized SVD): the prompts'
   coordinates in the directions that carry most of the table's words, where prompts of one
   task sit together even when they share few words;
3. spherical k-means of the coordinates (k-means++ starts, ``RESTARTS`` of them, the tightest
   kept): ``k`` centroids on the unit sphere.

The number of clusters, when not given, is chosen from the table by a held-out criterion that
asks what routing needs: for each candidate ``k``, two-fold cross-fitting (the whole fit on one
half of the prompts, each cluster's best model on that half, its reward on the other half's
prompts in their clusters) and the ``k`` of the highest held-out reward.

A prompt is assigned to the centroid nearest in angle. Since its SVD coordinates are a linear
map of its TF-IDF vector and only the order of the cosines matters, the model keeps one weight
per (vocabulary bucket, cluster): ``idf x (V C^T)``, and a prompt's score for cluster ``j`` is
``sum over its buckets of (1 + log count) W[bucket, j]``. A prompt that has no bucket of the
vocabulary goes to the largest cluster (``fallback``).

Saved as one zip of ``manifest.json`` and ``.npy`` arrays (``msroute._npzip``; never pickled):
``vocab.npy`` (int64, sorted buckets), ``weights.npy`` (float32, (V, k)) and the manifest's
names, fallback, featurizer and how the model was fitted. The same model gives the same bytes,
and ``sha256`` names them.
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
import scipy.sparse as sp

from msroute import _version
from msroute._atomic import atomic_path
from msroute._npzip import read_zip, zip_bytes
from msroute._validation import FloatArray, IntArray
from msroute.errors import DataFormatError, InvalidValueError
from msroute.prompts.features import DIM, FEATURIZER, feature_matrix, prompt_features

__all__ = [
    "DIMS",
    "K_CANDIDATES",
    "ContextModel",
    "ContextModelError",
    "fit_context_model",
    "load_context_model",
]

#: SVD directions.
DIMS = 64
#: k-means restarts (the tightest clustering is kept).
RESTARTS = 5
#: The numbers of clusters tried when none is given (those that leave at least
#: ``MIN_PER_CLUSTER`` prompts per cluster on average in half the table).
K_CANDIDATES = (2, 4, 8, 12, 16, 24, 32, 48, 64)
MIN_PER_CLUSTER = 20
#: Two-fold splits of the criterion.
FOLD_REPEATS = 2
_FORMAT = "msroute-context-model"
_FORMAT_VERSION = 1
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
        The clusters' context names.
    fallback : int
        The cluster of a prompt without a vocabulary bucket.
    info : dict
        How the model was fitted (prompts, k and the criterion per candidate, seed).
    """

    vocab: IntArray
    weights: FloatArray
    names: tuple[str, ...]
    fallback: int
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        v, k = self.weights.shape
        if self.vocab.shape != (v,) or len(self.names) != k or not 0 <= self.fallback < k:
            raise InvalidValueError(
                f"a context model needs vocab (V,), weights (V, k), k names and a fallback "
                f"in [0, k): got {self.vocab.shape}, {self.weights.shape}, {len(self.names)} "
                f"names, fallback {self.fallback}"
            )
        if v and (np.any(np.diff(self.vocab) <= 0) or self.vocab[0] < 0 or self.vocab[-1] >= DIM):
            raise InvalidValueError(f"vocab must be sorted distinct buckets in [0, {DIM})")
        if not np.all(np.isfinite(self.weights)):
            raise InvalidValueError("weights must be finite")

    @property
    def k(self) -> int:
        """The number of clusters."""
        return len(self.names)

    def assign(self, text: str) -> int:
        """The cluster of one prompt."""
        ids, counts = prompt_features(text)
        at = np.searchsorted(self.vocab, ids)
        at[at == self.vocab.size] = 0
        hit = self.vocab[at] == ids if self.vocab.size else np.zeros(ids.size, dtype=bool)
        if not hit.any():
            return self.fallback
        tf = 1.0 + np.log(counts[hit])
        return int(np.argmax(tf @ self.weights[at[hit]].astype(np.float64)))

    def context_of(self, text: str) -> str:
        """The context name of one prompt."""
        return self.names[self.assign(text)]

    def assign_matrix(self, counts: sp.csr_matrix) -> IntArray:
        """The clusters of many prompts given as their feature counts, (P, ``DIM``)."""
        x = sp.csr_matrix(counts)[:, self.vocab]
        x.data = 1.0 + np.log(x.data)
        scores = np.asarray(x @ self.weights.astype(np.float64))
        out: IntArray = np.argmax(scores, axis=1).astype(np.int64)
        out[np.diff(x.indptr) == 0] = self.fallback
        return out

    def assign_texts(self, texts: Sequence[str]) -> IntArray:
        """The clusters of many prompts."""
        out: IntArray = np.array([self.assign(t) for t in texts], dtype=np.int64)
        return out

    # ------------------------------------------------------------------ files
    def _archive(self) -> tuple[str, dict[str, np.ndarray]]:
        manifest = {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
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
        if manifest.get("format") != _FORMAT or manifest.get("format_version") != _FORMAT_VERSION:
            raise ContextModelError(
                f"{label}: not an msroute context model of format version {_FORMAT_VERSION}"
            )
        if manifest.get("featurizer") != FEATURIZER:
            raise ContextModelError(
                f"{label}: fitted on features {manifest.get('featurizer')!r}; this msroute "
                f"computes {FEATURIZER!r}: fit the model again"
            )
        try:
            return cls(
                vocab=np.asarray(arrays["vocab"], dtype=np.int64),
                weights=np.asarray(arrays["weights"], dtype=np.float32),
                names=tuple(str(n) for n in manifest["names"]),
                fallback=int(manifest["fallback"]),
                info=dict(manifest.get("info") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ContextModelError(f"{label}: not a valid context model: {exc}") from exc


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
class _Space:
    """The TF-IDF + SVD coordinates fitted on some prompts."""

    vocab: IntArray
    idf: FloatArray
    basis: FloatArray  # (V, r)

    @classmethod
    def fit(cls, counts: sp.csr_matrix, rng: np.random.Generator) -> _Space:
        p = counts.shape[0]
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        vocab = np.flatnonzero(df >= (2 if p >= 50 else 1))
        idf = np.log((1.0 + p) / (1.0 + df[vocab])) + 1.0
        space = cls(vocab, idf, np.zeros((vocab.size, 0)))
        y = space.tfidf(counts)
        r = max(1, min(DIMS, vocab.size - 1, p - 1))
        return cls(vocab, idf, _top_directions(y, r, rng))

    def tfidf(self, counts: sp.csr_matrix) -> sp.csr_matrix:
        x = sp.csr_matrix(counts)[:, self.vocab].astype(np.float64)
        x.data = 1.0 + np.log(x.data)
        x = sp.csr_matrix(x @ sp.diags(self.idf))
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ x)

    def coords(self, counts: sp.csr_matrix) -> FloatArray:
        z = np.asarray(self.tfidf(counts) @ self.basis)
        norms = np.linalg.norm(z, axis=1, keepdims=True)
        return np.asarray(z / np.where(norms > 0, norms, 1.0))


def _top_directions(y: sp.csr_matrix, r: int, rng: np.random.Generator) -> FloatArray:
    """The top ``r`` right singular vectors of ``y`` (P, V): a randomized SVD with two power
    iterations (Halko, Martinsson and Tropp 2011), seeded; every factorization is of a
    (P, r + 10) or (r + 10, r + 10) matrix."""
    width = min(r + 10, min(y.shape))
    q, _ = np.linalg.qr(np.asarray(y @ rng.standard_normal((y.shape[1], width))))
    for _ in range(2):
        q, _ = np.linalg.qr(np.asarray(y @ np.asarray(y.T @ q)))
    b = np.asarray(y.T @ q)  # (V, width): y's rows in the range found
    values, vectors = np.linalg.eigh(b.T @ b)
    top = np.argsort(values)[::-1][:r]
    scale = np.sqrt(np.maximum(values[top], 1e-300))
    return np.asarray(b @ vectors[:, top] / scale)


def _kmeans(z: FloatArray, k: int, rng: np.random.Generator) -> tuple[FloatArray, IntArray]:
    """Spherical k-means of unit rows ``z``: the tightest of ``RESTARTS`` k-means++ runs."""
    best: tuple[float, FloatArray, IntArray] | None = None
    n = z.shape[0]
    for _ in range(RESTARTS):
        centers = [int(rng.integers(n))]
        gap = np.maximum(1.0 - z @ z[centers[0]], 0.0)
        for _ in range(k - 1):
            total = float(gap.sum())
            pick = int(rng.choice(n, p=gap / total)) if total > 0 else int(rng.integers(n))
            centers.append(pick)
            gap = np.minimum(gap, np.maximum(1.0 - z @ z[pick], 0.0))
        c = z[centers].copy()
        labels = np.full(n, -1, dtype=np.int64)
        for _ in range(_ITER):
            new = np.argmax(z @ c.T, axis=1)
            if np.array_equal(new, labels):
                break
            labels = new
            sums = np.asarray(_one_hot(labels, k).T @ z)
            norms = np.linalg.norm(sums, axis=1)
            empty = norms == 0
            if empty.any():  # an empty cluster restarts at the prompts farthest from theirs
                far = np.argsort(np.max(z @ c.T, axis=1))[: int(empty.sum())]
                sums[empty], norms[empty] = z[far], 1.0
            c = sums / norms[:, None]
        tight = float(np.max(z @ c.T, axis=1).sum())
        if best is None or tight > best[0]:
            best = (tight, c, np.argmax(z @ c.T, axis=1))
    assert best is not None
    return best[1], best[2]


def _one_hot(labels: IntArray, k: int) -> sp.csr_matrix:
    """The (n, k) indicator matrix of ``labels``."""
    n = labels.size
    return sp.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, k))


def _held_out(
    counts: sp.csr_matrix, rewards: FloatArray, ks: Sequence[int], rng: np.random.Generator
) -> list[float]:
    """Per candidate k: the mean held-out reward of each cluster's best model, two-fold,
    ``FOLD_REPEATS`` times."""
    out = np.zeros(len(ks))
    folds = []
    for _ in range(FOLD_REPEATS):
        order = rng.permutation(counts.shape[0])
        halves = (order[: order.size // 2], order[order.size // 2 :])
        folds += [halves, halves[::-1]]
    for fit, test in folds:
        space = _Space.fit(counts[fit], rng)
        z_fit, z_test = space.coords(counts[fit]), space.coords(counts[test])
        for i, k in enumerate(ks):
            c, labels = _kmeans(z_fit, k, rng)
            sums = np.asarray(_one_hot(labels, k).T @ rewards[fit])
            best = np.argmax(sums, axis=1)  # each cluster's best model on the fitting half
            there = np.argmax(z_test @ c.T, axis=1)
            out[i] += float(rewards[test, best[there]].sum())
    return list(out / (FOLD_REPEATS * counts.shape[0]))


def fit_context_model(
    counts: sp.csr_matrix | Sequence[str],
    rewards: FloatArray | None = None,
    *,
    k: int | None = None,
    seed: int = 0,
    source: str = "",
) -> ContextModel:
    """Fit a context model on prompts (module docstring).

    Parameters
    ----------
    counts : sparse matrix (P, ``DIM``) or sequence of str
        The prompts' feature counts (``msroute.prompts.features.feature_matrix``), or the texts.
    rewards : ndarray, shape (P, K), optional
        Each model's reward on each prompt: needed to choose ``k``.
    k : int, optional
        The number of clusters (default: chosen by the held-out criterion among
        ``K_CANDIDATES``).
    seed : int, default 0
        Seeds the SVD, the k-means starts and the criterion's folds.
    source : str
        Where the prompts come from (recorded in ``info``).
    """
    x = feature_matrix(counts) if not sp.issparse(counts) else sp.csr_matrix(counts)
    assert isinstance(x, sp.csr_matrix)
    p = x.shape[0]
    if x.shape[1] != DIM:
        raise InvalidValueError(f"counts must have {DIM} columns (the hash buckets)")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x637478]))
    info: dict[str, Any] = {"prompts": p, "seed": seed, "source": source, "dims": DIMS}
    if k is None:
        if rewards is None:
            raise InvalidValueError("give k, or the rewards that choose it")
        r = np.asarray(rewards, dtype=np.float64)
        if r.shape[0] != p or r.ndim != 2:
            raise InvalidValueError(f"rewards must have shape ({p}, K), got {r.shape}")
        ks = [c for c in K_CANDIDATES if c <= max(1, p // 2 // MIN_PER_CLUSTER)] or [1]
        scores = _held_out(x, r, ks, rng)
        k = ks[int(np.argmax(scores))]
        info["criterion"] = {str(c): round(float(s), 6) for c, s in zip(ks, scores, strict=True)}
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= p:
        raise InvalidValueError(f"k == {k!r}, must be an integer in [1, {p}] (the prompts)")
    k = int(k)
    info["k"] = k
    space = _Space.fit(x, rng)
    c, labels = _kmeans(space.coords(x), k, rng) if k > 1 else (None, np.zeros(p, np.int64))
    weights = (
        space.idf[:, None] * (space.basis @ c.T)
        if c is not None
        else np.zeros((space.vocab.size, 1))
    )
    width = len(str(k - 1))
    return ContextModel(
        vocab=space.vocab.astype(np.int64),
        weights=weights.astype(np.float32),
        names=tuple(f"text-{j:0{width}d}" for j in range(k)),
        fallback=int(np.argmax(np.bincount(labels, minlength=k))),
        info=info,
    )
