"""The HTTP service: ``msroute serve`` puts Routers behind an authenticated, observable API.

Needs the ``serve`` extra (``pip install "msroute[serve]"``: FastAPI, uvicorn, pydantic,
prometheus-client). Nothing outside this package imports it, so ``import msroute`` never loads
FastAPI.

- ``create_app`` builds the ASGI app over the routers of a ``ServiceConfig``.
- ``load_service_config`` reads the TOML file with one ``[routers.NAME]`` table per router.
- ``serve`` runs the app under uvicorn until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

from msroute.service.app import create_app
from msroute.service.auth import TOKEN_ENV, check_start
from msroute.service.config import ServiceConfig, load_service_config
from msroute.service.server import serve

__all__ = [
    "TOKEN_ENV",
    "ServiceConfig",
    "check_start",
    "create_app",
    "load_service_config",
    "serve",
]
