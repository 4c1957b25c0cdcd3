"""``msroute gateway``: msroute from an OpenAI client or LiteLLM (docs/gateway.md).

An OpenAI-compatible gateway over ``msroute serve``: ``POST /v1/chat/completions`` with model
``msroute/<router>`` routes the query, calls each member of the team at its upstream, books what
the calls cost (their usage times their prices) on the decision, and answers in the OpenAI
format; rewards come back as ``POST /v1/feedback`` or Langfuse scores. Budgets may be given in
dollars per day or per month. Needs the ``serve`` extra; nothing outside this package imports
it.

- ``load_gateway_config`` reads the TOML file (``msroute.gateway.config``).
- ``create_gateway_app`` builds the ASGI app; ``serve_gateway`` runs it under uvicorn.
"""

from __future__ import annotations

from msroute.gateway.app import Gateway, create_gateway_app
from msroute.gateway.config import GatewayConfig, gateway_config_from_dict, load_gateway_config
from msroute.gateway.server import serve_gateway

__all__ = [
    "Gateway",
    "GatewayConfig",
    "create_gateway_app",
    "gateway_config_from_dict",
    "load_gateway_config",
    "serve_gateway",
]
