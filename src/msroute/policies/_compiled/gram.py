"""The dense model fit's statistics credited with a batch's round, compiled (numba).

``msroute.policies.reward_model.ModelGradient`` adds each round's ``x x^T`` to a run's Gram
matrix and ``reward x`` to its moment, ``x`` being 0/1 (the intercept and the routed experts).
numpy's fancy-indexed add gathers, adds and scatters R (M + 1)^2 entries; this loop adds in
place: ``1.0`` once to each distinct entry of the features' pairs and ``reward`` once to each
distinct feature, one rounding each, so the floats are numpy's.
"""

from __future__ import annotations

from msroute._jit import compiled, repeated
from msroute._validation import FloatArray, IntArray

__all__ = ["add_rounds"]


@compiled
def add_rounds(
    gram: FloatArray, moment: FloatArray, cells: IntArray, idx: IntArray, reward: FloatArray
) -> None:
    """``gram[c] += x x^T`` and ``moment[c] += reward[r] x`` for each row ``r`` of a batch.

    ``gram`` (C, P, P) and ``moment`` (C, P): the fit's statistics per (run, context) cell;
    ``cells`` (R,) distinct cells; ``idx`` (R, M + 1) the indices of ``x``'s nonzero features
    (a repeated one counted once); ``reward`` (R,).
    """
    width = idx.shape[1]
    for r in range(cells.size):
        c = cells[r]
        for a in range(width):
            if repeated(idx, r, a):
                continue
            i = idx[r, a]
            moment[c, i] += reward[r]
            for b in range(width):
                if not repeated(idx, r, b):
                    gram[c, i, idx[r, b]] += 1.0
