"""Shared test configuration.

Under CI (``CI`` set in the environment) hypothesis runs derandomized, so a CI run explores the
same examples every time and cannot fail on a draw nobody can reproduce; locally it explores
fresh examples on each run, as usual.

LiteLLM, which the LiteLLM integration's tests import, reads the price map in its wheel rather
than fetching one over the network (``LITELLM_LOCAL_MODEL_COST_MAP``): the tests use no network.

After each test module, the event loops its tests (or the libraries they drive: LiteLLM's
logging threads run callbacks on loops of their own and never close them) left open and idle
are closed: collected later, each warned of an unclosed loop and its sockets in whichever test
the garbage collector happened to run, which ``ResourceWarning`` as an error then failed.

A run with worker processes (``-n 2``) first fills numba's cache (``tests/_numba_warmup.py``):
its two parts run while the workers collect, and the workers start their tests once both have
ended. On a fresh clone, every worker, every forked sweep process and every server a test
starts compiled the same loops again (about a minute of CPU each time); now each is compiled
once. A part that fails is reported and the workers compile as they go, as before.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from hypothesis import settings

from msroute.policies import set_debug_checks

# Every policy's whole state is checked after every update in the tests (NaN, inf, negative
# counters, q off the simplex raise at once, in whichever test first produces them).
set_debug_checks(True)


@pytest.fixture(scope="module", autouse=True)
def _close_idle_event_loops() -> Iterator[None]:
    """Close the event loops a test module left open and idle (see the module docstring)."""
    before = {id(o) for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)}
    yield
    for loop in [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]:
        if id(loop) not in before and not loop.is_running() and not loop.is_closed():
            loop.close()


#: The cache warm-up's processes, by part, while they run (the controller of an xdist run only).
_warmup: dict[str, subprocess.Popen[bytes]] = {}
_warmup_config: list[pytest.Config] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under xdist's controller, start filling numba's cache (see the module docstring)."""
    if not session.config.pluginmanager.has_plugin("dsession"):
        return  # one process: it compiles each loop once anyway
    _warmup_config.append(session.config)
    script = Path(__file__).with_name("_numba_warmup.py")
    for part in ("live", "sim"):
        _warmup[part] = subprocess.Popen(
            [sys.executable, str(script), part], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """Hold the first tests until the cache warm-up has ended (xdist schedules after this)."""
    while _warmup:
        part, proc = _warmup.popitem()
        _, err = proc.communicate()
        reporter = _warmup_config[0].pluginmanager.get_plugin("terminalreporter")
        if proc.returncode != 0 and reporter is not None:
            last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            reporter.write_line(
                f"numba cache warm-up {part!r} failed (exit {proc.returncode}): {last[0]}; "
                "the workers compile as they go"
            )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """End a warm-up still running (a run stopped before its workers collected)."""
    while _warmup:
        _, proc = _warmup.popitem()
        proc.kill()
        proc.communicate()


settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def compiled() -> Iterator[types.ModuleType]:
    """The live router's compiled step and the projection's compiled rows, loaded now (as the
    background thread loads them); each test says which of them a run takes
    (tests/test_live_step.py, tests/test_live_sums.py)."""
    from msroute.core.qp import projection_cuts
    from msroute.policies._compiled import live_step as module

    projection_cuts.load_compiled_rows()
    yield module
    projection_cuts._rows_loaded = False
