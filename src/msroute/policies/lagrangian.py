"""The Lagrangian dual of the constraint-aware baselines (CBwK, TS-BwK and MoE, Section 6.3).

The paper's baselines enforce the long-term bounds with a multiplier vector ``lambda >= 0``
that enters as ``(lambda ⊙ sign)^T c``: CBwK and TS-BwK add it to each expert's score with
``c = C[:, i]`` (the expert's cost vector), MoE adds it to the reward with ``c = x_t`` (the
round's realized cost). ``lambda`` starts at 0 and takes one projected subgradient-ascent step
per round on the constraint violation: ``lambda <- max(0, lambda + step * violation)``.

Readings of the text (docs/architecture.md, "Decided readings", Baselines), chosen so that the dual
does what Section 6.3 says it does ("steering away from constraint-violating arms as lambda grows"):

* **One multiplier per bound, not per coordinate.** A coordinate with both an upper and a
  lower bound gets two multipliers, one for each side; they never both grow at once.
* **Sign.** ``sign = -1`` for an upper bound ``u_j`` and ``+1`` for a lower bound ``l_j``. A
  growing multiplier of a violated upper bound then *lowers* the score of the experts that
  load coordinate ``j`` (fewer of them are routed, the cost falls), and one of an unmet lower
  bound *raises* it (more of them are routed, the cost rises). The opposite sign would push
  the cost further out of the box.
* **Violation.** ``avg_j - u_j`` for an upper bound and ``l_j - avg_j`` for a lower one, positive
  exactly when the bound is broken, so the ascent raises ``lambda`` while it is broken and lets
  it decay back to 0 once the bound holds with room. ``violation="average"`` (the default for
  CBwK and TS-BwK, as Section 6.3 writes "running-average constraint violation") measures it on
  the running average of the realized costs seen so far; ``violation="round"`` measures it on
  the current round's realized cost (the default for MoE, whose text does not say, and the
  usual primal-dual reading). The two readings behave differently: the running average moves
  slowly, so its violation keeps its sign for many rounds and ``lambda`` overshoots and
  oscillates with a large amplitude; the per-round violation averages out around the bound.
* **Units.** The violation and the penalty are measured in normalized units: coordinate ``j``
  is divided by its scale ``s_j`` (``msroute.policies.duals.cost_scale``, the column's
  largest cost). A fixed step then means the same thing for a budget in dollars and a share
  in [0, 1], and multiplying a cost column and its bounds by any factor leaves ``lambda``
  and every decision unchanged. On the paper's instances every column's largest cost is 1, so
  this is the paper's dual exactly there.
* **Which box.** The bounds are those of the original box ``S_ori`` on the realized cost (each
  distinct routed expert counted once), the quantity whose time average the feasibility
  metric checks, not the surrogate box of Section 4.2. Absent bounds (infinite) have no effect:
  their multiplier stays at 0.
"""

from __future__ import annotations

from functools import cache
from typing import ClassVar, Literal, get_args

import numpy as np
from numpy.typing import ArrayLike

from msroute._validation import FloatArray, IntArray
from msroute.errors import InvalidValueError
from msroute.policies.base import check_hyper

__all__ = ["VIOLATIONS", "LagrangianDual", "Violation", "check_violation"]

Violation = Literal["average", "round"]
#: The accepted values of ``violation``.
VIOLATIONS: tuple[str, ...] = get_args(Violation)


def check_violation(value: object) -> Violation:
    """Validate the ``violation`` keyword ("average" or "round")."""
    if value == "average":
        return "average"
    if value == "round":
        return "round"
    raise InvalidValueError(
        f"violation == {value!r}, must be 'average' (running-average realized cost) or "
        "'round' (this round's realized cost)"
    )


class LagrangianDual:
    """Multipliers ``lambda >= 0`` on the bounds of ``S_ori``, one per bound, batched over runs.

    The bound rows are the upper bounds of the coordinates that have one in any run, followed by
    the lower bounds likewise; a run whose own box lacks a row's bound keeps that multiplier at 0.

    Parameters
    ----------
    lo, hi : array_like, shape (R, d)
        The original box of each run: lower and upper bounds, ``-inf`` / ``+inf`` where absent
        (``ProblemBatch.lo_ori``, ``ProblemBatch.hi_ori``).
    step : float
        Subgradient step size (``10 / sqrt(T)`` for CBwK and TS-BwK, ``4e-4`` for MoE).
    violation : {"average", "round"}, default "average"
        Violation of the running-average realized cost or of the round's realized cost.
    scale : array_like, shape (R, d), optional
        The unit of each cost coordinate; violations and penalties are measured in
        ``x / scale``. Default 1 (the costs' own units).

    Attributes
    ----------
    lam : ndarray, shape (R, B)
        The multipliers, one per bound row.
    coord : ndarray of int, shape (B,)
        Cost coordinate of each bound row.
    sign : ndarray, shape (B,)
        ``-1`` for an upper-bound row, ``+1`` for a lower-bound row.

    Examples
    --------
    >>> dual = LagrangianDual([[-np.inf]], [[1.0]], step=0.5)
    >>> dual.step(np.array([[3.0]]))  # average cost 3 > u = 1: lambda = 0.5 * 2
    >>> dual.lam.tolist()
    [[1.0]]
    >>> dual.penalty(np.array([[[2.0], [0.0]]])).tolist()  # -lambda * c_i per expert
    [[-2.0, 0.0]]
    """

    #: What changes as the dual learns (persistence; the rest comes from the constructor).
    _state_attrs: ClassVar[tuple[str, ...]] = ("lam", "_cost_sum", "n_steps")
    #: Multipliers and realized costs are ``>= 0`` (``check_state``).
    _state_rules: ClassVar[dict[str, str]] = {"lam": "nonnegative", "_cost_sum": "nonnegative"}

    def __init__(
        self,
        lo: ArrayLike,
        hi: ArrayLike,
        *,
        step: float,
        violation: Violation = "average",
        scale: ArrayLike | None = None,
    ) -> None:
        lo_a = np.asarray(lo, dtype=np.float64)
        hi_a = np.asarray(hi, dtype=np.float64)
        if lo_a.ndim != 2 or lo_a.shape != hi_a.shape:
            raise InvalidValueError(
                f"lo and hi must both have shape (R, d), got {lo_a.shape} and {hi_a.shape}"
            )
        self.step_size = check_hyper(step, "dual_step")
        self.violation: Violation = check_violation(violation)
        n_runs, n_costs = lo_a.shape
        sc = np.ones(lo_a.shape) if scale is None else np.asarray(scale, dtype=np.float64)
        if sc.shape != lo_a.shape or not np.all(np.isfinite(sc) & (sc > 0)):
            raise InvalidValueError(f"scale must be positive and finite of shape {lo_a.shape}")
        self.scale: FloatArray = sc
        upper = np.flatnonzero(np.isfinite(hi_a).any(axis=0))
        lower = np.flatnonzero(np.isfinite(lo_a).any(axis=0))
        self.coord: IntArray = np.concatenate([upper, lower]).astype(np.int64)
        self.sign: FloatArray = np.concatenate([-np.ones(upper.size), np.ones(lower.size)])
        bound = np.concatenate([hi_a[:, upper] / sc[:, upper], lo_a[:, lower] / sc[:, lower]], 1)
        self._active = np.isfinite(bound)
        self._bound: FloatArray = np.where(self._active, bound, 0.0)
        self.lam: FloatArray = np.zeros(bound.shape)
        # (B, d) map of the rows to their coordinates, with the rows' signs: w = lam @ rows.
        self._signed_rows: FloatArray = np.zeros((self.coord.size, n_costs))
        self._signed_rows[np.arange(self.coord.size), self.coord] = self.sign
        self._cost_sum: FloatArray = np.zeros((n_runs, n_costs))
        self.n_steps = 0
        # Per bound row, for the violations: its coordinate's scale and its negated sign.
        self._row_scale: FloatArray = sc[:, self.coord]
        self._neg_sign: FloatArray = -self.sign
        # The usual box, one upper bound per coordinate in every run: the rows are the columns.
        self._rows_are_columns = bool(
            np.array_equal(self.coord, np.arange(n_costs)) and self._active.all()
        )

    def weights(self) -> FloatArray:
        """``lambda ⊙ sign`` gathered per cost coordinate, per unit of cost, shape (R, d).

        A coordinate with both bounds gets the difference of its two multipliers; each is
        divided by the coordinate's scale, so that ``weights() . x`` is the penalty of a cost
        ``x`` in the user's units.
        """
        return np.asarray(self.lam @ self._signed_rows / self.scale, dtype=np.float64)

    def penalty(self, costs: FloatArray) -> FloatArray:
        """The score term ``(lambda ⊙ sign)^T C[:, i]`` of every expert, shape (R, K).

        A batch's (R, K, 2) costs are priced in one compiled loop where it gives numpy's
        floats (``_compiled_penalty_agrees``), else by numpy's product.

        Parameters
        ----------
        costs : ndarray, shape (R, K, d) or (K, d)
            Cost vectors of the experts (per run, or shared).
        """
        w = self.weights()
        if (
            costs.ndim == 3
            and costs.shape[0] > 1
            and costs.shape[2] == 2
            and costs.flags.c_contiguous
            and costs.dtype == np.float64
            and _compiled_penalty_agrees(costs.shape[1])
        ):
            from msroute.policies._compiled.dual import penalties  # numba, on first use

            out = np.empty(costs.shape[:2])
            penalties(costs, w, out)
            return out
        return _matmul_penalty(costs, w)

    def value(self, cost: FloatArray) -> FloatArray:
        """``(lambda ⊙ sign)^T x`` for one cost vector per run: cost (R, d) -> (R,)."""
        return np.asarray(np.sum(self.weights() * cost, axis=1), dtype=np.float64)

    def violations(self, cost: FloatArray) -> FloatArray:
        """Signed violation of every bound row by cost vectors (R, d): shape (R, B).

        ``x_j - u_j`` for an upper bound, ``l_j - x_j`` for a lower bound, 0 where a run has no
        such bound; in normalized units (divided by the coordinate's scale).
        """
        if self._rows_are_columns:  # the same values, without the gather and the mask
            return self._neg_sign * (cost / self._row_scale - self._bound)
        gap = cost[:, self.coord] / self._row_scale - self._bound
        return np.where(self._active, self._neg_sign * gap, 0.0)

    def step(self, cost: FloatArray) -> None:
        """One projected subgradient-ascent step with the round's realized costs (R, d).

        A batch of runs steps in one compiled loop (the same floats; numba on first use), a
        single run (a live router) by numpy.
        """
        self.n_steps += 1
        if self.lam.shape[0] > 1:
            from msroute.policies._compiled.dual import dual_step

            average = self.violation == "average"
            lam = np.empty(self.lam.shape)
            dual_step(
                self.lam,
                self._cost_sum,
                np.asarray(cost, dtype=np.float64),
                self.n_steps if average else 0,
                self.coord,
                self._row_scale,
                self._bound,
                self._neg_sign,
                self._active,
                self.step_size,
                lam,
            )
            self.lam = lam
            return
        if self.violation == "average":
            self._cost_sum += cost
            x = self._cost_sum / self.n_steps
        else:
            x = cost
        v = self.violations(x)
        v *= self.step_size
        v += self.lam
        self.lam = np.maximum(0.0, v, out=v)


def _matmul_penalty(costs: FloatArray, weights: FloatArray) -> FloatArray:
    """numpy's ``costs . weights`` per expert: costs (R, K, d) or (K, d), weights (R, d)."""
    return np.asarray(np.matmul(costs, weights[:, :, None])[..., 0], dtype=np.float64)


@cache
def _compiled_penalty_agrees(n_experts: int) -> bool:
    """Whether ``msroute.policies._compiled.dual.penalties`` gives numpy's floats for K experts.

    numpy hands the product to its BLAS, whose order of operations depends on the library, the
    CPU and the shapes (with K = 1 numpy takes a dot product instead); probed once per process
    and K on costs and weights spread over seven decades, of both signs, where a plain sum, an
    FMA the other way round and this one differ. The loop is kept because it is cheaper than
    the product and a plain order would change the floats (``benchmarks/bench_blas_order.py``,
    ``tests/test_outcome.py``).
    """
    from msroute.policies._compiled.dual import penalties

    rng = np.random.default_rng(20240602)
    n_runs = 16
    costs = rng.random((n_runs, n_experts, 2)) * 10.0 ** rng.integers(-3, 4, (n_runs, n_experts, 2))
    weights = rng.normal(size=(n_runs, 2)) * 10.0 ** rng.integers(-3, 4, (n_runs, 2))
    got = np.empty((n_runs, n_experts))
    penalties(costs, weights, got)
    return bool(np.array_equal(got, _matmul_penalty(costs, weights)))
