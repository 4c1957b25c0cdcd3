"""The request bodies of the gateway's own endpoints (pydantic models: its OpenAPI schema).

The chat request is OpenAI's: everything but ``model`` and the gateway's ``msroute`` options
passes to the upstreams as sent (``extra`` allowed). The feedback and score bodies are
strict, as the service's are (``msroute.service.models``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from msroute.service.models import STRICT, Cost, Finite, Ident

__all__ = ["ChatOptions", "ChatRequest", "GatewayFeedback", "Score"]


class ChatOptions(BaseModel):
    """What the gateway takes from ``extra_body={"msroute": {...}}``."""

    model_config = STRICT

    context: str | None = Field(
        None, max_length=128, description="The query's context (routers with contexts)."
    )
    eligible: list[Ident] | None = Field(
        None, min_length=1, max_length=100_000, description="Only these experts may answer."
    )


class ChatRequest(BaseModel):
    """An OpenAI chat completion request whose ``model`` is ``msroute/<router>``."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "model": "msroute/chat",
                    "messages": [{"role": "user", "content": "Summarize RFC 9457."}],
                    "msroute": {"context": "docs"},
                }
            ]
        },
    )

    model: str = Field(description="msroute/<router>: the router that picks the team.")
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = Field(
        False,
        strict=True,
        description="A JSON boolean: the upstreams are sent the value as it came, so one the "
        'gateway read as true (1, "yes") would not be a stream to them.',
    )
    msroute: ChatOptions | None = None


class GatewayFeedback(BaseModel):
    """The reward of a gateway decision (its id names its router)."""

    model_config = STRICT | ConfigDict(
        json_schema_extra={"examples": [{"decision_id": "chat:4f1c2a9e0b7d4c3e", "reward": 1.0}]}
    )

    decision_id: Ident
    reward: Finite
    cost: dict[str, Cost] | None = None


class Score(BaseModel):
    """Langfuse's score body: ``traceId`` is the decision id, a numeric ``value`` the reward.
    Langfuse's other fields (``id``, ``comment``, ``observationId``, ``dataType``...) are
    accepted and ignored. A categorical score's ``value`` is a string: it is taken here so that
    a router with ``score_name`` ignores such a score of another name; one it would learn from
    must be a number (the endpoint refuses it otherwise)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [{"traceId": "chat:4f1c2a9e0b7d4c3e", "name": "quality", "value": 0.8}]
        },
    )

    traceId: Ident
    name: str = Field(min_length=1, max_length=200)
    value: Finite | Annotated[str, Field(max_length=1000)]
