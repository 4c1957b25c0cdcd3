"""Per-round time of the Section 6.3 baselines and of OMD-Approachability, batched over runs.

Run: ``python benchmarks/bench_baselines.py [--runs 80] [--experts 50] [--draws 5]``.
Each round is timed on its own, in CPU time of this thread (other processes on the machine
inflate it less than a wall clock); the median over the rounds after the warm-up is robust to
load, the mean also counts the rounds that refill a policy's buffers of uniforms. Only the
policy's own work is timed (``select`` and ``update``, with the public boundary's checks); the
environment's skills, the rewards and the costs are computed outside the timed sections. The
compiled sampler of Thompson sampling is loaded before its timings (about a second, once per
process).

``--fig2-cells`` times instead each policy's whole cell of Figure 2 at its default settings
(``sweep_worker``: the simulator, the policy and the summaries, both environments, every
level the cell plays), in CPU time of this process after the skills are drawn, and prints
it per level played relative to Greedy's: the sweep's scheduling hints
(``msroute.experiments.cell_costs.RELATIVE_COSTS``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from msroute import Constraints, Problem, batch_sum_max_reward
from msroute.policies.base import draws_to_mask
from msroute.policies.registry import make_policy
from msroute.policies.streams import RunStreams
from msroute.problem_batch import ProblemBatch

BASELINES = ["random", "greedy", "cucb", "cbwk", "ts", "ts-bwk", "moe", "omd"]


def pol_warmup(pol: object) -> int:
    """Rounds of round-robin warm-up (timed separately: they skip the scores)."""
    return int(getattr(pol, "warmup", 0))


def fig2_cells(repeats: int) -> None:
    """CPU seconds of each policy's Figure 2 cell (median of ``repeats``) and, per level
    played, relative to Greedy's."""
    from msroute.experiments.fig2 import Fig2Config, sweep_specs
    from msroute.experiments.protocol import ENV_JOIN
    from msroute.experiments.schedule import compile_ahead, draw_ahead
    from msroute.experiments.sweep import ignores_levels, sweep_worker

    cfg = Fig2Config()
    labelled = sweep_specs(cfg, "sweep", ("rewards",))
    cells = {
        label: dataclasses.replace(spec, env=ENV_JOIN.join(cfg.envs)) for label, spec in labelled
    }
    compile_ahead()
    draw_ahead(next(iter(cells.values())), 1)  # every cell's skills, drawn once, untimed
    seconds = {}
    for label, spec in cells.items():
        spent = []
        for _ in range(repeats):
            t0 = time.process_time()
            sweep_worker(spec)
            spent.append(time.process_time() - t0)
        played = 1 if ignores_levels(spec) else len(spec.levels)
        seconds[label] = (float(np.median(spent)), played)
    per_level = {label: s / played for label, (s, played) in seconds.items()}
    print(f"Figure 2's cells: CPU s (median of {repeats}), levels played, per level / Greedy's")
    for label, (s, played) in sorted(seconds.items(), key=lambda kv: -kv[1][0]):
        print(f"  {label:8s} {s:6.2f} {played:2d} {per_level[label] / per_level['greedy']:6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=80)
    ap.add_argument("--experts", type=int, default=50)
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--dims", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--policies", nargs="+", default=BASELINES, choices=BASELINES)
    ap.add_argument("--fig2-cells", action="store_true", help="time Figure 2's cells instead")
    ap.add_argument("--repeats", type=int, default=3, help="timings per cell (--fig2-cells)")
    args = ap.parse_args()
    if args.fig2_cells:
        fig2_cells(args.repeats)
        return
    r, k, m, n, t_max = args.runs, args.experts, args.draws, args.dims, args.rounds
    rng = np.random.default_rng(0)
    costs = np.column_stack([rng.random(k), (np.arange(k) < 10).astype(float)])
    problem = Problem(costs, m_draws=m, constraints=Constraints(upper=[m * 0.5, 1.0]))
    batch = ProblemBatch(problem, r)
    means = rng.uniform(0.5, 0.9, (n, k))
    print(
        f"R = {r}, K = {k}, M = {m}, d = 2, N = {n}; microseconds per round "
        "(select + update) after the warm-up: median, mean, 10th percentile"
    )
    for name in args.policies:
        pol = make_policy(name, problem, horizon=t_max, n_runs=r, seed=1)
        if getattr(pol, "thompson", False):  # load the compiled sampler outside the timings
            RunStreams(0, 1).beta_top(np.ones((1, 1)), np.ones((1, 1)), 1, None)
        spent = np.empty(t_max)
        for t in range(t_max):
            skills = rng.beta(20 * means, 20 * (1 - means), (r, n, k))
            t0 = time.thread_time()
            decision = pol.select()
            t1 = time.thread_time()
            mask = draws_to_mask(decision.draws, k)
            reward = batch_sum_max_reward(skills, mask)
            cost = batch.realized_cost(mask)
            t2 = time.thread_time()
            pol.update(decision, reward, cost)
            spent[t] = (t1 - t0) + (time.thread_time() - t2)
        after = spent[min(pol_warmup(pol), t_max - 1) :] * 1e6
        print(
            f"  {name:8s} {np.median(after):8.1f} {after.mean():8.1f} "
            f"{np.percentile(after, 10):8.1f}"
        )


if __name__ == "__main__":
    main()
