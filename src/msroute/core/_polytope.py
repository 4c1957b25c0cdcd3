"""The feasible set of the OPT programs: ``P = {q >= floor, sum q = 1, lo <= C^T q <= hi}``.

Its constraints in the forms scipy's SLSQP and HiGHS take, a relative-interior point (a linear
program that also detects an empty ``P`` and says which bounds make it so), the exact move of
a nearly feasible point into ``P`` (``msroute.core.oracle`` step 3) and the linear programs over
``P`` of the Frank-Wolfe certificate (step 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from msroute._validation import FloatArray
from msroute.core.bounds import unreachable_bounds
from msroute.errors import InfeasibleConstraintsError

__all__ = ["Polytope"]

#: HiGHS tolerances for the certificate and feasibility LPs: the certificate is only as good
#: as the LP's optimality, so the defaults (1e-7) are tightened.
_LP_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}

#: Constraint violations below this (relative to the data's scale) count as rounding.
_ROUNDING = 1e-12


class Polytope:
    """``P = {q : q >= floor, sum q = 1, lo <= C^T q <= hi}`` with an interior point.

    With ``blocks = X > 1``, ``q`` stacks X policies of ``K = len(q) / X`` experts each (one
    per context), every block sums to one, and ``C`` (X K, d) holds the context-weighted
    costs, so that ``C^T q`` is the aggregate cost of the contextual comparator.
    """

    def __init__(
        self, costs: FloatArray, lo: FloatArray, hi: FloatArray, floor: float, blocks: int = 1
    ) -> None:
        self.costs = costs
        self.lo = lo
        self.hi = hi
        self.floor = floor
        self.blocks = blocks
        k = costs.shape[0]
        self.a_ub = np.vstack([costs.T, -costs.T])
        self.b_ub = np.concatenate([hi, -lo])
        self.a_eq = np.kron(np.eye(blocks), np.ones((1, k // blocks)))
        self.b_eq = np.ones(blocks)
        self.scale = max(1.0, float(np.abs(costs).max()), float(np.abs(self.b_ub).max()))
        self.center, self.slack = self._interior_point()

    def _interior_point(self) -> tuple[FloatArray, FloatArray]:
        """Maximise the smallest slack ``tau`` of all inequalities (a Chebyshev-like centre)."""
        k, d = self.costs.shape
        # Variables (q, tau): max tau s.t. q_i - tau >= floor, C^T q + tau <= hi,
        # -C^T q + tau <= -lo, sum q = 1, tau <= 1.
        a_ub = np.block(
            [
                [-np.eye(k), np.ones((k, 1))],
                [self.a_ub, np.ones((2 * d, 1))],
            ]
        )
        b_ub = np.concatenate([np.full(k, -self.floor), self.b_ub])
        a_eq = np.hstack([self.a_eq, np.zeros((self.blocks, 1))])
        cost = np.zeros(k + 1)
        cost[-1] = -1.0
        bounds = [(None, None)] * k + [(None, 1.0)]
        res = self._highs(cost, a_ub, b_ub, a_eq, bounds)
        if res.status != 0:  # pragma: no cover - bounded and feasible by construction
            raise InfeasibleConstraintsError(f"interior-point LP failed: {res.message}")
        tau = float(res.x[-1])
        if tau < -1e-9 * self.scale:
            raise InfeasibleConstraintsError(
                self._infeasible_message(tau, self.costs.T @ res.x[:k])
            )
        q = self._onto_floored_simplex(np.asarray(res.x[:k], dtype=np.float64))
        slack = self.b_ub - self.a_ub @ q
        return q, np.where(slack > _ROUNDING * self.scale, slack, 0.0)

    def _infeasible_message(self, tau: float, closest: FloatArray) -> str:
        detail = unreachable_bounds(self.costs, self.floor, self.lo, self.hi, closest)
        return (
            f"no routing policy q >= floor = {self.floor:.6g} on the simplex has "
            f"lo <= C^T q <= hi (the best point misses by {-tau:.3g}): {detail}"
        )

    def _onto_floored_simplex(self, q: FloatArray) -> FloatArray:
        """Rescale ``q`` (nearly in the floored simplex) to sum to one with ``q >= floor``
        (each block on its own)."""
        if self.blocks > 1:
            parts = np.split(q, self.blocks)
            return np.concatenate([self._onto_one_simplex(b) for b in parts])
        return self._onto_one_simplex(q)

    def _onto_one_simplex(self, q: FloatArray) -> FloatArray:
        k = q.shape[0]
        excess = np.maximum(q - self.floor, 0.0)
        free = max(1.0 - k * self.floor, 0.0)
        total = float(excess.sum())
        if total <= 0.0 or free == 0.0:
            return np.full(k, 1.0 / k) if free == 0.0 else np.full(k, self.floor + free / k)
        return np.asarray(self.floor + free * (excess / total), dtype=np.float64)

    def repair(self, q: FloatArray) -> FloatArray:
        """Move ``q`` into ``P``: onto the floored simplex, then towards the interior point.

        Mixing ``(1 - lam) q + lam * center`` keeps the floor and the sum exactly; ``lam`` is
        the smallest that clears every violated inequality on which the centre has slack.
        A violation the centre cannot clear (an inequality tight on all of ``P``) is left if
        it is at rounding level, else ``q`` is replaced by its L1-nearest point of ``P``.
        """
        q = self._onto_floored_simplex(q)
        viol = self.a_ub @ q - self.b_ub
        fixable = (viol > 0.0) & (self.slack > 0.0)
        if np.any(fixable):
            lam = float(np.max(viol[fixable] / (viol[fixable] + self.slack[fixable])))
            q = (1.0 - lam) * q + lam * self.center
            viol = self.a_ub @ q - self.b_ub
        if float(viol.max()) > _ROUNDING * self.scale:
            q = self._onto_floored_simplex(self._nearest_l1(q))
        return np.asarray(q, dtype=np.float64)

    def _nearest_l1(self, q: FloatArray) -> FloatArray:
        """The point of ``P`` nearest to ``q`` in the L1 norm (an LP in ``(p, e)``)."""
        k = q.shape[0]
        eye = np.eye(k)
        # min sum e  s.t.  p - e <= q,  -p - e <= -q,  A_ub p <= b_ub,  sum p = 1, p >= floor.
        a_ub = np.block(
            [
                [eye, -eye],
                [-eye, -eye],
                [self.a_ub, np.zeros((self.a_ub.shape[0], k))],
            ]
        )
        b_ub = np.concatenate([q, -q, self.b_ub])
        a_eq = np.hstack([self.a_eq, np.zeros((self.blocks, k))])
        cost = np.concatenate([np.zeros(k), np.ones(k)])
        bounds = [(self.floor, None)] * k + [(0.0, None)] * k
        res = self._highs(cost, a_ub, b_ub, a_eq, bounds)
        if res.status != 0:  # pragma: no cover - P is non-empty here
            raise RuntimeError(f"projection LP failed: {res.message}")
        return np.asarray(res.x[:k], dtype=np.float64)

    def linear_max(self, g: FloatArray) -> FloatArray:
        """A vertex ``s`` of ``P`` maximising ``g . s`` (the Frank-Wolfe oracle)."""
        res = self._highs(-g, self.a_ub, self.b_ub, self.a_eq, [(self.floor, None)] * g.shape[0])
        if res.status != 0:  # pragma: no cover - P is non-empty and bounded here
            raise RuntimeError(f"Frank-Wolfe LP failed: {res.message}")
        return np.asarray(res.x, dtype=np.float64)

    def multipliers(self, g: FloatArray) -> FloatArray:
        """The bounds' Lagrange multipliers at the maximiser of ``g . s`` over ``P``: (d,), in
        units of ``g`` per unit of ``C^T q``; positive where an upper bound binds, negative
        where a lower one does, 0 where neither. At an optimum ``q*`` of a concave ``F`` and
        ``g = grad F(q*)`` these are the KKT multipliers of the bounds (``q*`` maximises the
        linearisation too)."""
        res = self._highs(-g, self.a_ub, self.b_ub, self.a_eq, [(self.floor, None)] * g.shape[0])
        if res.status != 0:  # pragma: no cover - P is non-empty and bounded here
            raise RuntimeError(f"multiplier LP failed: {res.message}")
        dual = -np.asarray(res.ineqlin.marginals, dtype=np.float64)  # >= 0, per row of a_ub
        d = self.costs.shape[1]
        return np.asarray(dual[:d] - dual[d:], dtype=np.float64)

    def _highs(
        self,
        cost: np.ndarray,
        a_ub: np.ndarray,
        b_ub: np.ndarray,
        a_eq: np.ndarray,
        bounds: Sequence[tuple[float | None, float | None]],
    ) -> Any:
        """HiGHS on ``min cost . x`` s.t. ``a_ub x <= b_ub``, ``a_eq x = b_eq`` (the blocks sum to
        one) and ``bounds``, at the tightened tolerances ``_LP_OPTIONS``."""
        from scipy.optimize import linprog

        return linprog(
            cost,
            A_ub=a_ub,
            b_ub=b_ub,
            A_eq=a_eq,
            b_eq=self.b_eq,
            bounds=bounds,
            method="highs",
            options=_LP_OPTIONS,
        )

    def slsqp_constraints(self) -> list[dict[str, Any]]:
        a_ub, b_ub = self.a_ub, self.b_ub
        if self.blocks > 1:
            a_eq, b_eq = self.a_eq, self.b_eq
            return [
                {"type": "eq", "fun": lambda q: a_eq @ q - b_eq, "jac": lambda q: a_eq},
                {"type": "ineq", "fun": lambda q: b_ub - a_ub @ q, "jac": lambda q: -a_ub},
            ]
        k = self.costs.shape[0]
        ones = np.ones(k)
        return [
            {"type": "eq", "fun": lambda q: np.array([q.sum() - 1.0]), "jac": lambda q: ones[None]},
            {"type": "ineq", "fun": lambda q: b_ub - a_ub @ q, "jac": lambda q: -a_ub},
        ]
