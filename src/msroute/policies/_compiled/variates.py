"""Each run's own random stream, compiled (numba): uniforms, normals, Gamma and Beta variates.

Thompson sampling draws 2 R K Gamma variates a round, each from its run's own stream so that a
run decides the same alone or in any batch; the skill environments draw each run's chunk of
rounds from a stream of its own (``beta``, in ``msroute._skill_draws``). Every run's stream is a
xoshiro256++ generator (Blackman and Vigna, "Scrambled linear pseudorandom number generators",
ACM TOMS 47(4), 2021) whose whole state is one row of four 64-bit words of an (R, 4) array,
advanced in place by the compiled loop: no buffers, no per-run Python calls, and a run consumes
only its own row, in its own order, whatever the batch.

From each run's 64-bit words:

* uniforms in ``[0, 1)``: the top 53 bits, ``(w >> 11) * 2^-53``;
* standard normals: numpy's ziggurat (``random_standard_normal`` of numpy's
  ``distributions.c``: 256 layers of equal area, 52-bit integers; the tables are rebuilt here
  from its two constants and agree with numpy's to about 1e-14), one word per value 99% of
  the time;
* Gamma variates: Marsaglia and Tsang's method (ACM TOMS 26(3), 2000), a normal and a uniform
  per candidate; a shape ``a < 1`` is drawn as ``Gamma(a + 1) U^(1/a)``;
* Beta variates: ``X / (X + Y)`` with ``X ~ Gamma(a)`` and ``Y ~ Gamma(b)``, never ``0 / 0``:
  Thompson sampling's (``betas``) draw a row's Gammas first and take every ratio from the
  logarithms when a shape of the row is below 1; the environments' (``beta``) draw
  entry by entry and take the logarithms only when both shapes of the entry are below 1.

Why xoshiro256++: these loops consume their words one after another (a rejection decides
whether the next word is a retry), so the cost of a word is in every draw's path, and it is the
cheapest generator per word measured there. Philox4x32-10, whose counter would make it the
natural choice for numbers keyed by (seed, round), spends ten rounds on every word. The state is
seeded from the run's ``SeedSequence`` (``generate_state``), so
distinct runs get unrelated points of the 2^256 - 1 period.
"""

from __future__ import annotations

import math

import numpy as np
from numba import float64, uint64

from msroute._jit import compiled, inline
from msroute._validation import FloatArray, UInt64Array
from msroute.errors import InvalidValueError

__all__ = [
    "FI",
    "KI",
    "WI",
    "ZIG_R",
    "ZIG_V",
    "State",
    "beta",
    "beta_variates",
    "betas",
    "constants",
    "fill_normals",
    "fill_words",
    "gamma_variates",
    "load",
    "refresh",
    "store",
]


#: The ziggurat's base layer starts at x = R; every layer has the area V (numpy's constants).
ZIG_R = 3.6541528853610088
ZIG_V = ZIG_R * math.exp(-0.5 * ZIG_R * ZIG_R) + math.sqrt(0.5 * math.pi) * math.erfc(
    ZIG_R / math.sqrt(2.0)
)
_ZIG_INV_R = 1.0 / ZIG_R


def _ziggurat_tables() -> tuple[UInt64Array, FloatArray, FloatArray]:
    """numpy's ziggurat tables ``ki``, ``wi``, ``fi`` of the standard normal (256 layers).

    Layer ``i`` spans ``x < x_i``; a 52-bit integer ``j`` gives ``x = j wi[i]``, accepted at
    once when ``j < ki[i]`` (inside the layer below); ``fi[i] = exp(-x_i^2 / 2)``.
    """
    scale = 2.0**52
    ki = np.zeros(256, dtype=np.uint64)
    wi = np.zeros(256)
    fi = np.zeros(256)
    dn = tn = ZIG_R
    q = ZIG_V / math.exp(-0.5 * dn * dn)
    ki[0] = int(dn / q * scale)
    wi[0], wi[255] = q / scale, dn / scale
    fi[0], fi[255] = 1.0, math.exp(-0.5 * dn * dn)
    for i in range(254, 0, -1):
        dn = math.sqrt(-2.0 * math.log(ZIG_V / dn + math.exp(-0.5 * dn * dn)))
        ki[i + 1] = int(dn / tn * scale)
        tn = dn
        fi[i] = math.exp(-0.5 * dn * dn)
        wi[i] = dn / scale
    return ki, wi, fi


KI, WI, FI = _ziggurat_tables()


#: A generator's state: four 64-bit words.
State = tuple[np.uint64, np.uint64, np.uint64, np.uint64]


@inline
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


@inline
def _uniform(s: State) -> tuple[float, State]:
    """A uniform in ``[0, 1)`` from the top 53 bits of a word."""
    word, s = _next(s)
    return float64(word >> uint64(11)) * (1.0 / 9007199254740992.0), s


@inline
def _normal(s: State) -> tuple[float, State]:
    """A standard normal: numpy's ``random_standard_normal``, step for step."""
    while True:
        word, s = _next(s)
        idx = word & uint64(0xFF)
        word >>= uint64(8)
        rabs = (word >> uint64(1)) & uint64(0x000FFFFFFFFFFFFF)
        x = float64(rabs) * WI[idx]
        if word & uint64(1):
            x = -x
        if rabs < KI[idx]:
            return x, s  # inside the layer below: 99.3% of the draws
        if idx == 0:  # the tail beyond R, by Marsaglia's exponential method
            while True:
                u1, s = _uniform(s)
                u2, s = _uniform(s)
                xx = -_ZIG_INV_R * math.log1p(-u1)
                yy = -math.log1p(-u2)
                if yy + yy > xx * xx:
                    if (rabs >> uint64(8)) & uint64(1):
                        return -(ZIG_R + xx), s
                    return ZIG_R + xx, s
        else:  # the wedge of layer idx: accept under the density
            u, s = _uniform(s)
            if (FI[idx - 1] - FI[idx]) * u + FI[idx] < math.exp(-0.5 * x * x):
                return x, s


@inline
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


@inline
def constants(shape: float) -> tuple[float, float]:
    """Marsaglia-Tsang's ``d = a - 1/3`` and ``c = 1 / sqrt(9 d)`` of ``a = shape``, or of
    ``a = shape + 1`` below 1 (``msroute.policies.streams.GammaConstants``)."""
    if not (shape > 0.0 and shape < math.inf):
        raise InvalidValueError("Gamma and Beta shapes must be finite, positive numbers")
    d = (shape + 1.0 if shape < 1.0 else shape) - 1.0 / 3.0
    return d, (1.0 / 3.0) / math.sqrt(d)


@inline
def refresh(shape: FloatArray, seen: FloatArray, d: FloatArray, c: FloatArray, at: int) -> None:
    """The constants of the shapes (R, W) in columns ``at`` to ``at + W`` of ``d`` and ``c``,
    computed for the entries whose shape is not the one ``seen`` there. Run before any run
    draws, so that a bad shape raises with every generator untouched.

    (Scalars only in the per-entry steps: an inlined step that takes arrays pays their
    reference counting at every call, which costs more than the loop's own work.)
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
                d[r, at + j], c[r, at + j] = constants(x)
                seen[r, at + j] = x


@inline
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


@inline
def betas(
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


@inline
def load(state: UInt64Array, r: int) -> State:
    return (state[r, 0], state[r, 1], state[r, 2], state[r, 3])


@inline
def store(state: UInt64Array, r: int, s: State) -> None:
    state[r, 0], state[r, 1], state[r, 2], state[r, 3] = s


@compiled
def gamma_variates(
    shape: FloatArray,
    seen: FloatArray,
    d: FloatArray,
    c: FloatArray,
    state: UInt64Array,
    out: FloatArray,
) -> None:
    """``out[r, j] ~ Gamma(shape[r, j])`` (R, W), run ``r`` from its generator ``state[r]``.

    ``seen``, ``d``, ``c``: the constants (``msroute.policies.streams.GammaConstants``).
    """
    n_runs, width = shape.shape
    refresh(shape, seen, d, c, 0)
    log_g = np.empty(width)
    for r in range(n_runs):
        boosted, s = _gammas(shape[r], d[r], c[r], load(state, r), out[r], log_g)
        store(state, r, s)
        if boosted:
            for j in range(width):
                out[r, j] = math.exp(log_g[j])


@compiled
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
    refresh(a, seen, d, c, 0)
    refresh(b, seen, d, c, a.shape[1])
    g, log_g = np.empty(seen.shape[1]), np.empty(seen.shape[1])
    for r in range(a.shape[0]):
        store(state, r, betas(seen[r], d[r], c[r], load(state, r), g, log_g, out[r]))


@inline
def beta(
    a: float, b: float, da: float, ca: float, db: float, cb: float, s: State
) -> tuple[float, State]:
    """One ``Beta(a, b)`` variate ``X / (X + Y)``, entry by entry (``msroute._skill_draws``).

    ``X ~ Gamma(a)``, then ``Y ~ Gamma(b)`` (constants ``da, ca`` and ``db, cb``), each shape
    below 1 drawn as ``Gamma(shape + 1) U^(1/shape)`` with its uniform right after its Gamma;
    from the logarithms when both shapes are below 1 (X and Y may then both be 0.0 in floating
    point). With one shape at 1 or more its variate is positive, so ``X + Y > 0``.
    """
    x, s = _gamma(da, ca, s)
    ua = 1.0
    if a < 1.0:
        u, s = _uniform(s)
        ua = 1.0 - u  # in (0, 1]
    y, s = _gamma(db, cb, s)
    ub = 1.0
    if b < 1.0:
        u, s = _uniform(s)
        ub = 1.0 - u
    if a < 1.0 and b < 1.0:
        log_ratio = math.log(y) + math.log(ub) / b - math.log(x) - math.log(ua) / a
        return 1.0 / (1.0 + math.exp(log_ratio)), s
    if a < 1.0:
        x *= ua ** (1.0 / a)
    if b < 1.0:
        y *= ub ** (1.0 / b)
    return x / (x + y), s


@compiled
def fill_words(state: UInt64Array, out: UInt64Array) -> None:
    """The next words of the generator ``state`` (4,) in ``out`` (1-d): the raw stream."""
    s = (state[0], state[1], state[2], state[3])
    for i in range(out.size):
        out[i], s = _next(s)
    state[0], state[1], state[2], state[3] = s


@compiled
def fill_normals(state: UInt64Array, out: FloatArray) -> None:
    """The next standard normals of the generator ``state`` (4,) in ``out`` (1-d)."""
    s = (state[0], state[1], state[2], state[3])
    for i in range(out.size):
        out[i], s = _normal(s)
    state[0], state[1], state[2], state[3] = s
