"""A decision waiting for its feedback: what the live router and its recovery share."""

from __future__ import annotations

from dataclasses import dataclass

from msroute._validation import FloatArray
from msroute.policies.base import Decision

__all__ = ["Pending"]


@dataclass
class Pending:
    """A decision waiting for its feedback."""

    n: int
    draws: tuple[str, ...]
    probs: tuple[float, ...] | None  # propensity of each draw
    context: int | None
    cost: FloatArray
    deadline: float
    decision: Decision | None  # the policy's value, valid while the expert layout is `layout`
    layout: int
    seq: int  # the journal event of the decision
    #: Restored from the journal: the whole distribution as stored, and its expert layout
    #: (the decision value is built from it when first needed).
    blob: bytes | None = None
    blob_layout: int = -1
