"""Run the app under uvicorn: bind, serve until SIGTERM/SIGINT, shut down cleanly.

On SIGTERM uvicorn stops accepting connections, lets in-flight requests finish (up to
``graceful_s`` seconds), then runs the app's lifespan shutdown, which drains each router's
queue and closes its journal.

The process is the server's alone, so it also sets the garbage collector for serving
(``collect_for_serving``).
"""

from __future__ import annotations

import gc
import logging

import uvicorn

from msroute.service.app import create_app
from msroute.service.auth import check_start
from msroute.service.config import ServiceConfig
from msroute.service.transport import CoalescingHttpTools

__all__ = ["GC_THRESHOLD", "collect_for_serving", "serve"]

#: The collector's generation thresholds while serving (Python's default is (700, 10, 10)).
GC_THRESHOLD = (50_000, 20, 20)


def collect_for_serving() -> None:
    """Fewer and smaller cyclic garbage collections in a server process.

    Reference counting frees nearly all of a request's objects; the cyclic collector still ran
    after every 700 net allocations, and every few seconds traversed every object of the process
    (FastAPI's, pydantic's, numpy's modules: a pause of tens of milliseconds). Everything that
    exists once the app is built lives as long as the process, so ``gc.freeze`` takes it out
    of every later collection, and a young generation of 50,000 objects makes collections rare.
    Cycles are still collected; only later.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def serve(
    config: ServiceConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None,
    no_auth: bool = False,
    graceful_s: int = 10,
    log_level: str = "info",
) -> None:
    """Serve the routers of ``config`` over HTTP until the process is told to stop.

    Parameters
    ----------
    config : ServiceConfig
        The routers and HTTP limits.
    host, port : str, int
        Where to listen; the default binds the loopback interface only.
    token : str or None
        The bearer token clients must send (usually from ``MSROUTE_TOKEN``).
    no_auth : bool
        Serve without a token; refused unless ``host`` is a loopback address.
    graceful_s : int
        On SIGTERM, how long in-flight requests may take to finish.
    log_level : str
        Level of the server's log lines (one line per router on start).

    Raises
    ------
    InvalidValueError
        The auth settings are unsafe (see ``msroute.service.auth.check_start``).
    """
    required = check_start(host, token, no_auth)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("msroute").setLevel(log_level.upper())
    app = create_app(config, token=required)
    collect_for_serving()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            # httptools (from uvicorn[standard]), one send per response; the event loop is
            # uvloop's wherever uvloop is installed (uvicorn[standard] brings it but on Windows).
            http=CoalescingHttpTools,
            loop="auto",
            log_level=log_level,
            access_log=False,
            timeout_graceful_shutdown=graceful_s,
            server_header=False,
            # No client address is used: skip the per-request X-Forwarded-* rewriting.
            proxy_headers=False,
        )
    )
    server.run()
