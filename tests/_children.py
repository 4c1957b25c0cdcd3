"""A child process that reports its acknowledged calls, killed by SIGKILL: what a crash leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


def acked_until_killed(
    script: str, args: list[str], stop: str, timeout: float
) -> tuple[list[str], str]:
    """Run ``python -c script *args`` and read its lines: ``ack <id>`` for each call it saw
    acknowledged, until a line that starts with ``stop``; then kill it with SIGKILL (also when
    this fails) and return the acknowledged ids and that line. Fails the test when the child
    ends before ``stop`` or after ``timeout`` seconds."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )
    acked: list[str] = []
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + timeout
        for line in child.stdout:
            if line.startswith(stop):
                return acked, line.strip()
            word, _, value = line.strip().partition(" ")
            assert word == "ack", f"the child said {line!r}"
            acked.append(value)
            assert time.monotonic() < deadline, "the child took too long"
        pytest.fail(f"the child ended early (exit {child.wait(10)})")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
