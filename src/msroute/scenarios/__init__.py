"""Named scenarios: where routing matters, and what it is worth against the certified optimum.

A scenario is an instance family (base skills and named costs per seed), a stationary Beta
environment, a cost model and a budgeted cost coordinate (``Scenario``). The registry:

* ``trec-paper`` -- the paper's Section 6.1 instance (TREC 2010, K = 50, N = 3, M = 5);
* ``trec-sharp`` -- TREC 2010 with N = 10, M = 2 and empirical-Bayes accuracies;
* ``llm-sim`` -- a SIMULATED LLM-routing family (12 models, $ budgets);
* ``web`` -- the packaged web relevance data under the paper's protocol;

and user files (``files_scenario``: ``--skills FILE.csv --costs FILE.csv``). Each factory's
docstring says where its numbers come from. ``msroute bench`` sweeps a scenario's budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msroute.errors import InvalidValueError
from msroute.scenarios.base import (
    NO_BUDGET,
    Scenario,
    ScenarioInstance,
    format_budget,
    parse_budget,
    parse_budgets,
)
from msroute.scenarios.crowd import trec_paper, trec_sharp, web
from msroute.scenarios.files import (
    FILES,
    file_digest,
    files_scenario,
    load_costs_csv,
    load_skills_csv,
)
from msroute.scenarios.llm import llm_sim

__all__ = [
    "FILES",
    "NO_BUDGET",
    "SCENARIOS",
    "Scenario",
    "ScenarioInstance",
    "file_digest",
    "files_scenario",
    "format_budget",
    "get_scenario",
    "load_costs_csv",
    "load_skills_csv",
    "parse_budget",
    "parse_budgets",
]

#: Registered scenario names and their factories.
SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "trec-paper": trec_paper,
    "trec-sharp": trec_sharp,
    "llm-sim": llm_sim,
    "web": web,
}


def get_scenario(name: str, params: tuple[tuple[str, Any], ...] = ()) -> Scenario:
    """The scenario ``name`` (a registered one, or ``"files"`` with its ``params``).

    Parameters
    ----------
    name : str
        A key of ``SCENARIOS``, or ``"files"``.
    params : tuple of (str, value)
        For ``"files"``: the keyword arguments of ``files_scenario``
        (a scenario's own ``Scenario.params``); ignored by the registered ones.
    """
    if name == FILES:
        kwargs = dict(params)
        return files_scenario(kwargs.pop("skills"), kwargs.pop("costs"), **kwargs)
    if name not in SCENARIOS:
        raise InvalidValueError(
            f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)} (or give --skills "
            "and --costs files)"
        )
    return SCENARIOS[name]()
