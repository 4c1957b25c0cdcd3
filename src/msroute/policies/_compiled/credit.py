"""The team baselines' statistics credited with a batch's feedback, compiled (numba).

The shared-reward counts and means and Thompson sampling's Beta posteriors are credited in one
loop when a batch has more than one run, in place of a dozen numpy gathers and scatters of
R x M entries a round. Each value is computed with the same operations as the numpy update
that a single run (a live router) keeps, so the floats are the same. Each distinct routed
expert of a run is credited once.
"""

from __future__ import annotations

import math

from msroute._jit import compiled, inline, repeated
from msroute._validation import FloatArray, IntArray
from msroute.policies._compiled.variates import constants

__all__ = ["credit_beta", "credit_shared", "credit_thompson"]


@compiled
def credit_shared(
    counts: FloatArray, means: FloatArray, rsqrt: FloatArray, routed: IntArray, reward: FloatArray
) -> None:
    """``msroute.policies.team.SharedRewardStats.update`` of a batch, in one loop.

    ``counts``, ``means``, ``rsqrt``: raveled (R K,); ``routed`` (R, M) flat indices, each
    distinct one credited once; ``reward`` (R,). The same floats as the numpy update: ``n = n_i
    + 1``, ``mu_i + (r - mu_i) / n`` and ``1 / sqrt(n)``, each rounded once.
    """
    for r in range(routed.shape[0]):
        for j in range(routed.shape[1]):
            if repeated(routed, r, j):
                continue
            i = routed[r, j]
            n = counts[i] + 1.0
            counts[i] = n
            means[i] = means[i] + (reward[r] - means[i]) / n
            rsqrt[i] = 1.0 / math.sqrt(n)


@inline
def _credit_beta_row(
    alpha: FloatArray,
    beta: FloatArray,
    routed: IntArray,
    r: int,
    success: float,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
) -> None:
    """``alpha_i += s``, ``beta_i += 1 - s`` for each distinct flat index of ``routed[r]``, and
    the sampler's constants of the new shapes (``seen``, ``d``, ``c``: raveled (R 2K,)
    ``msroute.policies.streams.GammaConstants``), so that its refresh finds the run's row
    current (a shape it cannot draw from is left for the sampler to name)."""
    k = alpha.size // routed.shape[0]
    for j in range(routed.shape[1]):
        if repeated(routed, r, j):
            continue
        f = routed[r, j]
        alpha[f] += success
        beta[f] += 1.0 - success
        i = f - r * k
        if 0 <= i < k:
            for x, col in ((alpha[f], 2 * r * k + i), (beta[f], 2 * r * k + k + i)):
                if x > 0.0 and x < math.inf:
                    d[col], c[col] = constants(x)
                    seen[col] = x


@compiled
def credit_beta(
    alpha: FloatArray,
    beta: FloatArray,
    routed: IntArray,
    success: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
) -> None:
    """``msroute.policies.team.BetaPosterior.update`` of a batch, in one loop.

    ``alpha``, ``beta``: raveled (R K,); ``routed`` (R, M) flat indices, each distinct one
    credited once; ``success`` (R,): ``alpha_i += s``, ``beta_i += 1 - s``; ``seen``, ``d``,
    ``c``: the sampler's constants, raveled (R 2K,), kept current.
    """
    for r in range(routed.shape[0]):
        _credit_beta_row(alpha, beta, routed, r, success[r], seen, d, c)


@compiled
def credit_thompson(
    alpha: FloatArray,
    beta: FloatArray,
    routed: IntArray,
    reward: FloatArray,
    scale: float,
    reward_max: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
) -> None:
    """Thompson sampling's update of a batch (``msroute.policies.bandit.ThompsonSampling``),
    in one loop: each run's success, then ``credit_beta``.

    The success is ``reward / scale`` when ``scale > 0``; else the running maximum ``reward_max``
    (R,) takes the reward in and the success is ``reward / reward_max`` (``/ 1`` while the
    maximum is 0); clipped to ``[0, 1]``. The same floats as the numpy update: ``np.maximum`` and
    ``np.minimum`` written out (the first argument when it wins or is NaN, else the second).
    """
    for r in range(routed.shape[0]):
        x = reward[r]
        if scale > 0.0:
            s = x / scale
        else:
            top = reward_max[r]
            top = top if top > x or top != top else x
            reward_max[r] = top
            s = x / (top if top > 0.0 else 1.0)
        s = s if s > 0.0 or s != s else 0.0
        s = s if s < 1.0 or s != s else 1.0
        _credit_beta_row(alpha, beta, routed, r, s, seen, d, c)
