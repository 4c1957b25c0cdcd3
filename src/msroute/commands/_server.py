"""What ``msroute serve`` and ``msroute gateway`` share: their flags and how they start.

Both read a config file, take the token from ``MSROUTE_TOKEN`` and refuse an unsafe start
(no token without ``--no-auth``, ``--no-auth`` off loopback) before any journal is read.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

from msroute.commands._args import port_arg
from msroute.errors import MSRouteError

__all__ = ["add_server_arguments", "serve_extra", "start_server"]

_Config = TypeVar("_Config")
_ConfigIn = TypeVar("_ConfigIn", contravariant=True)
_ConfigOut = TypeVar("_ConfigOut", covariant=True)


class _LoadConfig(Protocol[_ConfigOut]):
    def __call__(self, path: str, /, *, data_dir: str) -> _ConfigOut: ...


class _Serve(Protocol[_ConfigIn]):
    def __call__(
        self,
        config: _ConfigIn,
        /,
        *,
        host: str,
        port: int,
        token: str | None,
        no_auth: bool,
        log_level: str,
    ) -> None: ...


def add_server_arguments(parser: argparse.ArgumentParser, *, config_help: str) -> None:
    """Add ``--config``, ``--host``, ``--port``, ``--data-dir``, ``--no-auth``, ``--log-level``."""
    parser.add_argument("--config", required=True, metavar="FILE", help=config_help)
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


@contextmanager
def serve_extra(command: str) -> Iterator[None]:
    """Turn a failed import of the ``serve`` extra into an error that says what to install."""
    try:
        yield
    except ImportError as exc:
        raise MSRouteError(
            f"msroute {command} needs the serve extra: pip install 'msroute[serve]' ({exc})"
        ) from exc


def start_server(
    args: argparse.Namespace, load_config: _LoadConfig[_Config], serve: _Serve[_Config]
) -> int:
    """Check the token and host, load the config, then serve until stopped; 0 when stopped."""
    from msroute.service import check_start

    token = os.environ.get("MSROUTE_TOKEN")
    check_start(args.host, token, args.no_auth)  # refuse before reading journals
    config = load_config(args.config, data_dir=args.data_dir)
    serve(
        config,
        host=args.host,
        port=args.port,
        token=None if args.no_auth else token,
        no_auth=args.no_auth,
        log_level=args.log_level,
    )
    return 0
