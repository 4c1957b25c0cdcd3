"""Draws of a team: M i.i.d. draws from each run's routing distribution by the inverse CDF.

One comparison rule for every path, so that a run draws the same alone as in a batch: the
batched rows count the CDF entries below each uniform (one compiled loop without a mask), one
row (a live router) binary-searches its CDF, with the same draws.
"""

from __future__ import annotations

import numpy as np

from msroute._validation import BoolArray, FloatArray, IntArray
from msroute.errors import InvalidValueError

__all__ = ["sample_multinomial"]


def sample_multinomial(u: FloatArray, q: FloatArray, eligible: BoolArray | None = None) -> IntArray:
    """M i.i.d. draws from each row of ``q`` (R, K) by the inverse CDF of uniforms ``u`` (R, M).

    Rows of ``q`` (entries ``>= 0``) may be unnormalized. With an eligibility mask, ``q`` is zero
    off the mask and the CDF is cut at each row's last eligible expert, so that rounding at the
    top of the CDF cannot land on a zero-probability expert (a zero ``q_j`` repeats the previous
    CDF value exactly, so the inverse CDF never stops on it).
    """
    if q.shape[0] == 1:  # one row (a live router): a binary search of its CDF, the same draws
        return _sample_row(u, q, eligible)
    return _sample_rows(u, q, eligible)


def _sample_rows(u: FloatArray, q: FloatArray, eligible: BoolArray | None) -> IntArray:
    """``sample_multinomial`` of every row at once: count the CDF entries below each u."""
    k = q.shape[1]
    if u.shape[0] != q.shape[0]:
        raise InvalidValueError(f"uniforms for {u.shape[0]} rows, a distribution of {q.shape[0]}")
    if eligible is None:  # the simulator's case: one compiled loop, the same comparisons
        from msroute.policies._compiled.multinomial import inverse_cdf_draws  # numba, on first use

        out = np.empty(u.shape, dtype=np.int64)
        inverse_cdf_draws(u, q, out)
        return out
    cdf = q.cumsum(axis=1)
    u = u * cdf[:, -1:]
    last = k - 1 - np.argmax(eligible[:, ::-1], axis=1)
    cdf = np.where(np.arange(k) >= last[:, None], np.inf, cdf)
    return np.asarray((u[:, :, None] >= cdf[:, None, :]).sum(axis=2), dtype=np.int64)


def _sample_row(u: FloatArray, q: FloatArray, eligible: BoolArray | None) -> IntArray:
    """``sample_multinomial`` of one row (1, K), by binary search: the same draws.

    The CDF of ``q >= 0`` is nondecreasing (adding a float ``>= 0`` never rounds down), so the
    number of its entries ``<= u`` that the batched comparison counts is the insertion point
    of ``u`` to the right. The batched form caps that count at ``K - 1``, or with a mask puts
    ``inf`` from the last eligible expert on: both count only the entries before that expert.
    """
    cdf = q[0].cumsum()
    k = cdf.shape[0]
    last = k - 1 if eligible is None else k - 1 - int(eligible[0, ::-1].argmax())
    draws = cdf[:last].searchsorted(u[0] * cdf[-1], side="right")
    return np.asarray(draws, dtype=np.int64)[None, :]
