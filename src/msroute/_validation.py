"""Argument checks shared by the public functions (validate once, at the boundary)."""

from __future__ import annotations

import math
import re
import sys
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from msroute.errors import DataFormatError, InvalidTypeError, InvalidValueError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
UInt64Array = NDArray[np.uint64]

#: The range of every cost and bound msroute takes, in the cost's own unit: a cost (an
#: expert's table cost, ``cbar``, a realized cost given as feedback, a cost cell of a data file)
#: lies in ``[0, COST_MAX]``, a bound or a budget in ``[-COST_MAX, COST_MAX]``
#: (docs/budgets.md, "The range of costs and bounds"). A trillion of the cost's unit per query
#: is a units mistake, not data. The limit keeps the feasibility LPs' coefficients three orders
#: of magnitude below the 1e15 from which their solver (HiGHS) refuses a model, and every sum of
#: costs finite: 2**63 decisions of M experts at the limit sum to M * 9.2e30.
COST_MAX = 1e12

#: The smallest positive float of full precision: a positive setting (a step size, a rate)
#: below it is subnormal, loses its digits and turns into 0 in the first product (a division
#: by zero deep in a solver), so such settings are refused.
FLOAT_TINY = sys.float_info.min

#: Tolerance for "sums to one" checks on routing distributions.
SIMPLEX_ATOL = 1e-8
#: Longest piece of user input an error message quotes.
QUOTE_LIMIT = 80


#: A number as a data file writes it: ASCII decimal digits, optionally with an exponent (or a
#: non-finite word, which the caller refuses by name). ASCII only: ``float`` also reads the
#: digits of other scripts (Arabic-Indic ``٣``, fullwidth ``３``), which no data file means.
_DECIMAL = re.compile(
    r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
    re.IGNORECASE | re.ASCII,
)


def parse_decimal(text: str) -> float:
    """A number read from a data file's cell, as a float (InvalidValueError, a ValueError, if
    it is not one).

    Stricter than ``float``, which also takes ``1_000`` (Python's digit grouping), digits of
    other scripts and other spellings no data file means: a cell ``0_1`` would otherwise be
    read as 1, a cell ``٣`` as 3.

    Examples
    --------
    >>> parse_decimal(" 2.5e-3 "), parse_decimal("-1")
    (0.0025, -1.0)
    >>> parse_decimal("0_1")
    Traceback (most recent call last):
    ...
    msroute.errors.InvalidValueError: not a decimal number: '0_1'
    >>> parse_decimal("\uff13")  # a fullwidth 3
    Traceback (most recent call last):
    ...
    msroute.errors.InvalidValueError: not a decimal number: '３'
    """
    t = text.strip()
    if not _DECIMAL.fullmatch(t):
        raise InvalidValueError(f"not a decimal number: {quoted(t)}")
    return float(t)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique, as ``object_pairs_hook`` of ``json.loads``
    (``json`` keeps the last of a repeated key, silently dropping the first):
    ``DataFormatError`` naming the key otherwise."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise DataFormatError(f"the key {quoted(key)} appears twice")
        seen.add(key)
    return dict(pairs)


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters.

    A malformed 6 MB line or a field of a million digits must not be echoed whole; the cut
    says how long the input was. Integers too long for ``repr`` are described, not printed.

    Examples
    --------
    >>> quoted("x" * 100, limit=10)
    "'xxxxxxxxxx'... (100 characters)"
    >>> quoted(10**5000)
    '<an integer of 5001 digits>'
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<an integer of {_digits(value)} digits>"
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    return f"{text[:limit]}... ({len(text)} characters)" if len(text) > limit else text


def _digits(value: int) -> int:
    """Decimal digits of an int without converting it to a string (which Python caps)."""
    n = int(abs(value).bit_length() * 0.30102999566398120) + 1
    return n if abs(value) >= 10 ** (n - 1) else n - 1


def as_real_array(value: ArrayLike, name: str) -> FloatArray:
    """``value`` as a float64 array; anything that is not an array of real numbers (text,
    objects, ragged lists, complex numbers, whose imaginary part numpy would drop) is an
    ``InvalidTypeError`` naming ``name``. NaN and inf pass (callers decide)."""
    if type(value) is np.ndarray and value.dtype == np.float64:
        return value
    problem: Exception | None = None
    try:
        arr = np.asarray(value)
        if arr.dtype.kind not in "cOUSVMm":  # not complex, objects, text or dates
            return np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        problem = exc
    raise InvalidTypeError(
        f"{name} must be an array of real numbers, got {quoted(value)} ({type(value).__name__})"
    ) from problem


def as_float_array(
    value: ArrayLike, name: str, *, ndim_min: int = 0, ndim_max: int = 32
) -> FloatArray:
    """Convert ``value`` to a float64 array, rejecting NaN/inf and wrong dimensionality."""
    arr = as_real_array(value, name)
    if not ndim_min <= arr.ndim <= ndim_max:
        want = f"{ndim_min}" if ndim_min == ndim_max else f"{ndim_min} to {ndim_max}"
        raise InvalidValueError(f"{name} must have {want} dimensions, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise InvalidValueError(f"{name} contains {bad} NaN or infinite value(s)")
    return arr


def as_real(value: Any, name: str) -> float:
    """``value`` as a float (a number, or anything else ``float()`` accepts, but text only as
    an ASCII decimal number, ``parse_decimal``); otherwise an error naming ``name`` (an
    ``InvalidValueError`` for an integer beyond the float range, which ``float()`` cannot
    convert)."""
    try:
        return parse_decimal(value) if isinstance(value, str) else float(value)
    except OverflowError as exc:
        raise InvalidValueError(f"{name} == {quoted(value)} is beyond the float range") from exc
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(
            f"{name} must be a real number, got {type(value).__name__} {quoted(value)}"
        ) from exc


def finite_real(value: object, name: str, error: type[Exception] = InvalidValueError) -> float:
    """``value`` as a float if it is a real number (Python's or numpy's, not a bool, not a
    string) and finite; otherwise ``error`` naming ``name``."""
    if isinstance(value, float):  # the common case, checked first (numpy's float64 too)
        if not math.isfinite(value):
            raise error(f"{name}: must be finite, got {quoted(value)}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise error(f"{name}: must be a number, got {value!r:.80}")
    x = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf
    if not math.isfinite(x):
        raise error(f"{name}: must be finite, got {quoted(value)}")
    return x


def text_name(value: object, name: str, error: type[Exception] = InvalidValueError) -> str:
    """``value`` if it is a non-empty string that can be written as UTF-8 (a journal, a file or
    a response stores it so; a lone surrogate cannot be); otherwise ``error`` naming ``name``.

    Examples
    --------
    >>> text_name("big", "expert_id")
    'big'
    >>> text_name("\\ud800", "id")
    Traceback (most recent call last):
    ...
    msroute.errors.InvalidValueError: id: '\\ud800' is not UTF-8 text (a lone surrogate at 0)
    """
    if not isinstance(value, str) or not value:
        raise error(f"{name}: must be a non-empty string, got {value!r:.80}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise error(
            f"{name}: {quoted(value)} is not UTF-8 text (a lone surrogate at {exc.start})"
        ) from None
    return value


def check_cost_range(value: float, name: str, error: type[Exception] = InvalidValueError) -> float:
    """``value`` if it lies in the range of costs and bounds, ``[-COST_MAX, COST_MAX]``;
    otherwise ``error`` naming ``name`` (NaN is outside too).

    Examples
    --------
    >>> check_cost_range(0.03, "experts.big.usd")
    0.03
    >>> check_cost_range(-5e12, 'upper[0]')  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    msroute.errors.InvalidValueError: upper[0]: -5e+12 is outside the range of costs and bounds
    """
    if not -COST_MAX <= value <= COST_MAX:
        raise error(
            f"{name}: {value:g} is outside the range of costs and bounds, "
            f"[{-COST_MAX:g}, {COST_MAX:g}] in the cost's own unit (state it in a larger unit)"
        )
    return value


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, requiring an integral value ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidTypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise InvalidValueError(f"{name} == {value}, must be >= {minimum}")
    return int(value)


def check_simplex(q: FloatArray, name: str = "q") -> None:
    """Require every row of ``q`` (last axis) to be a probability vector."""
    if np.any(q < -SIMPLEX_ATOL):
        raise InvalidValueError(
            f"{name} has negative entries (min {q.min():.3g}); it must lie on the simplex"
        )
    sums = q.sum(axis=-1)
    worst = float(np.max(np.abs(sums - 1.0))) if sums.size else 0.0
    if worst > SIMPLEX_ATOL * max(1, q.shape[-1]):
        raise InvalidValueError(
            f"{name} must sum to one along its last axis; largest deviation {worst:.3g}"
        )


def read_only(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr`` made read-only in place (arrays held by frozen records)."""
    arr.setflags(write=False)
    return arr


def default_gamma(n_experts: int) -> float:
    """The paper's exploration floor ``gamma = 1/(10K)`` for K experts."""
    return 1.0 / (10.0 * n_experts)


#: The adaptive floor takes at most this share of the largest feasible floor, so that the
#: feasibility LP keeps slack: the rest of the room between the floor's forced spend and the
#: bounds is the policy's to learn in (docs/concepts.md, "Budgets near the floor").
FLOOR_SHARE = 0.5
#: The smallest floor a budget may leave: below it the bounds admit only routings that never call
#: some expert (importance weights of 1/gamma > 1e9 carry no information).
MIN_FLOOR = 1e-9


def adaptive_gamma(n_experts: int, max_floor: float) -> float:
    """The exploration floor used by default: ``min(1/(10K), FLOOR_SHARE * max_floor)``.

    ``max_floor`` is the largest floor at which Assumption 1 holds
    (`msroute.Problem.max_floor`). Where the paper's ``1/(10K)`` is feasible with slack
    (at most half the largest floor) it is returned unchanged, bit for bit; otherwise the floor
    shrinks to half the largest one.

    Examples
    --------
    >>> adaptive_gamma(10, 0.1)  # uniform routing is feasible: the paper's floor
    0.01
    >>> adaptive_gamma(10, 0.004)  # a tight budget: half the largest feasible floor
    0.002
    """
    return min(default_gamma(n_experts), FLOOR_SHARE * max_floor)


def check_gamma(
    gamma: float,
    n_experts: int,
    name: str = "gamma",
    too_large: type[Exception] = InvalidValueError,
) -> float:
    """Require ``0 <= gamma <= 1/K`` (the floored simplex is non-empty); ``name``: the
    parameter's name in the messages, ``too_large``: the error above ``1/K``."""
    gamma = as_real(gamma, name)
    if not np.isfinite(gamma) or gamma < 0:
        raise InvalidValueError(f"{name} == {gamma}, must be a finite number >= 0")
    if gamma * n_experts > 1.0 + 1e-12:
        raise too_large(
            f"{name} == {gamma} with {n_experts} experts, must be <= 1/K = {1.0 / n_experts:.6g}"
        )
    return gamma


def check_contexts(
    contexts: ArrayLike | None,
    weights: ArrayLike | None,
    n_rounds: int,
    n_runs: int,
    n_dims: int | None = None,
) -> tuple[IntArray | None, FloatArray | None]:
    """Validate per-round contexts and their reward-dimension weights (given together or not).

    Returns ``contexts`` as ints of shape (T, R) (a (T,) sequence is shared by every run) and
    ``weights`` as floats of shape (X, N), both None when neither is given.
    """
    if contexts is None and weights is None:
        return None, None
    if contexts is None or weights is None:
        raise InvalidValueError("contexts and context_weights go together: give both or neither")
    w = as_float_array(weights, "context_weights", ndim_min=2, ndim_max=2)
    if np.any(w < 0):
        raise InvalidValueError(f"context_weights must be >= 0; min is {w.min():.3g}")
    if n_dims is not None and w.shape[1] != n_dims:
        raise InvalidValueError(f"context_weights must have shape (X, N = {n_dims}), got {w.shape}")
    c = np.asarray(contexts)
    if c.shape == (n_rounds,):
        c = np.broadcast_to(c[:, None], (n_rounds, n_runs))
    if c.shape != (n_rounds, n_runs) or not np.issubdtype(c.dtype, np.integer):
        raise InvalidValueError(
            f"contexts must be an integer array of shape (T,) or (T, R) = {(n_rounds, n_runs)}, "
            f"got {c.dtype} {c.shape}"
        )
    if c.min() < 0 or c.max() >= w.shape[0]:
        raise InvalidValueError(
            f"contexts must lie in [0, {w.shape[0] - 1}] (one row of weights each)"
        )
    return np.asarray(c, dtype=np.int64), w
