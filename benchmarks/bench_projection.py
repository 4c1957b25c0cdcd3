"""Speed and accuracy of the exact QP step (6), ``project_step``, against cvxpy.

Measures, in one run:

1. 1,000 random instances at K = 50 shaped like Algorithm 1's step: ``y = q_prev + g / eta``
   with ``q_prev`` a point of the floored simplex (``gamma = 1/(10K)``) and ``g / eta`` gradient
   noise; the cut ``a = C w`` (costs ``C`` in [0, 1]^(K x 2), ``w`` a random unit vector) with an
   offset ``b`` that makes it bind in about half of the instances. Each is solved by
   ``project_step`` (one call per instance), by cvxpy built and solved from scratch, and by one
   parametrised cvxpy problem re-solved with new ``y, a, b`` (``cp.Parameter``). Reports the
   median time per solve, the ratios, and the largest difference between the solutions;
2. ``project_step`` alone at K = 1,000 and 10,000 for 20 runs, solved by 20 single calls and
   by one batched ``(20, K)`` call; and the simulator's case, 100 runs at K = 50.

Usage: ``python benchmarks/bench_projection.py [--quick]`` (``--quick``: 100 instances, for a
smoke test of this script). Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from msroute.projection import _floored_simplex, project_step

#: Stop the cvxpy loops after this many seconds (and say how many instances they covered).
CVXPY_BUDGET_S = 100.0


def make_instances(
    rng: np.random.Generator, n: int, k: int
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """``n`` step-(6)-like instances: y (n, K), gamma, a (n, K), b (n,)."""
    gamma = 1.0 / (10 * k)
    q_prev = gamma + (1 - k * gamma) * rng.dirichlet(np.full(k, 0.5), size=n)
    y = q_prev + rng.normal(scale=2.0 / k, size=(n, k))
    costs = rng.random((n, k, 2))
    w = rng.normal(size=(n, 2))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    a = np.einsum("nkd,nd->nk", costs, w)
    f0 = np.einsum("nk,nk->n", a, _floored_simplex(y, gamma)[0])
    reach = gamma * a.sum(1) + (1 - k * gamma) * a.min(1)
    # u > 0 (half the instances): the cut removes up to 30% of the reachable range above f0.
    u = rng.uniform(-1.0, 1.0, size=n)
    b = f0 - 0.3 * u * (f0 - reach)
    return y, gamma, a, b


def time_calls(fn, *args) -> float:  # type: ignore[no-untyped-def]
    tic = time.perf_counter()
    fn(*args)
    return time.perf_counter() - tic


def bench_against_cvxpy(n: int, k: int, seed: int) -> list[str]:
    import cvxpy as cp

    rng = np.random.default_rng(seed)
    y, gamma, a, b = make_instances(rng, n, k)
    for i in range(min(n, 20)):  # warm-up
        project_step(y[i], gamma, a[i], b[i])
    ours, t_ours = [], []
    for i in range(n):
        tic = time.perf_counter()
        q = project_step(y[i], gamma, a[i], b[i])
        t_ours.append(time.perf_counter() - tic)
        ours.append(q)
    q_ours = np.array(ours)
    binding = np.einsum("nk,nk->n", a, q_ours) > b - 1e-9

    def build_and_solve(i: int) -> tuple[np.ndarray, str]:
        x = cp.Variable(k)
        cons = [cp.sum(x) == 1, x >= gamma, a[i] @ x <= b[i]]
        prob = cp.Problem(cp.Minimize(cp.sum_squares(x - y[i])), cons)
        prob.solve()
        return np.asarray(x.value), prob.solver_stats.solver_name

    t_build, q_build, solver = [], [], ""
    spent = 0.0
    for i in range(n):
        tic = time.perf_counter()
        xi, solver = build_and_solve(i)
        dt = time.perf_counter() - tic
        t_build.append(dt)
        q_build.append(xi)
        spent += dt
        if spent > CVXPY_BUDGET_S:
            break
    n_build = len(q_build)

    x = cp.Variable(k)
    yp, ap, bp = cp.Parameter(k), cp.Parameter(k), cp.Parameter()
    prob = cp.Problem(
        cp.Minimize(cp.sum_squares(x - yp)), [cp.sum(x) == 1, x >= gamma, ap @ x <= bp]
    )
    t_param, q_param = [], []
    spent = 0.0
    for i in range(n):
        yp.value, ap.value, bp.value = y[i], a[i], b[i]
        tic = time.perf_counter()
        prob.solve()
        dt = time.perf_counter() - tic
        t_param.append(dt)
        q_param.append(np.asarray(x.value))
        spent += dt
        if spent > CVXPY_BUDGET_S:
            break
    n_param = len(q_param)

    med_ours = float(np.median(t_ours))
    med_build = float(np.median(t_build))
    med_param = float(np.median(t_param))
    diff_build = float(np.abs(np.array(q_build) - q_ours[:n_build]).max())
    diff_param = float(np.abs(np.array(q_param) - q_ours[:n_param]).max())
    lines = [
        f"### project_step vs cvxpy ({solver}, default tolerances), K = {k}, gamma = 1/(10K)",
        "",
        f"{n} instances, cut binding in {int(binding.sum())} of them. cvxpy build-and-solve "
        f"covered {n_build} instances, the parametrised re-solve {n_param}"
        + (" (time budget reached)" if min(n_build, n_param) < n else "")
        + ".",
        "",
        "| method | median time per solve | ratio to project_step | max abs diff to project_step |",
        "|---|---:|---:|---:|",
        f"| project_step (one call per instance) | {med_ours * 1e6:.1f} µs | 1 | — |",
        f"| cvxpy, build and solve | {med_build * 1e3:.2f} ms | {med_build / med_ours:.0f}x "
        f"| {diff_build:.1e} |",
        f"| cvxpy, parametrised re-solve | {med_param * 1e3:.2f} ms | {med_param / med_ours:.0f}x "
        f"| {diff_param:.1e} |",
        "",
        f"project_step median on binding cuts {np.median(np.array(t_ours)[binding]) * 1e6:.1f} µs, "
        f"on non-binding cuts {np.median(np.array(t_ours)[~binding]) * 1e6:.1f} µs. "
        "The differences are cvxpy's own accuracy at its default tolerances.",
    ]
    return lines


def fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def bench_large(seed: int, quick: bool) -> list[str]:
    """R runs' instances solved by R single calls, then by one batched (R, K) call."""
    rng = np.random.default_rng(seed)
    lines = [
        "### project_step alone: one call per run vs one batched call",
        "",
        "| K | runs R | R single calls, per solve | one (R, K) call | per solve |",
        "|---:|---:|---:|---:|---:|",
    ]
    cases = [(50, 100, 50), (1_000, 20, 30), (10_000, 20, 10)]
    for k, runs, reps in cases:
        reps = max(3, reps // 10) if quick else reps
        t_single, t_batch = [], []
        for _ in range(reps):
            y, gamma, a, b = make_instances(rng, runs, k)
            project_step(y, gamma, a, b)  # warm-up on these shapes
            tic = time.perf_counter()
            for r in range(runs):
                project_step(y[r], gamma, a[r], b[r])
            t_single.append((time.perf_counter() - tic) / runs)
            t_batch.append(time_calls(project_step, y, gamma, a, b))
        single, batch = float(np.median(t_single)), float(np.median(t_batch))
        lines.append(f"| {k:,} | {runs} | {fmt(single)} | {fmt(batch)} | {fmt(batch / runs)} |")
    lines += ["", "Medians over repetitions with fresh instances (cut binding in about half)."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import cvxpy

    print(
        f"_numpy {np.__version__}, cvxpy {cvxpy.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs ({platform.machine()}), load average at start "
        f"{os.getloadavg()[0]:.2f}_\n"
    )
    n = 100 if args.quick else 1_000
    print("\n".join(bench_against_cvxpy(n, 50, args.seed)))
    print()
    print("\n".join(bench_large(args.seed + 1, args.quick)))


if __name__ == "__main__":
    main()
