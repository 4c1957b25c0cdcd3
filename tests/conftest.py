"""Shared test configuration.

Under CI (``CI`` set in the environment) hypothesis runs derandomized, so a CI run explores the
same examples every time and cannot fail on a draw nobody can reproduce; locally it explores
fresh examples on each run, as usual.

LiteLLM, which the LiteLLM integration's tests import, reads the price map in its wheel rather
than fetching one over the network (``LITELLM_LOCAL_MODEL_COST_MAP``): the tests use no network.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from hypothesis import settings

from msroute.policies import set_debug_checks

# Every policy's whole state is checked after every update in the tests (NaN, inf, negative
# counters, q off the simplex raise at once, in whichever test first produces them).
set_debug_checks(True)

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
