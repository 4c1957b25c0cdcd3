"""The request and response bodies of the HTTP API; these pydantic models are its OpenAPI schema.

The request models are strict: a number must be a JSON number (``"0.8"``, ``" 1e0 "`` and ``true``
are refused, not converted), a string a JSON string, and numbers must be finite (JSON has no NaN,
and the models refuse the ``NaN``/``Infinity`` literals some encoders write). Unknown fields are
refused, so a typo such as ``"rewrad"`` is a 422 naming the field rather than a silently ignored
value. Costs and bounds lie in the range of costs and bounds, ``|x| <= 1e12`` in the cost's
unit (``msroute._validation.COST_MAX``; costs are also ``>= 0``), so the schema states it. What
the schema says is thus exactly what is accepted. Ranges that depend on the router (the
reward's range, the cost names, the expert and context names) are checked by the Router itself.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from msroute._validation import COST_MAX

__all__ = [
    "ID_PATTERN",
    "Bounds",
    "BoundsRequest",
    "CostRequest",
    "CostResponse",
    "DecisionRequest",
    "DecisionResponse",
    "ExpertCost",
    "ExpertCostRequest",
    "ExpertRequest",
    "ExpertResponse",
    "FeedbackRequest",
    "FeedbackResponse",
    "Health",
    "Problem",
    "RouterList",
    "RouterSummary",
]

Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
#: A cost (an expert's, or a realized one) and a bound: finite, in the range of costs and bounds.
Cost = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0.0, le=COST_MAX)]
BoundValue = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-COST_MAX, le=COST_MAX)]
#: Ids travel in URLs and journals: printable, no slash, bounded length.
ID_PATTERN = r"^[A-Za-z0-9_.:@-]{1,128}$"
Ident = Annotated[str, Field(min_length=1, max_length=128, pattern=ID_PATTERN)]


#: The configuration of every request model: strict types, no unknown fields.
STRICT = ConfigDict(extra="forbid", strict=True)


class DecisionRequest(BaseModel):
    """Ask a router for a team."""

    model_config = STRICT | ConfigDict(
        json_schema_extra={
            "examples": [
                {"context": "code", "eligible": ["frontier-mini", "self-hosted-8b"]},
                {"context": "support", "decision_id": "req-2f9c41"},
                {"prompt": "Write a function that reverses a list."},
            ]
        },
    )

    context: str | None = Field(
        None, max_length=128, description="Context name (routers configured with contexts)."
    )
    prompt: str | None = Field(
        None,
        max_length=1_000_000,
        description="Instead of context, for a router with contexts_from: the prompt's text, "
        "whose predicted task or cluster is the context (not journaled).",
    )
    eligible: list[Ident] | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        description="Only these expert ids may be drawn (default: every expert).",
    )
    decision_id: Ident | None = Field(
        None,
        description="Your own id for the decision (idempotency key): the same id again returns "
        "the same decision. Generated when absent.",
    )


class DecisionResponse(BaseModel):
    """A routing decision; send its reward to ``.../decisions/{decision_id}/feedback``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "decision_id": "req-2f9c41",
                    "team": ["self-hosted-8b", "frontier-mini"],
                    "draws": ["self-hosted-8b", "frontier-mini"],
                    "propensities": {
                        "frontier-large": 0.1,
                        "frontier-mini": 0.3,
                        "open-70b": 0.2,
                        "self-hosted-8b": 0.4,
                    },
                    "policy_version": 12,
                    "cost": {"usd": 0.0025, "self_hosted": 1.0},
                    "deadline": 1767225600.0,
                }
            ]
        }
    )

    decision_id: str
    team: list[str] = Field(description="Distinct expert ids to send the query to, in draw order.")
    draws: list[str] = Field(description="The M draws, with repeats.")
    propensities: dict[str, float] | None = Field(
        description="Probability of each eligible expert in the sampling distribution "
        "(None for policies without a closed form)."
    )
    policy_version: int
    cost: dict[str, float] = Field(description="Realized cost of the team by cost name.")
    deadline: float = Field(description="Unix time after which feedback is late.")


class FeedbackRequest(BaseModel):
    """The outcome of a decision."""

    model_config = STRICT | ConfigDict(
        json_schema_extra={"examples": [{"reward": 0.8}, {"reward": 0.4, "cost": {"usd": 0.031}}]},
    )

    reward: Finite = Field(description="The team's reward, in the router's reward range.")
    cost: dict[str, Cost] | None = Field(
        None,
        description="The realized cost by cost name, when it is only known afterwards "
        "(replaces the cost computed at decision time).",
    )


class CostRequest(BaseModel):
    """A decision's realized cost, known before its reward (the tokens an LLM call billed)."""

    model_config = STRICT | ConfigDict(json_schema_extra={"examples": [{"cost": {"usd": 0.0042}}]})

    cost: dict[str, Cost] = Field(min_length=1, max_length=1000)


class CostResponse(BaseModel):
    """What became of a cost report: booked on a pending decision, counted on a closed one
    (not learned), or already the decision's cost (nothing written)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "applied"}]})

    status: Literal["applied", "late", "unchanged"]


class FeedbackResponse(BaseModel):
    """What became of a feedback: learned, a repeat, or after the deadline (logged, not learned)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "applied"}]})

    status: Literal["applied", "duplicate", "late", "expert_removed"]


class ExpertRequest(BaseModel):
    """A new expert and its cost vector."""

    model_config = STRICT | ConfigDict(
        json_schema_extra={
            "examples": [{"id": "open-8x7b", "cost": {"usd": 0.003, "self_hosted": 0.0}}]
        },
    )

    id: Ident
    cost: dict[str, Cost] = Field(description="One value per cost name of the router.")


class ExpertCostRequest(BaseModel):
    """An expert's new price: its cost by cost name (costs not named keep theirs)."""

    model_config = STRICT | ConfigDict(
        json_schema_extra={"examples": [{"cost": {"usd": 0.0025}}]},
    )

    cost: dict[str, Finite] = Field(max_length=1000, description="New costs, by cost name.")


class ExpertCost(BaseModel):
    """An expert's cost from the next decision on, by cost name."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "open-8x7b", "cost": {"usd": 0.0025}}]}
    )

    id: str
    cost: dict[str, float]


class BoundsRequest(BaseModel):
    """New bounds on the time-averaged realized cost, by cost name (``null`` removes a bound;
    costs not named keep theirs)."""

    model_config = STRICT | ConfigDict(
        json_schema_extra={
            "examples": [
                {"upper": {"usd": 0.025}},
                {"upper": {"usd": 0.02}, "lower": {"self_hosted": None}},
            ]
        },
    )

    upper: dict[str, BoundValue | None] | None = Field(None, max_length=1000)
    lower: dict[str, BoundValue | None] | None = Field(None, max_length=1000)


class Bounds(BaseModel):
    """The bounds a router enforces from now on, by cost name (a cost not named is unbounded
    on that side)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"upper": {"usd": 0.025}, "lower": {}}]}
    )

    upper: dict[str, float]
    lower: dict[str, float]


class ExpertResponse(BaseModel):
    """The experts of a router after a change."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"experts": ["frontier-mini", "self-hosted-8b"]}]}
    )

    experts: list[str]


class RouterList(BaseModel):
    """The routers this process serves."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"routers": ["chat"]}]})

    routers: list[str]


class Health(BaseModel):
    """Liveness: the process serves requests."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})

    status: Literal["ok"]


class Problem(BaseModel):
    """An error, as ``application/problem+json`` (RFC 9457)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "type": "about:blank",
                    "title": "Unprocessable Content",
                    "status": 422,
                    "detail": "body.reward: Input should be a finite number",
                }
            ]
        },
    )

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None


class RouterSummary(BaseModel):
    """A router's state (``Router.state()``): counters, experts and their costs, the
    time-averaged cost and the bounds it is held to, and the routing distribution."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "chat",
                    "policy": "omd",
                    "decisions": 1200,
                    "feedback_applied": 1150,
                    "feedback_late": 4,
                    "pending": 30,
                    "expired": 20,
                    "policy_version": 1162,
                    "experts": ["frontier-mini", "self-hosted-8b"],
                    "expert_costs": {
                        "frontier-mini": {"usd": 0.004},
                        "self-hosted-8b": {"usd": 0.0005},
                    },
                    "cost_names": ["usd"],
                    "contexts": [],
                    "avg_cost": {"usd": 0.0021},
                    "spent": {"usd": 2.52},
                    "bounds": {"upper": {"usd": 0.0025}, "lower": {}},
                    "q": {"frontier-mini": 0.45, "self-hosted-8b": 0.55},
                    "seq": 2391,
                }
            ]
        }
    )

    name: str | None = Field(description="The router's configured label.")
    policy: str = Field(description="The routing policy.")
    decisions: int = Field(description="Decisions made (in the journal).")
    feedback_applied: int = Field(description="Feedback learned from.")
    feedback_late: int = Field(
        description="Feedback logged but not learned (late, or an expert removed)."
    )
    pending: int = Field(description="Decisions awaiting feedback.")
    expired: int = Field(description="Decisions expired without feedback.")
    policy_version: int = Field(description="How many times the policy learned or changed.")
    experts: list[str] = Field(description="The expert ids, in the router's order.")
    expert_costs: dict[str, dict[str, float]] = Field(
        description="Each expert's cost from the next decision on, by cost name."
    )
    cost_names: list[str]
    contexts: list[str] = Field(description="The context names (empty: none).")
    avg_cost: dict[str, float] = Field(
        description="Time-averaged realized cost per decision, by cost name."
    )
    spent: dict[str, float] = Field(
        description="Total realized cost since the router started, by cost name."
    )
    bounds: Bounds = Field(description="The bounds on the time-averaged cost now enforced.")
    q: dict[str, float] | None = Field(
        description="The routing distribution by expert (an OMD policy without contexts; "
        "else null)."
    )
    q_by_context: dict[str, dict[str, float]] | None = Field(
        None,
        description="The routing distribution by context, then expert (an OMD policy with "
        "contexts only; absent otherwise).",
    )
    seq: int = Field(description="The journal's last sequence number.")
