"""The MSR instances built from crowd data (the paper's Section 6.1).

From a ``CrowdData`` table:

* a pool of K workers, drawn uniformly without replacement from the reliable ones
  (``sample_instance``) or given explicitly (``build_instance``);
* the sorted task ids are split round-robin into N groups (the j-th task goes to group
  ``j mod N``); ``V_base[n, i]`` is worker i's accuracy on group n's tasks, imputed with the
  worker's overall accuracy when they have no annotation in group n;
* costs, computed within the pool: workload = annotation count / the pool's largest count, and
  an expert flag = 1 for the pool's ``n_flagged`` (10) most accurate workers, ties going to the
  lower worker id.

Optionally (``shrinkage="eb"``, off for the paper's instance) every accuracy is an
empirical-Bayes posterior mean instead of a raw hit rate, in two levels fitted to the pool's
annotation counts: a worker's accuracy is shrunk toward the pool's mean, and their accuracy on a
task group toward their own shrunk accuracy (``fit_beta_prior``,
``fit_beta_strength``), so that a worker with 5 of 5 gold answers right no longer counts as
a perfect expert, nor one with 1 of 1 in a group as perfect on that group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from msroute._seeding import as_generator
from msroute._validation import FloatArray, IntArray, check_positive_int, read_only
from msroute.datasets.crowd import DEFAULT_MIN_ANNOTATIONS, SPLITS, CrowdData
from msroute.errors import DataFormatError, InvalidTypeError, InvalidValueError

__all__ = [
    "COST_NAMES",
    "Instance",
    "build_instance",
    "fit_beta_prior",
    "fit_beta_strength",
    "sample_instance",
]


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
        object.__setattr__(self, "skills_base", read_only(skills))
        object.__setattr__(self, "costs", read_only(costs))
        object.__setattr__(self, "accuracy", read_only(accuracy))
        object.__setattr__(self, "annotations", read_only(annotations))
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
        """JSON-ready form; ``from_dict`` rebuilds the instance exactly."""
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
        """Inverse of ``to_dict`` (the derived ``n_dims`` and ``n_experts`` are ignored)."""
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
#: ``fit_beta_strength``): no overdispersion at all would mean an infinitely strong prior.
_RHO_MIN = 1e-6


def fit_beta_strength(hits: ArrayLike, trials: ArrayLike, groups: ArrayLike | None = None) -> float:
    """Empirical-Bayes strength ``a + b`` of a Beta prior of binomial counts (method of moments).

    Unit ``j`` has ``hits[j]`` successes in ``trials[j]`` trials; its success rate is drawn from
    a Beta prior of strength ``a + b`` around its group's mean (one group when ``groups`` is
    None). The strength comes from the intra-class correlation ``rho = 1 / (a + b + 1)``: in
    group g (``J_g`` units with a trial, ``n_g`` trials, pooled rate ``p_g``) the weighted sum
    of squares ``S_g = sum_j n_j (x_j - p_g)^2`` (``x_j = hits_j / n_j``) has expectation
    ``p_g (1 - p_g) [(J_g - 1) + rho (n_g - sum_j n_j^2 / n_g - (J_g - 1))]`` under the
    beta-binomial model (Kleinman 1973), so, pooled over the groups:

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
    ``sum hits / sum trials``, strength ``fit_beta_strength``.

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


def _check_data(data: object) -> None:
    """``InvalidTypeError`` unless ``data`` is a ``CrowdData`` (what ``load_crowd`` returns)."""
    if not isinstance(data, CrowdData):
        raise InvalidTypeError(
            f"data must be a CrowdData (see load_crowd), got {type(data).__name__}"
        )


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
        Beta(a, b) that ``fit_beta_prior`` fits to the K workers' counts (mean: the pool's
        pooled accuracy). (2) Their accuracy on group n is ``(h_ni + t mu_i) / (a_ni + t)``
        with ``t`` the strength ``fit_beta_strength`` fits to the (worker, group) counts
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
    _check_data(data)
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
        How tasks are grouped (see ``build_instance``).
    shrinkage : {None, "eb"}, default None
        Empirical-Bayes shrinkage of the accuracies (see ``build_instance``).

    Returns
    -------
    Instance

    Raises
    ------
    DataFormatError
        Fewer reliable workers than ``n_experts``.
    InvalidTypeError, InvalidValueError
        ``data`` is not a CrowdData, or ``seed`` is not one of the types above (or is < 0).

    Examples
    --------
    >>> from msroute.datasets import load_crowd
    >>> inst = sample_instance(load_crowd(), n_experts=50, n_dims=3, seed=0)
    >>> inst.skills_base.shape, inst.costs.shape, int(inst.costs[:, 1].sum())
    ((3, 50), (50, 2), 10)
    """
    _check_data(data)
    k = check_positive_int(n_experts, "n_experts")
    rng = as_generator(seed)
    reliable = data.reliable_workers(min_annotations)
    if reliable.size < k:
        raise DataFormatError(
            f"{data.source} has only {reliable.size} reliable workers (>= {min_annotations} "
            f"annotations), fewer than the {k} requested"
        )
    pool = np.sort(rng.choice(reliable, size=k, replace=False))
    return build_instance(data, pool, n_dims, n_flagged=n_flagged, split=split, shrinkage=shrinkage)
