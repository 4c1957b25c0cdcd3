"""Run the app under uvicorn: bind, open the routers, serve until SIGTERM/SIGINT, shut down cleanly.

``serve`` binds the listening socket and opens every router (recovering its journal) before
uvicorn starts, so that whatever prevents serving (a port in use, an infeasible budget, a journal
that cannot be written) is one error naming its cause, raised to the caller (the command line
prints it as one line), and no port is ever half served. On SIGTERM uvicorn stops accepting
connections, lets in-flight requests finish (up to ``graceful_s`` seconds), then runs the app's
lifespan shutdown, which drains each router's queue and closes its journal.

The process is the server's alone, so it also sets the garbage collector for serving
(``collect_for_serving``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import Coroutine
from typing import Any

import uvicorn

from msroute.errors import ConfigError
from msroute.policies import live_step
from msroute.service.app import AppExtension, create_app
from msroute.service.auth import check_start
from msroute.service.config import ServiceConfig
from msroute.service.routers import ServedRouters
from msroute.service.transport import guarded_http_tools

__all__ = ["GC_THRESHOLD", "bind", "collect_for_serving", "collect_when_loaded", "serve"]

_log = logging.getLogger("msroute.service")

#: The collector's generation thresholds while serving (Python's default is (700, 10, 10)).
GC_THRESHOLD = (50_000, 20, 20)

#: Seconds between two looks at whether the compiled step has loaded (``collect_when_loaded``).
LOAD_POLL_S = 0.1


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


async def collect_when_loaded() -> None:
    """``collect_for_serving`` again once the live router's compiled step has loaded
    (``msroute.policies.live_step``): its load runs in the background while the server starts,
    and brings numba's objects into the process (about 95,000 with the gateway's routers),
    which every full collection would otherwise traverse, a pause of about 25 ms, for as long
    as the process lives. One collection, then they are frozen too."""
    while not live_step.settled(0.0):
        await asyncio.sleep(LOAD_POLL_S)
    collect_for_serving()


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening).

    Raises
    ------
    ConfigError
        The port is out of range, the host does not resolve, or the address cannot be bound
        (in use, not this machine's, a privileged port); the message names host and port.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"--port {port!r}: must be an integer in 1..65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"--host {host}: cannot listen there: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise ConfigError(f"--host {host} --port {port}: cannot listen there: {reason}") from exc
    return sock


def serve(
    config: ServiceConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None,
    no_auth: bool = False,
    graceful_s: int = 10,
    log_level: str = "info",
    extension: AppExtension | None = None,
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
    extension : AppExtension, optional
        More endpoints on the same app (``msroute gateway``'s).

    Raises
    ------
    InvalidValueError
        The auth settings are unsafe (see ``msroute.service.auth.check_start``).
    ConfigError
        The address cannot be listened on, or a router cannot be opened (the message names it);
        nothing is served.
    """
    required = check_start(host, token, no_auth)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("msroute").setLevel(log_level.upper())
    sock = bind(host, port)
    try:
        _run(_serve(config, sock, required, graceful_s, log_level, extension))
    finally:
        sock.close()


async def _serve(
    config: ServiceConfig,
    sock: socket.socket,
    token: str | None,
    graceful_s: int,
    log_level: str,
    extension: AppExtension | None,
) -> None:
    routers = ServedRouters(config)
    await routers.start()  # the app's lifespan closes them (at shutdown, or if startup fails)
    refreeze: asyncio.Future[None] | None = None
    try:
        app = create_app(config, token=token, routers=routers, extension=extension)
        collect_for_serving()
        refreeze = asyncio.ensure_future(collect_when_loaded())
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                # httptools (from uvicorn[standard]) with one send per response and a deadline
                # for reading each request.
                http=guarded_http_tools(config.read_timeout_s),
                log_level=log_level,
                access_log=False,
                timeout_graceful_shutdown=graceful_s,
                server_header=False,
                # No client address is used: skip the per-request X-Forwarded-* rewriting.
                proxy_headers=False,
            )
        )
        address = sock.getsockname()
        _log.info("listening on http://%s:%d", *address[:2])
        await server.serve(sockets=[sock])
    finally:
        if refreeze is not None:
            refreeze.cancel()  # nothing if it has run
        await routers.stop()  # a no-op once the lifespan has closed them


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop's event loop where uvloop is installed (uvicorn[standard] brings
    it but on Windows), else on asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
