"""``msroute gateway``: ``msroute serve`` plus an OpenAI-compatible chat completions endpoint.

The config is a service config whose routers' experts are upstream endpoints
(``msroute.gateway.config``; docs/gateway.md). The same token, host and data directory rules as
``msroute serve``; the gateway needs the ``serve`` extra and is imported only when this runs.
"""

from __future__ import annotations

import argparse
import os

from msroute.commands._args import port_arg
from msroute.errors import MSRouteError

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
    parser.add_argument("--config", required=True, metavar="FILE", help="gateway config (TOML)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only)"
    )
    parser.add_argument(
        "--port", type=port_arg, default=8080, help="port, 1..65535 (default: 8080)"
    )
    parser.add_argument(
        "--data-dir", default=".", metavar="DIR", help="directory of the journals (default: .)"
    )
    parser.add_argument(
        "--no-auth", action="store_true", help="serve without a token (only on a loopback host)"
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default: info)",
    )
    parser.set_defaults(func=_gateway)


def _gateway(args: argparse.Namespace) -> int:
    try:
        from msroute.gateway import load_gateway_config, serve_gateway
        from msroute.service import check_start
    except ImportError as exc:
        raise MSRouteError(
            f"msroute gateway needs the serve extra: pip install 'msroute[serve]' ({exc})"
        ) from exc
    token = os.environ.get("MSROUTE_TOKEN")
    check_start(args.host, token, args.no_auth)  # refuse before reading journals
    config = load_gateway_config(args.config, data_dir=args.data_dir)
    serve_gateway(
        config,
        host=args.host,
        port=args.port,
        token=None if args.no_auth else token,
        no_auth=args.no_auth,
        log_level=args.log_level,
    )
    return 0
