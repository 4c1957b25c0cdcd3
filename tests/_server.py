"""Run ``msroute serve`` as a child process on loopback, for the tests and the benchmarks.

:class:`ServerProcess` starts the server on ``127.0.0.1`` and a free port, waits until
``/healthz`` answers, and stops it by its pid: :meth:`~ServerProcess.terminate` (SIGTERM, graceful)
or :meth:`~ServerProcess.kill` (SIGKILL, a crash). Used as a context manager it always ends the
child, even when the body fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

__all__ = ["ServerProcess", "free_port"]

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """``msroute serve --config CONFIG --data-dir DATA_DIR`` in a child process on 127.0.0.1.

    Parameters
    ----------
    config : path
        The service config file.
    data_dir : path
        Directory of the journals.
    token : str or None
        Passed as ``MSROUTE_TOKEN``; None starts the server with ``--no-auth``.
    port : int or None
        Port to bind; a free one by default.
    startup_s : float
        How long :meth:`start` waits for ``/healthz``.
    log : path or None
        File that receives the server's output (default: discarded).
    command : str
        The ``msroute`` command that serves: ``serve``, or ``gateway``.
    env : mapping or None
        More environment variables for the child (an upstream's key).
    """

    def __init__(
        self,
        config: str | Path,
        data_dir: str | Path,
        *,
        token: str | None,
        port: int | None = None,
        startup_s: float = 30.0,
        log: str | Path | None = None,
        command: str = "serve",
        env: dict[str, str] | None = None,
    ) -> None:
        self.config = Path(config)
        self.data_dir = Path(data_dir)
        self.token = token
        self.port = free_port() if port is None else port
        self.startup_s = startup_s
        self.log = None if log is None else Path(log)
        self.proc: subprocess.Popen[bytes] | None = None
        self.command_name = command
        self.extra_env = dict(env or {})

    @property
    def url(self) -> str:
        """Base URL of the server, ``http://127.0.0.1:PORT``."""
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        """The child's process id."""
        if self.proc is None:
            raise RuntimeError("the server is not started")
        return self.proc.pid

    def start(self) -> ServerProcess:
        """Start the child and wait until ``/healthz`` answers; raise if it does not in time."""
        cmd, env = self.command()
        if self.log is None:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
            )
        else:
            with self.log.open("ab") as out:
                self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"msroute {self.command_name} exited with code {self.proc.returncode} "
                    "during startup" + (f"; log: {self.log}" if self.log else "")
                )
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1.0) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        self.kill()
        raise TimeoutError(
            f"msroute {self.command_name} did not answer /healthz within {self.startup_s} s"
        )

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The child's argv and environment (the token travels in the environment only)."""
        env = {**os.environ, **self.extra_env}
        env.pop("MSROUTE_TOKEN", None)
        cmd = [sys.executable, "-m", "msroute.cli", self.command_name, "--config", str(self.config)]
        cmd += ["--data-dir", str(self.data_dir), "--host", HOST, "--port", str(self.port)]
        if self.token is None:
            cmd.append("--no-auth")
        else:
            env["MSROUTE_TOKEN"] = self.token
        return cmd, env

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (graceful shutdown); wait for the exit and return the exit code."""
        return self._stop(signal.SIGTERM, timeout_s)

    def kill(self, timeout_s: float = 30.0) -> int:
        """SIGKILL (a crash: nothing is flushed or closed); return the exit code."""
        return self._stop(signal.SIGKILL, timeout_s)

    def _stop(self, sig: signal.Signals, timeout_s: float) -> int:
        proc = self.proc
        if proc is None:
            raise RuntimeError("the server is not started")
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                return proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
        return proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
