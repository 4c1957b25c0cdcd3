"""Time sums streamed round by round, equal bit for bit to the metrics on the full arrays.

A long run need not keep its (T, R, ...) per-round arrays when only their time averages and a
few running averages are asked for: this module accumulates them as the rounds arrive, in
memory independent of T, and gives exactly the numbers ``msroute.metrics.time_averaged``
and ``msroute.metrics.running_average`` give on the full arrays:

* ``PairwiseSum`` sums each entry over time in numpy's own pairwise order (the order of
  ``x.sum()`` along a contiguous row: leaves of at most 128 rounds, each summed with numpy's
  8-way unrolled loop, combined by halving the range, as ``pairwise_sum`` in numpy's
  ``loops_utils``), so its sum divided by T is ``time_averaged`` bit for bit;
* a plain running sum is ``cumsum`` along the time axis, the sum ``running_average`` divides.
"""

from __future__ import annotations

import numpy as np

from msroute._validation import FloatArray, check_positive_int
from msroute.errors import InvalidValueError

__all__ = ["PairwiseSum", "pairwise_plan"]

#: numpy's block size of pairwise summation (``PW_BLOCKSIZE``).
_LEAF = 128
#: Marks a combination of the last two partial sums in a plan.
_ADD = -1


def pairwise_plan(n: int) -> list[int]:
    """The order in which numpy sums ``n`` contiguous values, as a postfix program.

    Entries ``m > 0`` sum the next ``m`` values (a leaf, ``m <= 128``); ``-1`` adds the last two
    partial sums. numpy splits a range of ``n > 128`` values at ``n2 = n // 2 - (n // 2) % 8``.

    Examples
    --------
    >>> pairwise_plan(100)
    [100]
    >>> pairwise_plan(300)  # 300 = 144 + 156, 144 = 72 + 72, 156 = 72 + 84
    [72, 72, -1, 72, 84, -1, -1]
    """
    plan: list[int] = []
    stack = [(n, False)]
    while stack:
        size, expanded = stack.pop()
        if size <= _LEAF:
            plan.append(size)
        elif expanded:
            plan.append(_ADD)
        else:
            half = size // 2 - (size // 2) % 8
            stack += [(size, True), (size - half, False), (half, False)]
    return plan


class PairwiseSum:
    """Sum over T rounds of values of a fixed shape, in numpy's pairwise order.

    Parameters
    ----------
    horizon : int
        T, the number of rounds that will be added.
    shape : tuple of int
        Shape of one round's value, e.g. (R,) or (R, d).

    Examples
    --------
    >>> x = np.random.default_rng(0).random((1000, 3))
    >>> acc = PairwiseSum(1000, (3,))
    >>> for row in x:
    ...     acc.add(row)
    >>> bool(np.array_equal(acc.total(), np.ascontiguousarray(x.T).sum(axis=-1)))
    True
    """

    def __init__(self, horizon: int, shape: tuple[int, ...]) -> None:
        self.horizon = check_positive_int(horizon, "horizon")
        self._plan = pairwise_plan(self.horizon)
        self._step = 0  # the next entry of the plan: always a leaf while rounds are expected
        self._leaf: FloatArray = np.empty((*shape, min(_LEAF, self.horizon)))
        self._filled = 0
        self._partial: list[FloatArray] = []
        self.count = 0

    def add(self, value: FloatArray) -> None:
        """Add one round's value."""
        if self.count >= self.horizon:
            raise InvalidValueError(f"all {self.horizon} rounds have been added")
        self._leaf[..., self._filled] = value
        self._filled += 1
        self.count += 1
        if self._filled == self._plan[self._step]:
            self._close_leaf()

    def add_rounds(self, values: FloatArray) -> None:
        """Add several rounds' values at once, shape (rounds, *shape): the same sum as one
        ``add`` per round."""
        n = values.shape[0]
        if self.count + n > self.horizon:
            raise InvalidValueError(
                f"{n} more rounds would exceed the {self.horizon} rounds ({self.count} added)"
            )
        done = 0
        while done < n:
            take = min(self._plan[self._step] - self._filled, n - done)
            rows = np.moveaxis(values[done : done + take], 0, -1)
            self._leaf[..., self._filled : self._filled + take] = rows
            self._filled += take
            self.count += take
            done += take
            if self._filled == self._plan[self._step]:
                self._close_leaf()

    def _close_leaf(self) -> None:
        """Sum the full leaf and combine the partial sums the plan says to."""
        self._partial.append(self._leaf[..., : self._filled].sum(axis=-1))
        self._filled = 0
        self._step += 1
        while self._step < len(self._plan) and self._plan[self._step] == _ADD:
            right = self._partial.pop()
            self._partial[-1] = self._partial[-1] + right
            self._step += 1

    def total(self) -> FloatArray:
        """The sum over all T rounds (after the last one was added)."""
        if self.count != self.horizon:
            raise InvalidValueError(f"{self.count} of {self.horizon} rounds added so far")
        return self._partial[0]
