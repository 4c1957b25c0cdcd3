"""Spend against budget, floor against share and reward: OMD's two surrogates against CBwK/TS-BwK.

Two instances:

* the paper's (Figure 2's sweep cell, ``tight`` level: workload budget ``M * mean workload``
  and expert cap 2; K = 50, M = 5, N = 3, T = 10,000, seeds 0-19, both environments);
* the LLM routing instance of ``examples/support-llms`` (also in ``tests/test_duals.py``;
  6 models, dollars per call with a $0.012 budget, an in-house share floor of 20%, M = 2,
  T = 10,000, 20 skill streams).

OMD runs with the scale-invariant dual and either the paper's linear surrogate ``C^T q`` in the
box ``S`` (``surrogate="linear"``, the default) or the exact expected team cost in ``S_ori``
with a 3-sigma margin (``surrogate="exact"``). Prints Markdown tables (means over seeds; % of
seeds feasible at 1e-9). Run from the repository root: ``python benchmarks/compare_surrogates.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import msroute
from msroute.experiments.cells import CellSpec, params_items
from msroute.experiments.sweep import sweep_worker
from msroute.scenarios import load_costs_csv, load_skills_csv

SEEDS = tuple(range(20))
T = 10_000
POLICIES = {
    "OMD, paper's surrogate (linear)": ("omd", {"eta_mult": 0.05, "variant": "paper"}),
    "OMD, exact team cost + margin": (
        "omd",
        {"eta_mult": 0.05, "surrogate": "exact", "variant": "paper"},
    ),
    "CBwK": ("cbwk", {}),
    "TS-BwK": ("ts-bwk", {"reward_scale": 3.0}),
}

#: The support-desk instance: 6 LLMs, 4 topics, dollars per call and an in-house flag.
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "support-llms"
V = load_skills_csv(EXAMPLE / "skills.csv")[2]
USD, INHOUSE = load_costs_csv(EXAMPLE / "costs.csv")[2].T


def paper_table() -> None:
    print("| env | policy | workload / budget | experts / cap | reward | % feasible |")
    print("|---|---|---|---|---|---|")
    for env in ("stochastic", "regime"):
        for label, (name, params) in POLICIES.items():
            spec = CellSpec(
                experiment="compare",
                env=env,
                policy=name,
                levels=("tight",),
                seeds=SEEDS,
                horizon=T,
                n_experts=50,
                m_draws=5,
                n_dims=3,
                policy_params=params_items(params),
            )
            res = sweep_worker(spec)
            use = res["avg_cost"] / res["bounds"]
            print(
                f"| {env} | {label} | {use[:, 0].mean():.3f} (max {use[:, 0].max():.3f}) | "
                f"{use[:, 1].mean():.3f} (max {use[:, 1].max():.3f}) | "
                f"{res['avg_reward'].mean():.3f} | {100 * res['feasible'].mean():.0f}% |"
            )


def llm_table() -> None:
    problem = msroute.Problem(
        np.stack([USD, INHOUSE], 1),
        2,
        msroute.Constraints(upper=[0.012, None], lower=[None, 0.2]),
    )
    batch = msroute.ProblemBatch(problem, len(SEEDS))
    env = msroute.StochasticEnv(V, kappa=20, seed=list(SEEDS))
    pols: dict[str, msroute.BasePolicy] = {}
    for label, (name, params) in POLICIES.items():
        p = {k: v for k, v in params.items() if k != "reward_scale"}
        if name == "ts-bwk":
            p["reward_scale"] = 4.0
        pols[label] = msroute.make_policy(name, batch, horizon=T, seed=list(SEEDS), **p)
    traj = msroute.simulate(pols, env, batch, T)
    head = "| policy | $ per question (budget 0.012) | in-house share (floor 0.20) | reward |"
    print(head + " % feasible |")
    print("|---|---|---|---|---|")
    for label, tr in traj.items():
        c = tr.costs.mean(axis=0)
        feas = msroute.feasible(c, batch.lo_ori, batch.hi_ori, tol=1e-9)
        print(
            f"| {label} | {c[:, 0].mean():.5f} (max {c[:, 0].max():.5f}) | "
            f"{c[:, 1].mean():.3f} (min {c[:, 1].min():.3f}) | {tr.rewards.mean():.3f} | "
            f"{100 * feas.mean():.0f}% |"
        )


if __name__ == "__main__":
    print(f"msroute {msroute.__version__}; seeds {SEEDS[0]}-{SEEDS[-1]}, T = {T}\n")
    print("Paper instance, tight level (K = 50, M = 5, N = 3)\n")
    paper_table()
    print("\nLLM instance (K = 6, M = 2)\n")
    llm_table()
