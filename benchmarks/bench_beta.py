"""Thompson sampling's Beta draws: the batched per-run sampler against numpy, side by side.

Run: ``python benchmarks/bench_beta.py [--runs 80] [--experts 50] [--rounds 300]``.

The shapes are those of a Thompson-sampling posterior after 3,000 rounds of the paper's
stochastic environment (alpha up to a few thousand, beta between 1 and 4), one (R, K) draw per
call. Three ways, timed in the same run (microseconds per call, CPU time of this thread: the
median and the mean):

1. ``RunStreams.beta``: each run from its own xoshiro256++ generator, Marsaglia-Tsang in one
   compiled loop over all runs (what the policies use: a run draws the same alone or in any
   batch; no buffers, so the mean is the median);
2. one numpy ``standard_gamma`` call per run on its own generator (the previous way; the same
   per-run property, R calls per draw);
3. numpy ``Generator.beta`` on one shared generator (one call; a run's draws then depend on
   the other runs of the batch, so the policies cannot use it: the reference for numpy's own
   sampling speed).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from msroute.experiments.cells import CellSpec, build_batch, params_items, policy_seeds
from msroute.policies.registry import make_policy
from msroute.policies.streams import GammaConstants, RunStreams
from msroute.simulate import simulate


def posterior(runs: int) -> tuple[np.ndarray, np.ndarray]:
    """TS posteriors (alpha, beta) of ``runs`` runs after 3,000 rounds of the stochastic env."""
    seeds = tuple(range(max(1, runs // 4)))
    spec = CellSpec(
        experiment="bench",
        env="stochastic",
        policy="ts",
        levels=("tight", "medium", "loose", "none"),
        seeds=seeds,
        horizon=3000,
        policy_params=params_items({"reward_scale": 3.0}),
    )
    cell = build_batch(spec)
    pol = make_policy("ts", cell.batch, horizon=3000, seed=policy_seeds(spec), reward_scale=3.0)
    simulate({"ts": pol}, cell.env, cell.batch, 3000, run_map=cell.run_map)
    a, b = pol.posterior.alpha, pol.posterior.beta  # type: ignore[attr-defined]
    return a[:runs], b[:runs]


def cpu_times(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median and mean CPU microseconds of ``rounds`` calls of ``fn``."""
    spent = np.empty(rounds)
    for i in range(rounds):
        tic = time.thread_time()
        fn()
        spent[i] = time.thread_time() - tic
    return float(np.median(spent) * 1e6), float(spent.mean() * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=80)
    ap.add_argument("--experts", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    a, b = posterior(args.runs)
    k = args.experts
    a, b = np.resize(a, (args.runs, k)), np.resize(b, (args.runs, k))
    r = a.shape[0]
    streams = RunStreams(list(range(r)), n_runs=r)
    constants = GammaConstants(r, 2 * k)
    gens = [np.random.default_rng(i) for i in range(r)]
    shared = np.random.default_rng(0)
    both = np.concatenate([a, b], axis=1)

    def per_run() -> np.ndarray:
        g = np.stack([gen.standard_gamma(row) for gen, row in zip(gens, both, strict=True)])
        return g[:, :k] / (g[:, :k] + g[:, k:])

    ways = {
        "RunStreams.beta (per-run streams, compiled)": lambda: streams.beta(a, b, constants),
        "numpy standard_gamma, one call per run": per_run,
        "numpy Generator.beta, one shared generator": lambda: shared.beta(a, b),
    }
    for fn in ways.values():  # warm up (and load the compiled sampler)
        fn()
    print(f"R = {r}, K = {k}: {2 * r * k} Gamma variates per call; CPU us per call: median, mean")
    for _ in range(2):  # twice, interleaved, to show the noise
        for name, fn in ways.items():
            median, mean = cpu_times(fn, args.rounds)
            print(f"  {name:48s} {median:8.1f} {mean:8.1f}")


if __name__ == "__main__":
    main()
