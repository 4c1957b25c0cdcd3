"""Compiled loops of Thompson sampling's random numbers (numba): each run's own generator.

Thompson sampling draws 2 R K Gamma variates a round (8,000 at R = 80, K = 50), each from its
run's own stream so that a run decides the same alone or in any batch. Here every run's stream
is a xoshiro256++ generator (Blackman and Vigna, "Scrambled linear pseudorandom number
generators", ACM TOMS 47(4), 2021) whose whole state is one row of four 64-bit words of an
(R, 4) array, advanced in place by the compiled loop: no buffers, no per-run Python calls, and a
run consumes only its own row, in its own order, whatever the batch.

From each run's 64-bit words:

* uniforms in ``[0, 1)``: the top 53 bits, ``(w >> 11) * 2^-53``;
* standard normals: numpy's ziggurat (``random_standard_normal`` of numpy's
  ``distributions.c``: 256 layers of equal area, 52-bit integers; the tables are rebuilt here
  from its two constants and agree with numpy's to about 1e-14), one word per value 99% of
  the time;
* Gamma variates: Marsaglia and Tsang's method (ACM TOMS 26(3), 2000), a normal and a uniform
  per candidate; a shape ``a < 1`` is drawn as ``Gamma(a + 1) U^(1/a)``;
* Beta variates: ``X / (X + Y)`` with ``X ~ Gamma(a)`` and ``Y ~ Gamma(b)``, from the
  logarithms when a shape is below 1 (never ``0 / 0``).

Why xoshiro256++: it is the fastest of the generators measured in these loops, which consume
their words one after another (a rejection decides whether the next word is a retry): 16,000
words cost about 15 µs, and a round's 8,000 Beta-pair Gammas about 55 µs (measured in a
prototype of this loop); Philox4x32-10, whose
counter makes it the natural choice for numbers keyed by (seed, round), cost 3.5 times as much
there, its ten rounds standing in every draw's path. The state is seeded from the run's
``SeedSequence`` (:meth:`~numpy.random.SeedSequence.generate_state`), so distinct runs get
unrelated points of the 2^256 - 1 period.

The team baselines' statistics (the shared-reward counts and means, Thompson sampling's Beta
posteriors) are credited here too when a batch has more than one run (:func:`credit_shared`,
:func:`credit_beta`): one loop in place of a dozen numpy gathers and scatters of R x M entries a
round, each value computed with the same operations as the numpy update that a single run (a
live router) keeps, so the floats are the same. Likewise a batch's top M (:func:`top_rows`),
which only compares.

Imported on first use: importing numba and loading the machine code take about a second per
process. The code is cached next to this file, or in the user's cache directory when that is
read-only, and compiled in memory (a few seconds) when neither can be written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar, cast

import numba
import numpy as np
from llvmlite import ir  # type: ignore[import-untyped]
from numba import float64, uint64
from numba.core import types
from numba.extending import intrinsic

from msroute._validation import BoolArray, FloatArray, IntArray, UInt64Array
from msroute.errors import InvalidValueError

__all__ = [
    "beta_top",
    "beta_variates",
    "credit_beta",
    "credit_shared",
    "credit_thompson",
    "dual_step",
    "feedback_in_range",
    "fill_normals",
    "fill_words",
    "gamma_variates",
    "inverse_cdf_draws",
    "penalties",
    "top_rows",
]

F = TypeVar("F", bound=Callable[..., object])


def _compiled(fn: F) -> F:
    """``fn`` compiled to machine code, cached on disk where a cache directory is writable."""
    try:
        return cast(F, numba.njit(cache=True, nogil=True)(fn))
    except RuntimeError:  # numba found no writable cache location: compile in each process
        return cast(F, numba.njit(nogil=True)(fn))


def _inline(fn: F) -> F:
    """``fn`` compiled into its callers (the small steps of the loops)."""
    return cast(F, numba.njit(inline="always")(fn))


#: The ziggurat's base layer starts at x = R; every layer has the area V (numpy's constants).
_ZIG_R = 3.6541528853610088
_ZIG_V = _ZIG_R * math.exp(-0.5 * _ZIG_R * _ZIG_R) + math.sqrt(0.5 * math.pi) * math.erfc(
    _ZIG_R / math.sqrt(2.0)
)
_ZIG_INV_R = 1.0 / _ZIG_R


def _ziggurat_tables() -> tuple[UInt64Array, FloatArray, FloatArray]:
    """numpy's ziggurat tables ``ki``, ``wi``, ``fi`` of the standard normal (256 layers).

    Layer ``i`` spans ``x < x_i``; a 52-bit integer ``j`` gives ``x = j wi[i]``, accepted at
    once when ``j < ki[i]`` (inside the layer below); ``fi[i] = exp(-x_i^2 / 2)``.
    """
    scale = 2.0**52
    ki = np.zeros(256, dtype=np.uint64)
    wi = np.zeros(256)
    fi = np.zeros(256)
    dn = tn = _ZIG_R
    q = _ZIG_V / math.exp(-0.5 * dn * dn)
    ki[0] = int(dn / q * scale)
    wi[0], wi[255] = q / scale, dn / scale
    fi[0], fi[255] = 1.0, math.exp(-0.5 * dn * dn)
    for i in range(254, 0, -1):
        dn = math.sqrt(-2.0 * math.log(_ZIG_V / dn + math.exp(-0.5 * dn * dn)))
        ki[i + 1] = int(dn / tn * scale)
        tn = dn
        fi[i] = math.exp(-0.5 * dn * dn)
        wi[i] = dn / scale
    return ki, wi, fi


_KI, _WI, _FI = _ziggurat_tables()

#: The largest float.
_FMAX = float(np.finfo(np.float64).max)

#: A generator's state: four 64-bit words.
State = tuple[np.uint64, np.uint64, np.uint64, np.uint64]


@_inline
def _next(s: State) -> tuple[np.uint64, State]:
    """xoshiro256++: the next 64-bit word and the advanced state."""
    s0, s1, s2, s3 = s
    total = s0 + s3
    word = ((total << uint64(23)) | (total >> uint64(41))) + s0
    t = s1 << uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = (s3 << uint64(45)) | (s3 >> uint64(19))
    return word, (s0, s1, s2, s3)


@_inline
def _uniform(s: State) -> tuple[float, State]:
    """A uniform in ``[0, 1)`` from the top 53 bits of a word."""
    word, s = _next(s)
    return float64(word >> uint64(11)) * (1.0 / 9007199254740992.0), s


@_inline
def _normal(s: State) -> tuple[float, State]:
    """A standard normal: numpy's ``random_standard_normal``, step for step."""
    while True:
        word, s = _next(s)
        idx = word & uint64(0xFF)
        word >>= uint64(8)
        rabs = (word >> uint64(1)) & uint64(0x000FFFFFFFFFFFFF)
        x = float64(rabs) * _WI[idx]
        if word & uint64(1):
            x = -x
        if rabs < _KI[idx]:
            return x, s  # inside the layer below: 99.3% of the draws
        if idx == 0:  # the tail beyond R, by Marsaglia's exponential method
            while True:
                u1, s = _uniform(s)
                u2, s = _uniform(s)
                xx = -_ZIG_INV_R * math.log1p(-u1)
                yy = -math.log1p(-u2)
                if yy + yy > xx * xx:
                    if (rabs >> uint64(8)) & uint64(1):
                        return -(_ZIG_R + xx), s
                    return _ZIG_R + xx, s
        else:  # the wedge of layer idx: accept under the density
            u, s = _uniform(s)
            if (_FI[idx - 1] - _FI[idx]) * u + _FI[idx] < math.exp(-0.5 * x * x):
                return x, s


@_inline
def _gamma(d: float, c: float, s: State) -> tuple[float, State]:
    """``Gamma(d + 1/3)`` by Marsaglia-Tsang (``c = 1 / sqrt(9 d)``).

    A candidate ``x ~ N(0, 1)``, ``u ~ U[0, 1)``, ``v = (1 + c x)^3`` is accepted when
    ``v > 0`` and ``u < 1 - 0.0331 x^4`` (the squeeze: 98% and more of the candidates) or
    ``log u < x^2 / 2 + d (1 - v + log v)``, giving ``d v``.
    """
    while True:
        x, s = _normal(s)
        w = 1.0 + c * x
        if w <= 0.0:
            continue
        v = w * w * w
        u, s = _uniform(s)
        x2 = x * x
        if u < 1.0 - 0.0331 * x2 * x2:
            return d * v, s
        if math.log(u) < 0.5 * x2 + d * (1.0 - v + math.log(v)):
            return d * v, s


@_inline
def _constants(shape: float) -> tuple[float, float]:
    """Marsaglia-Tsang's ``d = a - 1/3`` and ``c = 1 / sqrt(9 d)`` of ``a = shape``, or of
    ``a = shape + 1`` below 1 (:class:`msroute.policies.streams.GammaConstants`)."""
    if not (shape > 0.0 and shape < math.inf):
        raise InvalidValueError("Gamma and Beta shapes must be finite, positive numbers")
    d = (shape + 1.0 if shape < 1.0 else shape) - 1.0 / 3.0
    return d, (1.0 / 3.0) / math.sqrt(d)


@_inline
def _refresh(shape: FloatArray, seen: FloatArray, d: FloatArray, c: FloatArray, at: int) -> None:
    """The constants of the shapes (R, W) in columns ``at`` to ``at + W`` of ``d`` and ``c``,
    computed for the entries whose shape is not the one ``seen`` there. Run before any run
    draws, so that a bad shape raises with every generator untouched.

    (Scalars only in the per-entry steps: an inlined step that takes arrays costs their
    reference counting at every call, 20 times the loop's own work here.)
    """
    n_runs, width = shape.shape
    for r in range(n_runs):
        changed = False
        for j in range(width):  # without a branch per entry (a learner keeps most rows current)
            changed |= shape[r, j] != seen[r, at + j]
        if not changed:
            continue
        for j in range(width):
            x = shape[r, j]
            if x != seen[r, at + j]:
                d[r, at + j], c[r, at + j] = _constants(x)
                seen[r, at + j] = x


@_inline
def _gammas(
    shape: FloatArray, d: FloatArray, c: FloatArray, s: State, g: FloatArray, log_g: FloatArray
) -> tuple[bool, State]:
    """One run's Gamma variates of the shapes ``shape`` (with constants ``d``, ``c``) into ``g``.

    Drawn in index order. When a shape is below 1, the variates are given as logarithms in
    ``log_g``, all of them, and the first value returned is True; ``g`` is then scratch.
    """
    boosted = False
    for j in range(shape.size):
        g[j], s = _gamma(d[j], c[j], s)
        boosted |= shape[j] < 1.0
    if boosted:
        for j in range(shape.size):
            log_g[j] = math.log(g[j])
            if shape[j] < 1.0:  # Gamma(a) = Gamma(a + 1) U^(1/a), U = 1 - u in (0, 1]
                u, s = _uniform(s)
                log_g[j] += math.log1p(-u) / shape[j]
    return boosted, s


@_inline
def _betas(
    shape: FloatArray,
    d: FloatArray,
    c: FloatArray,
    s: State,
    g: FloatArray,
    log_g: FloatArray,
    out: FloatArray,
) -> State:
    """One run's ``Beta(a_i, b_i)`` into ``out`` (K,) for its shapes ``[a | b]`` (2K,).

    ``X / (X + Y)`` of its Gamma variates, from their logarithms when a shape is below 1;
    ``g``, ``log_g``: (2K,) scratch.
    """
    k = out.size
    boosted, s = _gammas(shape, d, c, s, g, log_g)
    for i in range(k):
        if boosted:
            out[i] = 1.0 / (1.0 + math.exp(log_g[k + i] - log_g[i]))
        else:
            out[i] = g[i] / (g[i] + g[k + i])
    return s


@_inline
def _load(state: UInt64Array, r: int) -> State:
    return (state[r, 0], state[r, 1], state[r, 2], state[r, 3])


@_inline
def _store(state: UInt64Array, r: int, s: State) -> None:
    state[r, 0], state[r, 1], state[r, 2], state[r, 3] = s


@_compiled
def gamma_variates(
    shape: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
    state: UInt64Array,
    out: FloatArray,
) -> None:
    """``out[r, j] ~ Gamma(shape[r, j])`` (R, W), run ``r`` from its generator ``state[r]``.

    ``seen``, ``d``, ``c``: the constants (:class:`msroute.policies.streams.GammaConstants`).
    """
    n_runs, width = shape.shape
    _refresh(shape, seen, d, c, 0)
    log_g = np.empty(width)
    for r in range(n_runs):
        boosted, s = _gammas(shape[r], d[r], c[r], _load(state, r), out[r], log_g)
        _store(state, r, s)
        if boosted:
            for j in range(width):
                out[r, j] = math.exp(log_g[j])


@_compiled
def beta_variates(
    a: FloatArray,
    b: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
    state: UInt64Array,
    out: FloatArray,
) -> None:
    """``out[r, i] ~ Beta(a[r, i], b[r, i])`` (R, K), run ``r`` from its generator ``state[r]``.

    ``seen``, ``d``, ``c``: the constants of ``[a | b]``, (R, 2K); after the refresh ``seen``
    holds the shapes themselves, side by side.
    """
    _refresh(a, seen, d, c, 0)
    _refresh(b, seen, d, c, a.shape[1])
    g, log_g = np.empty(seen.shape[1]), np.empty(seen.shape[1])
    for r in range(a.shape[0]):
        _store(state, r, _betas(seen[r], d[r], c[r], _load(state, r), g, log_g, out[r]))


@_compiled
def beta_top(
    a: FloatArray,
    b: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
    offset: FloatArray,
    state: UInt64Array,
    draws: IntArray,
) -> None:
    """The M best experts of Beta samples plus ``offset``: Thompson sampling's decision.

    ``draws[r]`` (M indices, best first; ties to the lower index) gets the top M of
    ``Beta(a[r, i], b[r, i]) + offset[r, i]``, the samples being those :func:`beta_variates`
    draws from the same state; ``offset`` is (R, K), or (R, 0) for none. The same as
    ``msroute.policies.team.top_m`` of those scores.
    """
    _refresh(a, seen, d, c, 0)
    _refresh(b, seen, d, c, a.shape[1])
    n_runs, m = draws.shape
    k = a.shape[1]
    g, log_g, score, best = np.empty(2 * k), np.empty(2 * k), np.empty(k), np.empty(m)
    picked = np.empty(k, dtype=np.int64)
    for r in range(n_runs):
        _store(state, r, _betas(seen[r], d[r], c[r], _load(state, r), g, log_g, score))
        if offset.shape[1]:
            for i in range(k):
                score[i] += offset[r, i]
        _top_into(score, best, picked, draws, r)


#: Up to this M, :func:`_top_into` finds the M-th largest score by a sorting network.
_NETWORK_SLOTS = 8


@_inline
def _top_into(
    score: FloatArray, best: FloatArray, picked: IntArray, draws: IntArray, r: int
) -> None:
    """The M largest of ``score`` (K,) into ``draws[r]`` (M = ``draws.shape[1]``), best first,
    ties to the lower index (an equal score never passes an earlier one); ``best``: (M,) and
    ``picked``: (K,) scratch.

    Inserting each score into the best M so far takes branches that the CPU mispredicts
    whenever a score gets in (a dozen times per row of 50 random scores), which cost more
    than the comparisons. Up to M = 8, a sorting network of eight slots (a max and a min per
    slot and score, no branch) finds the M-th largest score; the scores at least that large are
    then the M best unless some tie it, and each one's place is the number of those above it
    and of the equal ones before it. With such ties or a NaN, the insertion decides.
    """
    m = draws.shape[1]
    if not 1 <= m <= _NETWORK_SLOTS:
        _top_by_insertion(score, best, draws, r)
        return
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = -math.inf
    nan = False
    for i in range(score.size):
        v = score[i]
        nan |= v != v
        b0, v = _larger_smaller(b0, v)
        b1, v = _larger_smaller(b1, v)
        b2, v = _larger_smaller(b2, v)
        b3, v = _larger_smaller(b3, v)
        b4, v = _larger_smaller(b4, v)
        b5, v = _larger_smaller(b5, v)
        b6, v = _larger_smaller(b6, v)
        b7, v = _larger_smaller(b7, v)
    cut = (b0, b1, b2, b3, b4, b5, b6, b7)[m - 1]
    n = 0
    if not nan:
        for i in range(score.size):  # the indices of the scores >= cut, in index order
            picked[n] = i
            n += score[i] >= cut
    if n != m:
        _top_by_insertion(score, best, draws, r)
        return
    for j in range(m):
        v = score[picked[j]]
        place = 0
        for e in range(m):
            w = score[picked[e]]
            place += (w > v) | ((w == v) & (e < j))
        draws[r, place] = picked[j]


@_inline
def _larger_smaller(b: float, v: float) -> tuple[float, float]:
    """The larger and the smaller of ``b`` and ``v`` (a max and a min instruction)."""
    return (b if b > v else v), (v if b > v else b)


@_inline
def _top_by_insertion(score: FloatArray, best: FloatArray, draws: IntArray, r: int) -> None:
    """:func:`_top_into` by inserting each score into the best M so far (``best``: their
    scores)."""
    m = draws.shape[1]
    for i in range(score.size):
        v = score[i]
        if i < m:
            j = i
        elif v > best[m - 1]:
            j = m - 1
        else:
            continue
        while j > 0 and best[j - 1] < v:  # insertion after the equal scores
            best[j] = best[j - 1]
            draws[r, j] = draws[r, j - 1]
            j -= 1
        best[j] = v
        draws[r, j] = i


@_compiled
def top_rows(scores: FloatArray, lift: bool, draws: IntArray) -> None:
    """``msroute.policies.team.top_m`` of every row of ``scores`` (R, K), without a mask, into
    ``draws`` (R, M): the same teams. ``lift``: ``-inf`` counts as the lowest finite float (as
    top_m's successive argmaxes count it; its stable sort, for a larger M, does not)."""
    k = scores.shape[1]
    row, best, picked = np.empty(k), np.empty(draws.shape[1]), np.empty(k, dtype=np.int64)
    for r in range(scores.shape[0]):
        for i in range(k):
            row[i] = max(scores[r, i], -_FMAX) if lift else scores[r, i]
        _top_into(row, best, picked, draws, r)


@_compiled
def fill_words(state: UInt64Array, out: UInt64Array) -> None:
    """The next words of the generator ``state`` (4,) in ``out`` (1-d): the raw stream."""
    s = (state[0], state[1], state[2], state[3])
    for i in range(out.size):
        out[i], s = _next(s)
    state[0], state[1], state[2], state[3] = s


@_compiled
def fill_normals(state: UInt64Array, out: FloatArray) -> None:
    """The next standard normals of the generator ``state`` (4,) in ``out`` (1-d)."""
    s = (state[0], state[1], state[2], state[3])
    for i in range(out.size):
        out[i], s = _normal(s)
    state[0], state[1], state[2], state[3] = s


@_inline
def _repeated(routed: IntArray, r: int, j: int) -> bool:
    """Whether ``routed[r, j]`` already appears in ``routed[r, :j]`` (credited once)."""
    i = 0
    while i < j and routed[r, i] != routed[r, j]:
        i += 1
    return i < j


@_compiled
def credit_shared(
    counts: FloatArray, means: FloatArray, rsqrt: FloatArray, routed: IntArray, reward: FloatArray
) -> None:
    """:meth:`msroute.policies.team.SharedRewardStats.update` of a batch, in one loop.

    ``counts``, ``means``, ``rsqrt``: raveled (R K,); ``routed`` (R, M) flat indices, each
    distinct one credited once; ``reward`` (R,). The same floats as the numpy update: ``n = n_i
    + 1``, ``mu_i + (r - mu_i) / n`` and ``1 / sqrt(n)``, each rounded once.
    """
    for r in range(routed.shape[0]):
        for j in range(routed.shape[1]):
            if _repeated(routed, r, j):
                continue
            i = routed[r, j]
            n = counts[i] + 1.0
            counts[i] = n
            means[i] = means[i] + (reward[r] - means[i]) / n
            rsqrt[i] = 1.0 / math.sqrt(n)


@_inline
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
    :class:`msroute.policies.streams.GammaConstants`), so that its refresh finds the run's row
    current (a shape it cannot draw from is left for the sampler to name)."""
    k = alpha.size // routed.shape[0]
    for j in range(routed.shape[1]):
        if _repeated(routed, r, j):
            continue
        f = routed[r, j]
        alpha[f] += success
        beta[f] += 1.0 - success
        i = f - r * k
        if 0 <= i < k:
            for x, col in ((alpha[f], 2 * r * k + i), (beta[f], 2 * r * k + k + i)):
                if x > 0.0 and x < math.inf:
                    d[col], c[col] = _constants(x)
                    seen[col] = x


@_compiled
def credit_beta(
    alpha: FloatArray,
    beta: FloatArray,
    routed: IntArray,
    success: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
) -> None:
    """:meth:`msroute.policies.team.BetaPosterior.update` of a batch, in one loop.

    ``alpha``, ``beta``: raveled (R K,); ``routed`` (R, M) flat indices, each distinct one
    credited once; ``success`` (R,): ``alpha_i += s``, ``beta_i += 1 - s``; ``seen``, ``d``,
    ``c``: the sampler's constants, raveled (R 2K,), kept current.
    """
    for r in range(routed.shape[0]):
        _credit_beta_row(alpha, beta, routed, r, success[r], seen, d, c)


@_compiled
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
    """Thompson sampling's update of a batch (:class:`msroute.policies.bandit.ThompsonSampling`),
    in one loop: each run's success, then :func:`credit_beta`.

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


@_compiled
def dual_step(
    lam: FloatArray,
    cost_sum: FloatArray,
    cost: FloatArray,
    n_steps: int,
    coord: IntArray,
    row_scale: FloatArray,
    bound: FloatArray,
    neg_sign: FloatArray,
    active: BoolArray,
    step: float,
    out: FloatArray,
) -> None:
    """:meth:`msroute.policies.lagrangian.LagrangianDual.step` of a batch, in one loop.

    ``out`` (R, B) gets the new multipliers from ``lam``; with ``n_steps > 0`` (the running
    average) ``cost_sum`` (R, d) first takes the round's ``cost`` (R, d) in. Each value with
    the numpy step's operations: the average ``cost_sum / n_steps``, the violation
    ``-sign * (x / scale - bound)`` (0 without a bound), times the step, plus ``lambda``, then
    ``np.maximum(0.0, v)`` written out (``v`` unless 0 is larger).
    """
    for r in range(lam.shape[0]):
        if n_steps > 0:
            for j in range(cost.shape[1]):
                cost_sum[r, j] += cost[r, j]
        for b in range(lam.shape[1]):
            j = coord[b]
            x = cost_sum[r, j] / n_steps if n_steps > 0 else cost[r, j]
            v = neg_sign[b] * (x / row_scale[r, b] - bound[r, b]) if active[r, b] else 0.0
            v = v * step + lam[r, b]
            out[r, b] = 0.0 if v < 0.0 else v


@_compiled
def feedback_in_range(
    reward: FloatArray,
    low: float,
    high: float,
    cost: FloatArray,
    cap: FloatArray,
    draws: IntArray,
    n_experts: int,
) -> bool:
    """Whether a batch's feedback passes :meth:`msroute.policies.base.BasePolicy.update`'s
    range checks, in one loop: ``low <= reward <= high`` (R,), ``0 <= cost <= cap`` (R, d) and
    ``0 <= draws < n_experts`` (R, M); NaN fails. The update names what fails by numpy."""
    for r in range(reward.shape[0]):
        x = reward[r]
        if not (x >= low and x <= high):
            return False
        for j in range(cost.shape[1]):
            y = cost[r, j]
            if not (y >= 0.0 and y <= cap[r, j]):
                return False
        for j in range(draws.shape[1]):
            if draws[r, j] < 0 or draws[r, j] >= n_experts:
                return False
    return True


@_compiled
def inverse_cdf_draws(u: FloatArray, q: FloatArray, out: IntArray) -> None:
    """:func:`msroute.policies.base.sample_multinomial` of every row, without a mask, in one loop.

    Row ``r``'s CDF is summed one entry after another (as ``cumsum``), each uniform
    ``u[r, m]`` is scaled by its last entry, and the draw is the number of CDF entries at most
    the scaled uniform, capped at ``K - 1``: the comparisons of the batched numpy form, counted
    the same way, so the same draws. ``u`` (R, M), ``q`` (R, K), ``out`` (R, M).
    """
    n_runs, k = q.shape
    cdf = np.empty(k)
    for r in range(n_runs):
        total = 0.0
        for j in range(k):
            total += q[r, j]
            cdf[j] = total
        for m in range(u.shape[1]):
            x = u[r, m] * total
            count = 0
            for j in range(k):
                if x >= cdf[j]:
                    count += 1
            out[r, m] = min(count, k - 1)


@intrinsic
def _fma_intrinsic(
    typingctx: object, a: types.Type, b: types.Type, c: types.Type
) -> tuple[object, object]:
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context: object, builder: ir.IRBuilder, signature: object, args: object) -> object:
        f64 = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f64], ir.FunctionType(f64, [f64] * 3))
        return builder.call(fn, args)

    return sig, codegen


#: ``_fma(a, b, c)``: ``a b + c`` rounded once (LLVM's ``llvm.fma.f64``, in software where the
#: CPU has no FMA instruction).
_fma = cast(Callable[[float, float, float], float], _fma_intrinsic)


@_compiled
def penalties(costs: FloatArray, weights: FloatArray, out: FloatArray) -> None:
    """``out[r, i] = costs[r, i] . weights[r]`` for d = 2 cost coordinates, summed as OpenBLAS's
    ``dgemv`` sums numpy's ``matmul(costs, weights[:, :, None])`` (x86-64, FMA): the second
    product rounded, then the first added to it by a fused multiply-add.

    :meth:`msroute.policies.lagrangian.LagrangianDual.penalty` checks once per process and per
    K that numpy's product gives these floats before it uses this loop. ``costs`` (R, K, 2),
    ``weights`` (R, 2), ``out`` (R, K).
    """
    for r in range(costs.shape[0]):
        w0, w1 = weights[r, 0], weights[r, 1]
        for i in range(costs.shape[1]):
            out[r, i] = _fma(costs[r, i, 0], w0, costs[r, i, 1] * w1)
