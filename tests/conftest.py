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
"""

from __future__ import annotations

import asyncio
import gc
import os
import types
from collections.abc import Iterator

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
