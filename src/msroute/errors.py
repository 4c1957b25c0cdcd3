"""The exception hierarchy of msroute.

Every error the library raises on purpose derives from ``MSRouteError``, so callers can
catch the library's own failures in one place, and the command line can print them as one line
while anything else (a bug) keeps its traceback. Errors about a wrong *value* also derive from
``ValueError``, errors about a wrong *type* from ``TypeError``, so code written
against plain numpy conventions (``except ValueError``) keeps working.

A test checks that the package raises no bare ``ValueError`` or ``TypeError``.
"""

from __future__ import annotations

__all__ = [
    "CacheWarning",
    "ConfigError",
    "ConvergenceWarning",
    "DataFormatError",
    "DataWarning",
    "DecisionConflictError",
    "EmptyFeasibleSetError",
    "InfeasibleConstraintsError",
    "InvalidFeedbackError",
    "InvalidStateError",
    "InvalidTypeError",
    "InvalidValueError",
    "JournalError",
    "MSRouteError",
    "MSRouteWarning",
    "PolicyCheckError",
    "PolicyFileError",
    "ResourceError",
    "RouterConfigError",
    "UnknownDecisionError",
    "UnknownRouterError",
    "UnsupportedEstimateError",
]


class MSRouteError(Exception):
    """Base class of every error raised by msroute on purpose."""


class InvalidValueError(MSRouteError, ValueError):
    """An argument, setting or piece of feedback has a value msroute cannot use (wrong shape,
    NaN, out of range, unknown name); the message names it, the bound and the value received."""


class InvalidTypeError(MSRouteError, TypeError):
    """An argument has a type msroute cannot use; the message names it and the type received."""


class InvalidStateError(MSRouteError, ValueError):
    """A policy's learned state is invalid: a NaN or infinite value, a negative counter, a
    routing distribution off the simplex. Raised by ``msroute.policies.check_state``
    (after every update in debug mode, and on every loaded policy file)."""


class InfeasibleConstraintsError(MSRouteError, ValueError):
    """No routing policy meets the constraints (the paper's Assumption 1 fails).

    The message names the coordinates that cannot be met and the best value reachable for each.
    """


class EmptyFeasibleSetError(MSRouteError, ValueError):
    """The set a QP step projects onto is empty (floored simplex cut by a half-space)."""


class DataFormatError(MSRouteError, ValueError):
    """A data file or a worker list is malformed; the message names the file and line."""


class ConfigError(MSRouteError, ValueError):
    """An experiment or service configuration (TOML file or flags) is invalid: unknown table or
    key, wrong type or out-of-range value. The message names the file, the table and the key."""


class PolicyFileError(DataFormatError):
    """A saved policy file cannot be loaded: missing, not a policy file, corrupt or truncated,
    written by a newer msroute, or naming a policy this msroute does not know.

    The message names the file and the problem.
    """


class ResourceError(MSRouteError, ValueError):
    """A computation would need more memory than is available; raised before it starts, with
    the estimate and what to change."""


class PolicyCheckError(MSRouteError, AssertionError):
    """A policy class breaks the policy contract (``msroute.checks.check_policy``); the
    message names the class, the check and what went wrong."""


class RouterConfigError(MSRouteError, ValueError):
    """A router configuration is invalid; the message names the key (``experts.big``)."""


class UnknownDecisionError(MSRouteError, LookupError):
    """Feedback names a decision id the router never issued."""


class DecisionConflictError(MSRouteError, ValueError):
    """A decision id is routed again with another context or eligible set than the first time,
    or its feedback is repeated with another reward or cost (a repeat is a retried request); the
    message names both, and nothing changed."""


class InvalidFeedbackError(MSRouteError, ValueError):
    """A route or feedback call carries a bad value (NaN reward, unknown cost name, unknown
    context or expert); the message names the field, and nothing changed."""


class UnsupportedEstimateError(MSRouteError, ValueError):
    """An off-policy estimate the log cannot support: the logging policy rarely drew what the
    candidate draws, so the effective sample size of the importance weights is below
    ``min_ess`` and the point estimate would rest on a handful of weights; the message gives
    the effective sample size."""


class JournalError(MSRouteError):
    """A router journal is damaged, of another schema version, or disagrees with the decisions
    it re-derives; the message names the file and the first problem."""


class MSRouteWarning(UserWarning):
    """Base class of every warning msroute issues on purpose (the command line prints each as
    one line)."""


class CacheWarning(MSRouteWarning):
    """A cached result was damaged (unreadable, missing or misshapen arrays, NaN values) and is
    recomputed; the message names the file and what was wrong."""


class DataWarning(MSRouteWarning):
    """A data file was read with a correction (e.g. exact duplicate annotations counted once);
    the message names the file and says how many rows were affected."""


class ConvergenceWarning(MSRouteWarning, RuntimeWarning):
    """An iterative solver (the oracle of eq. (3)) stopped before its certified tolerance."""


class UnknownRouterError(MSRouteError, LookupError):
    """A request names a router the service does not serve; the message names it."""
