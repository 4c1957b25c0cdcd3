"""A prompt's text as hashed n-gram counts: the features a context model reads.

Offline and dependency-free (the standard library and numpy): a prompt is cut to its first
``MAX_CHARS`` characters and split into tokens, words and single punctuation marks with their
case kept (``\\w+|[^\\w\\s]``: a lower-case search query, a capitalised trivia question, a LaTeX
formula and a Python signature look different). Its grams are

* the tokens and the pairs of adjacent tokens (word unigrams and bigrams);
* a few shape grams: the first and last token, the first and last two, the length in characters
  (``log2`` bucket) and the number of line breaks (up to 5).

Each gram is hashed (CRC-32 of its UTF-8 bytes, a hash that is the same on every machine and in
every process) into one of ``DIM`` buckets, and the prompt's features are the buckets' counts.
No vocabulary is kept and nothing is downloaded; the hashing is named ``FEATURIZER`` in every
file that stores features or a model fitted on them, so a change of it is never mixed with the
old one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from msroute._npzip import read_zip, zip_bytes
from msroute._validation import FloatArray, IntArray
from msroute.errors import DataFormatError

__all__ = [
    "DIM",
    "FEATURIZER",
    "MAX_CHARS",
    "Vocabulary",
    "feature_matrix",
    "features_bytes",
    "features_from_bytes",
    "prompt_features",
    "prompt_grams",
    "row_keys",
]

#: The hashing's name, recorded with features and models.
FEATURIZER = "msroute-words-1"

#: Hash buckets.
DIM = 1 << 18

#: Characters of a prompt read (the time per prompt is bounded).
MAX_CHARS = 20_000

_FEATURES_FORMAT = "msroute-prompt-features"
_TOKEN = re.compile(r"\w+|[^\w\s]")
_MASK = DIM - 1


def prompt_grams(text: str) -> list[str]:
    """The grams of a prompt (module docstring), in order, with repeats."""
    text = text[:MAX_CHARS]
    toks = _TOKEN.findall(text)
    grams = list(toks)
    grams += [f"{a} {b}" for a, b in itertools.pairwise(toks)]
    first, last = (toks[0], toks[-1]) if toks else ("", "")
    grams += [
        f"\x01^{first}",
        f"\x01${last}",
        "\x01^^" + " ".join(toks[:2]),
        "\x01$$" + " ".join(toks[-2:]),
        f"\x01len{int(math.log2(1 + len(text)))}",
        f"\x01nl{min(text.count(chr(10)), 5)}",
    ]
    return grams


def prompt_features(text: str) -> tuple[IntArray, FloatArray]:
    """The buckets a prompt's grams fall in (sorted, distinct) and their counts."""
    crc = zlib.crc32
    buckets = np.fromiter(
        (crc(g.encode("utf-8", "surrogatepass")) & _MASK for g in prompt_grams(text)),
        dtype=np.int64,
    )
    ids, counts = np.unique(buckets, return_counts=True)
    return ids, counts.astype(np.float64)


def feature_matrix(texts: Sequence[str]) -> sp.csr_matrix:
    """The counts of many prompts: a (P, ``DIM``) sparse matrix, one row per prompt."""
    indptr = np.zeros(len(texts) + 1, dtype=np.int64)
    cols: list[IntArray] = []
    vals: list[FloatArray] = []
    for i, text in enumerate(texts):
        ids, counts = prompt_features(text)
        cols.append(ids)
        vals.append(counts)
        indptr[i + 1] = indptr[i] + ids.size
    return sp.csr_matrix(
        (
            np.concatenate(vals) if vals else np.zeros(0),
            np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64),
            indptr,
        ),
        shape=(len(texts), DIM),
    )


def row_keys(counts: sp.csr_matrix) -> npt.NDArray[np.uint64]:
    """A key per prompt of its feature counts (P,): the first 8 bytes of the BLAKE2b of its
    buckets (sorted, little-endian int64) and their counts (little-endian float64). Prompts of
    equal features have equal keys, on every machine; a context model keeps the keys of the
    prompts it was fitted on (``msroute.prompts.tasks``)."""
    x = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    x.sum_duplicates()
    x.eliminate_zeros()
    ids, vals = x.indices.astype("<i8"), x.data.astype("<f8")
    out = np.empty(x.shape[0], dtype=np.uint64)
    for i, (a, b) in enumerate(itertools.pairwise(x.indptr.tolist())):
        digest = hashlib.blake2b(ids[a:b].tobytes(), digest_size=8)
        digest.update(vals[a:b].tobytes())
        out[i] = int.from_bytes(digest.digest(), "little")
    return out


@dataclass(frozen=True)
class Vocabulary:
    """The buckets a context model reads and their weights: those in at least two of the
    prompts it is fitted on (all of them below 50 prompts; one prompt's own words tell nothing
    about another's), ``idf = log((1 + P) / (1 + df)) + 1``."""

    vocab: IntArray  # (V,) sorted buckets
    idf: FloatArray  # (V,)

    @classmethod
    def of(cls, counts: sp.csr_matrix) -> Vocabulary:
        """The vocabulary of these prompts' counts (P, ``DIM``)."""
        p = counts.shape[0]
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        vocab = np.flatnonzero(df >= (2 if p >= 50 else 1))
        return cls(vocab, np.log((1.0 + p) / (1.0 + df[vocab])) + 1.0)

    def tfidf(self, counts: sp.csr_matrix) -> sp.csr_matrix:
        """Prompts' TF-IDF vectors over the vocabulary, (P, V): ``(1 + log count) x idf``,
        each scaled to unit length (a prompt without a vocabulary bucket stays zero)."""
        x = sp.csr_matrix(counts)[:, self.vocab].astype(np.float64)
        x.data = 1.0 + np.log(x.data)
        x = sp.csr_matrix(x @ sp.diags(self.idf))
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ x)


def _ids_digest(prompt_ids: Sequence[str]) -> str:
    return hashlib.sha256("\x1f".join(prompt_ids).encode("utf-8")).hexdigest()


def features_bytes(counts: sp.csr_matrix, prompt_ids: Sequence[str]) -> bytes:
    """A file of prompts' feature counts (a table that ships features instead of texts): one
    zip of ``manifest.json`` (the featurizer, the prompts' ids' SHA-256) and ``indptr``,
    ``indices`` (int32) and ``counts`` (uint16) of the sparse rows (``msroute._npzip``)."""
    x = sp.csr_matrix(counts)
    x.sort_indices()
    manifest = {
        "format": _FEATURES_FORMAT,
        "featurizer": FEATURIZER,
        "dim": DIM,
        "prompts": x.shape[0],
        "prompt_ids_sha256": _ids_digest(prompt_ids),
    }
    arrays: dict[str, np.ndarray] = {
        "indptr": x.indptr.astype(np.int32),
        "indices": x.indices.astype(np.int32),
        "counts": np.minimum(x.data, np.iinfo(np.uint16).max).astype(np.uint16),
    }
    return zip_bytes(json.dumps(manifest, sort_keys=True), arrays)


def features_from_bytes(blob: bytes, prompt_ids: Sequence[str], label: str) -> sp.csr_matrix:
    """The counts of ``features_bytes``, checked to be of this featurizer and of these prompts
    (``DataFormatError`` naming ``label``)."""
    manifest, arrays = read_zip(blob, label, "prompt features", DataFormatError)
    if manifest.get("format") != _FEATURES_FORMAT or manifest.get("featurizer") != FEATURIZER:
        raise DataFormatError(
            f"{label}: not prompt features of {FEATURIZER!r} (format {manifest.get('format')!r}, "
            f"featurizer {manifest.get('featurizer')!r})"
        )
    if manifest.get("prompt_ids_sha256") != _ids_digest(prompt_ids):
        raise DataFormatError(f"{label}: the features are not of the table's prompts")
    try:
        return sp.csr_matrix(
            (arrays["counts"].astype(np.float64), arrays["indices"], arrays["indptr"]),
            shape=(len(prompt_ids), DIM),
        )
    except (KeyError, ValueError) as exc:
        raise DataFormatError(f"{label}: damaged prompt features: {exc}") from exc
