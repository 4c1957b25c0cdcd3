"""Run the gateway under uvicorn, as ``msroute.service.serve`` runs the service."""

from __future__ import annotations

from msroute.gateway.app import Gateway
from msroute.gateway.config import GatewayConfig
from msroute.service.server import serve

__all__ = ["serve_gateway"]


def serve_gateway(
    config: GatewayConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None,
    no_auth: bool = False,
    log_level: str = "info",
) -> None:
    """Serve the gateway until SIGTERM or Ctrl-C (see ``msroute.service.serve``: the same
    binding, auth rules, recovery and clean shutdown)."""
    serve(
        config.service,
        host=host,
        port=port,
        token=token,
        no_auth=no_auth,
        log_level=log_level,
        extension=Gateway(config),
    )
