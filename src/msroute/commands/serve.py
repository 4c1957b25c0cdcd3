"""``msroute serve``: the routers of a config file behind an authenticated HTTP API.

The token comes from the environment variable ``MSROUTE_TOKEN``; without it the server refuses
to start unless ``--no-auth`` is given, and ``--no-auth`` is refused on a non-loopback host. The
service needs the ``serve`` extra; it is imported only when this command runs.
"""

from __future__ import annotations

import argparse

from msroute.commands._server import add_server_arguments, serve_extra, start_server

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
    add_server_arguments(parser, config_help="service config (TOML)")
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    with serve_extra("serve"):
        from msroute.service import load_service_config, serve
    return start_server(args, load_service_config, serve)
