"""Ray backend against the local one: the Figure 2 sweep, cold cache, side by side.

Run: ``python benchmarks/bench_backends.py [--seeds 20] [--horizon 10000] [--cpus 2]``.

Both run the same cells with the same number of workers (``--cpus``): the local backend in
worker processes, Ray as tasks on a local runtime with that many CPUs. The Ray runtime's start
and stop are timed apart from the sweep. On one machine Ray cannot be faster than local
processes (the same cores do the same work, plus task scheduling and object transfer); it is
there for clusters. The two results are checked to be identical.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from msroute.experiments.backends import LocalBackend, RayBackend
from msroute.experiments.fig2 import Fig2Config, run_fig2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--horizon", type=int, default=10_000)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    cfg = Fig2Config(seeds=args.seeds, horizon=args.horizon)
    with tempfile.TemporaryDirectory() as tmp:
        tic = time.perf_counter()
        local = run_fig2(
            cfg, Path(tmp) / "local", backend=LocalBackend(args.cpus), plot=False, quiet=True
        )
        t_local = time.perf_counter() - tic
        tic = time.perf_counter()
        with RayBackend(num_cpus=args.cpus) as ray_backend:
            t_start = time.perf_counter() - tic
            tic = time.perf_counter()
            remote = run_fig2(cfg, Path(tmp) / "ray", backend=ray_backend, plot=False, quiet=True)
            t_ray = time.perf_counter() - tic
            tic = time.perf_counter()
        t_stop = time.perf_counter() - tic
    assert remote == local, "the backends disagree"
    print(f"Figure 2 sweep, {args.seeds} seeds, T = {args.horizon}, {args.cpus} workers; seconds")
    print("| backend | sweep | runtime start | runtime stop |")
    print("|---|---:|---:|---:|")
    print(f"| local processes | {t_local:.1f} | | |")
    print(f"| Ray, local runtime | {t_ray:.1f} | {t_start:.1f} | {t_stop:.1f} |")
    print(
        f"Ray / local, sweep only: {t_ray / t_local:.2f}; with start and stop: "
        f"{(t_ray + t_start + t_stop) / t_local:.2f}. Results identical."
    )


if __name__ == "__main__":
    main()
