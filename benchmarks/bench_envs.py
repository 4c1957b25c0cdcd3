"""Time to generate the skills of a sweep cell (Section 6.1's Beta environments).

Run: ``python benchmarks/bench_envs.py [--rounds 10000] [--runs 20] [--dims 3] [--experts 50]
[--threads 1 2]``.

The skills' means are Figure 2's: run ``r`` has the TREC worker pool of seed ``r``
(``msroute.experiments.protocol.paper_instance``), whose accuracies near 0 and 1 give Beta
shapes below 1 (kappa = 20). For each environment and thread count it reports the best of
``--repeat`` fresh environments (wall and CPU seconds to draw all rounds, chunk by chunk as the
simulator reads them) and the cost per skill entry, next to numpy's ``Generator.beta`` on the
same means, one call per run and chunk.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from msroute.envs import MEAN_CLIP, RegimeSwitchingEnv, SkillEnv, StochasticEnv
from msroute.experiments.protocol import paper_instance


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, float]:
    """Best (wall, cpu) seconds of ``repeat`` calls."""
    wall, cpu = np.inf, np.inf
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def row(label: str, wall: float, cpu: float, entries: int) -> str:
    per = wall / entries * 1e9
    return f"{label:<32} wall {wall:6.2f} s  cpu {cpu:6.2f} s  {per:5.1f} ns/entry (wall)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dims", type=int, default=3)
    parser.add_argument("--experts", type=int, default=50)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    t, r, n, k = args.rounds, args.runs, args.dims, args.experts
    base = np.stack([paper_instance(seed, k, n).skills_base for seed in range(r)])
    entries = t * r * n * k
    print(f"{t} rounds x {r} runs x N={n} x K={k} = {entries:,} entries")
    rng = np.random.default_rng(1)
    mean = np.clip(base, MEAN_CLIP, 1 - MEAN_CLIP)
    a, b = 20 * mean, 20 * (1 - mean)
    wall, cpu = best_of(
        args.repeat,
        lambda: [
            rng.beta(a[run], b[run], size=(1000, n, k))
            for _ in range(-(-t // 1000))
            for run in range(r)
        ],
    )
    print(row("numpy Generator.beta", wall, cpu, entries))
    for name, factory in (
        ("StochasticEnv", lambda th: StochasticEnv(base, seed=list(range(r)), n_threads=th)),
        (
            "RegimeSwitchingEnv",
            lambda th: RegimeSwitchingEnv(base, horizon=t, seed=list(range(r)), n_threads=th),
        ),
    ):
        for threads in args.threads:

            def draw(threads: int = threads, factory: Callable[[int], SkillEnv] = factory) -> None:
                env = factory(threads)
                for start in range(0, t, 1000):
                    env.skills(start, min(t, start + 1000))

            wall, cpu = best_of(args.repeat, draw)
            label = f"{name} ({threads} thread{'s' if threads > 1 else ''})"
            print(row(label, wall, cpu, entries))


if __name__ == "__main__":
    main()
