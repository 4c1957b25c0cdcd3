"""Scenarios on the packaged crowd data (TREC 2010, web relevance): Section 6.1's instances."""

from __future__ import annotations

from functools import cache

import numpy as np

from msroute.datasets import CrowdData, Instance, load_crowd, sample_instance
from msroute.scenarios.base import Scenario, ScenarioInstance

__all__ = ["crowd_scenario_instance", "trec_paper", "trec_sharp", "web"]


@cache
def _data(dataset: str) -> CrowdData:
    return load_crowd(dataset=dataset)


def crowd_scenario_instance(inst: Instance) -> ScenarioInstance:
    """A crowd ``Instance`` as a scenario instance (experts named by
    worker id; costs workload and expert flag)."""
    return ScenarioInstance(
        skills_base=inst.skills_base,
        costs=inst.costs,
        cost_names=inst.cost_names,
        expert_names=tuple(f"worker {w}" for w in inst.workers),
    )


def _crowd(
    name: str,
    title: str,
    dataset: str,
    n_experts: int,
    n_dims: int,
    m_draws: int,
    shrinkage: str | None,
    notes: str,
) -> Scenario:
    def make(seed: np.random.SeedSequence) -> ScenarioInstance:
        inst = sample_instance(
            _data(dataset), n_experts=n_experts, n_dims=n_dims, seed=seed, shrinkage=shrinkage
        )
        return crowd_scenario_instance(inst)

    return Scenario(
        name=name,
        title=title,
        make_instance=make,
        m_draws=m_draws,
        budget_cost="workload",
        budget_unit="workload per query",
        kappa=20.0,
        params=(
            ("dataset", dataset),
            ("n_experts", n_experts),
            ("n_dims", n_dims),
            ("m_draws", m_draws),
            ("shrinkage", shrinkage),
        ),
        notes=notes,
    )


def trec_paper() -> Scenario:
    """The paper's Section 6.1 instance: TREC 2010, K = 50, N = 3, M = 5, raw accuracies.

    Each seed draws 50 of the 270 reliable workers (>= 5 gold answers) of the packaged TREC 2010
    Crowdsourcing Track data; the sorted tasks are split round-robin into N = 3 groups and
    ``V_base[n, i]`` is worker i's hit rate on group n. Costs as Section 6.1: workload =
    annotation count / the pool's largest count (the budgeted cost) and the expert flag of the
    pool's 10 most accurate workers (recorded, not bounded here). Stationary Beta environment,
    kappa = 20. Every policy earns close to the maximum here (routing matters little): the
    paper's instance, kept as the reference.
    """
    return _crowd(
        "trec-paper",
        "TREC 2010 as in the paper (K=50, N=3, M=5)",
        "trec",
        50,
        3,
        5,
        None,
        trec_paper.__doc__ or "",
    )


def trec_sharp() -> Scenario:
    """TREC 2010 with N = 10 task groups, M = 2 and empirical-Bayes accuracies.

    The same data and pool protocol as ``trec-paper`` (50 of the 270 reliable workers per seed,
    round-robin task groups, workload and expert-flag costs, Beta environment with kappa = 20),
    with two changes that make routing matter: M = 2 draws and N = 10 task groups, and
    empirical-Bayes accuracies (``build_instance(shrinkage="eb")``): each worker's accuracy
    shrunk toward the pool's mean by a Beta prior fitted to the pool's annotation counts
    (strength a + b of about 6 to 10 answers on seeds 0-2), and each group accuracy toward the
    worker's. With 10 groups a worker has a median of about 1.4 gold answers per group, so raw
    hit rates make many workers perfect experts by luck (the best fixed policy then earns 1.0
    per group); shrunk, the experts' edge is what their answer counts support.
    """
    return _crowd(
        "trec-sharp",
        "TREC 2010, N=10, M=2, empirical-Bayes accuracies",
        "trec",
        50,
        10,
        2,
        "eb",
        trec_sharp.__doc__ or "",
    )


def web() -> Scenario:
    """The packaged web relevance data (5 grades) under the paper's protocol.

    176 workers, 2,653 tasks, 15,539 annotations, 139 reliable workers (>= 5 gold answers); per
    seed 50 of them, N = 3 round-robin task groups, M = 5, raw accuracies (a worker is right when
    their grade equals the gold grade), workload and expert-flag costs as Section 6.1, Beta
    environment with kappa = 20.
    """
    return _crowd(
        "web",
        "web relevance, paper protocol (K=50, N=3, M=5)",
        "web",
        50,
        3,
        5,
        None,
        web.__doc__ or "",
    )
