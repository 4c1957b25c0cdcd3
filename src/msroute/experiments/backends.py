"""Where the cells of a sweep run: worker processes on this machine, or Ray tasks.

A backend runs the cells that are not cached yet and hands each finished result back to the
driver (``msroute.experiments.schedule.run_cells``), which stores it in the cache and
advances the progress bar; the cache and the resume therefore work the same on every backend.
A cell's result is a pure function of its specification, so every backend gives the same
numbers, bit for bit.

* ``LocalBackend`` (the default): serially in this process, or in ``jobs`` worker
  processes. It needs nothing beyond msroute.
* ``RayBackend`` (extra ``[ray]``): one Ray task per cell, on a local Ray runtime or on an
  existing cluster. On one machine it is no faster than the local backend; it pays off when a
  cluster has more cores than this machine (a 500-seed sweep, longer horizons, more experts).
"""

from __future__ import annotations

import multiprocessing
import signal
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Protocol

from msroute._build import code_digest
from msroute._version import __version__
from msroute.errors import InvalidValueError, MSRouteError

__all__ = ["BACKENDS", "Backend", "BackendError", "LocalBackend", "RayBackend", "make_backend"]

#: Names accepted by ``msroute reproduce --backend``.
BACKENDS: tuple[str, ...] = ("local", "ray")

Worker = Callable[[Any], Any]
Done = Callable[[int, Any], None]


class BackendError(MSRouteError, RuntimeError):
    """A backend cannot run: Ray is not installed, its cluster cannot be reached, or a cluster
    node runs other msroute code than the driver."""


class Backend(Protocol):
    """Runs ``worker`` on every spec and calls ``done(i, result)`` in the driver as each of
    them finishes (in any order)."""

    def run(self, worker: Worker, specs: Sequence[Any], done: Done) -> None:
        """Run every spec; ``done`` stores the result (it runs in this process)."""
        ...


class LocalBackend:
    """Cells in this process (``jobs = 1``) or in ``jobs`` worker processes.

    Parameters
    ----------
    jobs : int, default 1
    """

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise InvalidValueError(f"jobs == {jobs}, must be >= 1")
        self.jobs = jobs

    def forks(self, n_specs: int) -> bool:
        """Whether running ``n_specs`` cells forks worker processes from this one (which then
        see its memory, e.g. skills drawn ahead, without a copy)."""
        return self.jobs > 1 and n_specs > 1 and multiprocessing.get_start_method() == "fork"

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, worker: Worker, specs: Sequence[Any], done: Done) -> None:
        """Run every spec, serially or in a process pool."""
        if self.jobs == 1 or len(specs) <= 1:
            for i, spec in enumerate(specs):
                done(i, worker(spec))
            return
        pool = ProcessPoolExecutor(
            max_workers=min(self.jobs, len(specs)), initializer=_ignore_interrupts
        )
        try:
            futures = {pool.submit(worker, spec): i for i, spec in enumerate(specs)}
            for fut in as_completed(futures):
                # Forget the finished future: it holds its cell's whole result (per-round
                # rewards too), which ``done`` stores; keeping them all held a sweep's results
                # in the driver (1 GB at 200 seeds).
                done(futures.pop(fut), fut.result())
        except BaseException:  # Ctrl-C, or a cell that failed: the others need not finish
            _stop(pool)  # finished cells are saved: the next run resumes from them
            raise
        pool.shutdown()


def _ignore_interrupts() -> None:
    """Worker processes leave Ctrl-C to the parent (no traceback from every worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued cells and end the running ones now (their work is redone on resume)."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.join(timeout=5)


def _versioned(worker: Worker, spec: Any) -> tuple[str, Any]:
    """What a Ray task runs: the cell, and the msroute build of the node that ran it."""
    return _build_id(), worker(spec)


def _build_id() -> str:
    """The msroute version and code (``msroute._build.code_digest``) of this process."""
    return f"{__version__} (code {code_digest()})"


class RayBackend:
    """One Ray task per cell, on a local Ray runtime or on a running cluster.

    Parameters
    ----------
    address : str, optional
        The cluster to join (``HOST:PORT`` of its head node, ``ray://HOST:PORT`` for Ray
        Client, or ``"auto"``); None starts a local runtime for the sweep and stops it after.
        Every node must run the driver's msroute, the same version and code (a cell from
        other code is refused, since it may hold other numbers).
    num_cpus : int, optional
        CPUs of the local runtime (default: Ray's choice, all cores); ignored with ``address``.

    Raises
    ------
    BackendError
        Ray is not installed, or nothing answers at ``address``.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise BackendError(
                "the Ray backend needs Ray: pip install 'msroute[ray]' (or pip install ray)"
            ) from exc
        if address is not None:
            _check_reachable(address)
        if num_cpus is not None and num_cpus < 1:
            raise InvalidValueError(f"num_cpus == {num_cpus}, must be >= 1")
        self.address = address
        self.num_cpus = num_cpus
        self._owned = False

    def __enter__(self) -> RayBackend:
        """Start (or join) Ray once for several sweeps; ``__exit__`` stops what it started."""
        self._owned = self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owned:
            import ray

            ray.shutdown()
            self._owned = False

    def _start(self) -> bool:
        """Start a local runtime or join the cluster, unless Ray runs already; True if started."""
        import ray

        if ray.is_initialized():
            return False
        try:
            if self.address is None:
                ray.init(
                    num_cpus=self.num_cpus,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            else:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
            where = self.address or "a local runtime"
            raise BackendError(f"cannot start Ray on {where}: {exc}") from exc
        return True

    def run(self, worker: Worker, specs: Sequence[Any], done: Done) -> None:
        """Submit every spec as a task and store each result as it arrives. Pending tasks are
        cancelled on an error or an interrupt, and a runtime this call started is stopped."""
        import ray

        started = self._start()
        pending: dict[Any, int] = {}
        try:
            task = ray.remote(num_cpus=1, max_retries=0)(_versioned)
            pending = {task.remote(worker, spec): i for i, spec in enumerate(specs)}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ready[0])
                build, result = ray.get(ready[0])
                if build != _build_id():
                    raise BackendError(
                        f"a Ray node runs msroute {build}, the driver {_build_id()}: install "
                        "the driver's msroute on every node"
                    )
                done(i, result)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if started:
                ray.shutdown()


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast, with a clear message, when nothing listens at ``HOST:PORT``."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidValueError(
            f"--address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise BackendError(f"cannot reach a Ray cluster at {address}: {exc}") from exc


def make_backend(
    name: str, *, jobs: int = 1, address: str | None = None
) -> LocalBackend | RayBackend:
    """The backend called ``name`` ("local" or "ray").

    ``jobs`` is the number of worker processes of the local backend and the CPUs of a local
    Ray runtime; ``address`` (Ray only) is the cluster to join. Use the result as a context
    manager around several sweeps, so that Ray starts once.
    """
    if name == "local":
        if address is not None:
            raise InvalidValueError("--address needs --backend ray")
        return LocalBackend(jobs)
    if name == "ray":
        return RayBackend(address, num_cpus=None if address is not None else jobs)
    raise InvalidValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
