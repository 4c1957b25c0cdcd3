"""What a number-changing lever would buy Figure 2's wall time, alternated with the tree.

Run: ``python benchmarks/bench_sweep_levers.py [--rounds 4]``.

Figure 2's critical path is the skill stream drawn before the workers fork, then OMD's cell
(docs/benchmarks.md, "Sweeps"). The lever named for OMD's cell, installed into a child process
before its sweep (the forked workers inherit it; the package is not changed):

* ``chol``: the model estimator's refit by Cholesky (numpy's batched factorization, then
  compiled triangular solves) instead of the dense LU of ``np.linalg.solve``.

(The other lever measured here, a compiled skill stream, is now the environments' own:
``msroute._skill_draws``.) It changes every OMD number of the sweep, so this script only times
it: each round runs ``msroute reproduce fig2 --quiet --no-plot`` (warm, into a fresh
directory) once as the tree is and once with the lever, and prints the wall times and their
means. One warm-up run of each comes first (numba compiles this script's kernel into its
cache).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from typing import Any

import numba
import numpy as np

from msroute.policies import omd_variants


@numba.njit(cache=True, nogil=True)
def _cholesky_solve(low: Any, rhs: Any, out: Any) -> None:
    """``out[m] = (L L^T)^-1 rhs[m]`` for lower-triangular factors ``low`` (n, p, p)."""
    n, p = rhs.shape
    y = np.empty(p)
    for m in range(n):
        for i in range(p):
            s = rhs[m, i]
            for j in range(i):
                s -= low[m, i, j] * y[j]
            y[i] = s / low[m, i, i]
        for i in range(p - 1, -1, -1):
            s = y[i]
            for j in range(i + 1, p):
                s -= low[m, j, i] * out[m, j]
            out[m, i] = s / low[m, i, i]


def _refit(self: Any, runs: Any, ctx: Any) -> None:
    """``ModelGradient.refit`` by Cholesky (the Gram matrices read in place when every run refits
    in one context, as the tree's refit does)."""
    every = runs.size == self.coef.shape[0] and bool(
        np.array_equal(runs, np.arange(runs.size)) and np.all(ctx == ctx[0])
    )
    at = (slice(None), int(ctx[0])) if every else (runs, ctx)
    rhs = np.ascontiguousarray(self.moment[at])
    out = np.empty(rhs.shape)
    _cholesky_solve(np.linalg.cholesky(self.gram[at]), rhs, out)
    self.coef[at] = out


def child(variant: str, argv: list[str]) -> int:
    """Run the command line in this process with the variant's levers installed."""
    if variant not in ("tree", "levers"):
        raise SystemExit(f"--child: unknown variant {variant!r} (tree or levers)")
    if variant == "levers":
        omd_variants.ModelGradient.refit = _refit  # type: ignore[method-assign]
    from msroute.cli import main as cli

    return cli(argv)


def wall(variant: str) -> float:
    """One warm ``msroute reproduce fig2 --quiet --no-plot`` of the variant, in seconds."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, __file__, "--child", variant, "reproduce", "fig2", "--out", out]
        tic = time.perf_counter()
        subprocess.run([*cmd, "--quiet", "--no-plot"], check=True, capture_output=True)
        return time.perf_counter() - tic


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2], sys.argv[3:]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"tree": [], "levers": []}
    for variant in times:
        wall(variant)  # warm-up: numba's cache
    for _ in range(args.rounds):
        for variant, seen in times.items():
            seen.append(wall(variant))
            print(f"{variant:>7}: {seen[-1]:.2f} s", flush=True)
    for variant, seen in times.items():
        print(f"{variant:>7}: mean {np.mean(seen):.2f} s, " + ", ".join(f"{t:.2f}" for t in seen))


if __name__ == "__main__":
    main()
