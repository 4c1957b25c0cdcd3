"""Confidence intervals for importance-weighted means that hold with heavy-tailed weights.

A router's log concentrates as it learns, so the importance weights of a candidate far from its
routing are heavy-tailed: a few late decisions carry weights in the hundreds, most samples never
show them, and an interval built from the sample deviation (the normal approximation) covers far
less often than its level. Betting intervals (Waudby-Smith and Ramdas, "Estimating means of
bounded random variables by betting", JRSS-B 2024; for off-policy evaluation, Waudby-Smith et al.,
"Anytime-valid off-policy inference for contextual bandits", 2022) need no variance and no bound
on the weights, only:

* ``x_t = w_t y_t >= 0`` with ``y_t`` in ``[0, 1]`` (a reward or cost rescaled by its range), so
  that a bettor's capital ``prod_t (1 + lambda_t (x_t - m))`` with ``0 <= lambda_t <= c / m``
  stays positive; under the hypothesis "the mean is at most ``m``" its expectation is at most one,
  and by Markov's inequality it reaches ``2 / alpha`` with probability at most ``alpha / 2``. The
  lower bound is the smallest ``m`` the capital does not reject.
* ``E[w_t] = 1`` (the log drew with positive probability every expert the candidate plays, within
  each decision's eligible set): then ``x'_t = w_t (1 - y_t) >= 0`` has mean ``1 - mean(y)``,
  and its lower bound is an upper bound on the mean.

The bets ``lambda_t`` are predictable (they use the decisions before ``t`` only): the fixed-time
plug-in ``sqrt(2 log(2 / alpha) / (n sigma_{t-1}^2))`` of the cited papers, with a running
variance estimate, capped at ``c / m`` (c = 1/2).
"""

from __future__ import annotations

import math

import numpy as np

from msroute._validation import FloatArray

__all__ = ["betting_interval"]

#: The cap ``lambda_t <= CAP / m``: the capital keeps at least 1 - CAP of itself on any loss.
CAP = 0.5
#: Bisection steps on [0, 1]: the bound to 2^-60 of the range.
_STEPS = 60


def _bets(x: FloatArray, alpha: float) -> FloatArray:
    """The predictable plug-in bets: ``sqrt(2 log(2/alpha) / (n sigma^2_{t-1}))``, where
    ``sigma^2_{t-1}`` is the running mean of squared deviations from the running mean (both
    started at the uniform [0, 1] prior, mean 1/2 and variance 1/4)."""
    n = x.size
    t = np.arange(1, n + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(x)) / (t + 1.0)
    mu_before = np.concatenate(([0.5], mu[:-1]))
    sq = (x - mu_before) ** 2
    sigma2 = (0.25 + np.concatenate(([0.0], np.cumsum(sq)[:-1]))) / t
    return np.sqrt(2.0 * math.log(2.0 / alpha) / (n * sigma2))


def _lower(x: FloatArray, alpha: float) -> float:
    """The smallest mean in [0, 1] a bettor on ``x >= 0`` does not reject at ``alpha / 2``."""
    bets = _bets(x, alpha)
    threshold = math.log(2.0 / alpha)

    def rejects(m: float) -> bool:
        lam = np.minimum(bets, CAP / m) if m > 0 else bets
        return float(np.sum(np.log1p(lam * (x - m)))) >= threshold

    lo, hi = 0.0, 1.0
    if not rejects(lo):
        return 0.0
    if rejects(hi):
        return 1.0
    for _ in range(_STEPS):
        mid = 0.5 * (lo + hi)
        if rejects(mid):
            lo = mid
        else:
            hi = mid
    return lo


def betting_interval(
    w: FloatArray, y: FloatArray, low: float, high: float, level: float
) -> tuple[float, float]:
    """A ``level`` confidence interval for the mean of ``w y`` (the candidate's value), given
    every ``y`` in ``[low, high]`` and ``E[w] = 1`` per decision; module docstring.

    ``w`` and ``y`` are in decision order (the bets use only the decisions before each one).
    """
    if high <= low:
        return low, low
    alpha = 1.0 - level
    unit = (y - low) / (high - low)
    down = _lower(w * unit, alpha)
    up = 1.0 - _lower(w * (1.0 - unit), alpha)
    return low + down * (high - low), low + max(up, down) * (high - low)
