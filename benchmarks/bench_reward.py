"""The exact expected reward against the paper's 200-draw Monte Carlo estimate.

At the paper's sizes (N = 3 dimensions, K = 50 experts, M = 5 draws) measures, in one run:

1. time per call of ``expected_reward`` (closed form) and of ``monte_carlo_reward`` with 200
   sampled teams (Section 6.2), for one (q, V) pair and for a batch of 250 pairs in one call;
2. the Monte Carlo error over many (q, V) pairs: mean and largest ``|MC - exact|``, also relative
   to the exact value, and the mean reported standard error.

Policies ``q`` are floored-simplex points (``gamma = 1/(10K)``, Dirichlet(0.5) on the rest);
skills are Beta draws with per-expert means in [0.2, 0.9] and concentration 10, like the
stochastic environment. Usage: ``python benchmarks/bench_reward.py [--quick]``. Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from msroute.reward import expected_reward, monte_carlo_reward

N_DIMS, K, M, MC_DRAWS = 3, 50, 5, 200


def make_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    gamma = 1.0 / (10 * K)
    q = gamma + (1 - K * gamma) * rng.dirichlet(np.full(K, 0.5), size=n)
    q /= q.sum(axis=1, keepdims=True)
    mean = rng.uniform(0.2, 0.9, size=(n, 1, K))
    skills = rng.beta(10 * mean, 10 * (1 - mean), size=(n, N_DIMS, K))
    return q, skills


def median_time(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm-up
    times = []
    for _ in range(reps):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return float(np.median(times))


def fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    mc_rng = np.random.default_rng(args.seed + 1)
    n_pairs = 200 if args.quick else 5_000
    reps = 20 if args.quick else 200

    print(
        f"_numpy {np.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPUs "
        f"({platform.machine()}), load average at start {os.getloadavg()[0]:.2f}_\n"
    )
    q, skills = make_pairs(rng, n_pairs)
    batch = min(250, n_pairs)
    t_exact_1 = median_time(lambda: expected_reward(q[0], skills[0], M), reps)
    t_mc_1 = median_time(lambda: monte_carlo_reward(q[0], skills[0], M, MC_DRAWS, mc_rng), reps)
    t_exact_b = median_time(lambda: expected_reward(q[:batch], skills[:batch], M), 5)
    t_mc_b = median_time(
        lambda: monte_carlo_reward(q[:batch], skills[:batch], M, MC_DRAWS, mc_rng), 5
    )
    print(
        f"### Exact expected reward vs {MC_DRAWS}-draw Monte Carlo (N = {N_DIMS}, K = {K}, M = {M})"
    )
    print()
    print("| call | exact (closed form) | Monte Carlo, 200 draws | ratio MC / exact |")
    print("|---|---:|---:|---:|")
    print(f"| one (q, V) pair | {fmt(t_exact_1)} | {fmt(t_mc_1)} | {t_mc_1 / t_exact_1:.0f}x |")
    print(
        f"| {batch:,} pairs in one call | {fmt(t_exact_b)} | {fmt(t_mc_b)} "
        f"| {t_mc_b / t_exact_b:.0f}x |"
    )
    print()

    exact = expected_reward(q, skills, M)
    chunks = [  # chunks keep the Monte Carlo temporaries (pairs x draws x M x K) small
        monte_carlo_reward(q[i : i + 250], skills[i : i + 250], M, MC_DRAWS, mc_rng)
        for i in range(0, n_pairs, 250)
    ]
    est = np.concatenate([c[0] for c in chunks])
    stderr = np.concatenate([c[1] for c in chunks])
    err = np.abs(est - exact)
    rel = err / exact
    within = float(np.mean(err <= 2 * stderr))
    print(f"### Monte Carlo error over {n_pairs:,} random (q, V) pairs")
    print()
    print("| quantity | mean | max |")
    print("|---|---:|---:|")
    print(f"| exact value Φ(q) | {exact.mean():.4f} | {exact.max():.4f} |")
    print(f"| abs error abs(MC - exact) | {err.mean():.2e} | {err.max():.2e} |")
    print(f"| relative error abs(MC - exact) / exact | {rel.mean():.2e} | {rel.max():.2e} |")
    print(f"| reported standard error | {stderr.mean():.2e} | {stderr.max():.2e} |")
    print()
    print(
        f"abs(MC - exact) <= 2 standard errors in {100 * within:.1f}% of the pairs "
        "(about 95% expected for a sound estimator)."
    )


if __name__ == "__main__":
    main()
