"""``msroute gateway``: ``msroute serve`` plus an OpenAI-compatible chat completions endpoint.

The config is a service config whose routers' experts are upstream endpoints
(``msroute.gateway.config``; docs/gateway.md). The same token, host and data directory rules as
``msroute serve``; the gateway needs the ``serve`` extra and is imported only when this runs.
"""

from __future__ import annotations

import argparse

from msroute.commands._server import add_server_arguments, serve_extra, start_server

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``gateway`` command to the ``msroute`` parser."""
    parser = subparsers.add_parser(
        "gateway",
        help="serve routers as an OpenAI-compatible gateway (needs the serve extra)",
        description="Serve the routers of a gateway config as 'msroute serve' does, plus POST "
        "/v1/chat/completions: the model msroute/<router> picks the router, which picks the "
        "team of upstream models that answer; each call's usage times its prices is booked "
        "on the decision. Clients send 'Authorization: Bearer $MSROUTE_TOKEN'.",
    )
    add_server_arguments(parser, config_help="gateway config (TOML)")
    parser.set_defaults(func=_gateway)


def _gateway(args: argparse.Namespace) -> int:
    with serve_extra("gateway"):
        from msroute.gateway import load_gateway_config, serve_gateway
    return start_server(args, load_gateway_config, serve_gateway)
