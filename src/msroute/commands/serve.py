"""``msroute serve``: the routers of a config file behind an authenticated HTTP API.

The token comes from the environment variable ``MSROUTE_TOKEN``; without it the server refuses
to start unless ``--no-auth`` is given, and ``--no-auth`` is refused on a non-loopback host. The
service needs the ``serve`` extra; it is imported only when this command runs.
"""

from __future__ import annotations

import argparse
import os

from msroute.commands._args import port_arg
from msroute.errors import MSRouteError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` command to the ``msroute`` parser."""
    parser = subparsers.add_parser(
        "serve",
        help="serve routers over HTTP (needs the serve extra)",
        description="Serve the routers of a config file ([routers.NAME] tables in the Router "
        "config format) over an authenticated HTTP API. Clients send 'Authorization: Bearer "
        "$MSROUTE_TOKEN'. Each router's journal defaults to DATA_DIR/NAME.db; existing "
        "journals are recovered on start.",
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="service config (TOML)")
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
        "--no-auth",
        action="store_true",
        help="serve without a token (only on a loopback host)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default: info)",
    )
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        from msroute.service import check_start, load_service_config, serve
    except ImportError as exc:
        raise MSRouteError(
            f"msroute serve needs the serve extra: pip install 'msroute[serve]' ({exc})"
        ) from exc
    token = os.environ.get("MSROUTE_TOKEN")
    check_start(args.host, token, args.no_auth)  # refuse before reading journals
    config = load_service_config(args.config, data_dir=args.data_dir)
    serve(
        config,
        host=args.host,
        port=args.port,
        token=None if args.no_auth else token,
        no_auth=args.no_auth,
        log_level=args.log_level,
    )
    return 0
