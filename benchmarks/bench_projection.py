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

from msroute.core.qp._simplex import _floored_simplex
from msroute.core.qp.projection import _solve, project_step

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


def kkt_residual(y: np.ndarray, gamma: float, a: np.ndarray, b: float) -> float:
    """Largest violation of the KKT conditions of (6) at project_step's point and multiplier."""
    q, mu = _solve(y, gamma, a, b)
    r = q - y + float(mu) * a  # = nu on free coordinates, >= nu on floored ones
    free = q > gamma
    nu = r[free].mean() if free.any() else r.min()
    return float(
        max(
            abs(q.sum() - 1),
            gamma - q.min(),
            a @ q - b,
            -float(mu),
            np.abs(r[free] - nu).max(initial=0.0),
            (nu - r).max(),
            abs(float(mu) * (a @ q - b)),
        )
    )


def solve_one_by_one(y: np.ndarray, gamma: float, a: np.ndarray, b: np.ndarray) -> None:
    for r in range(y.shape[0]):
        project_step(y[r], gamma, a[r], b[r])


def best_of(repeat: int, fn, *args):  # type: ignore[no-untyped-def]
    """(smallest wall time of ``repeat`` calls, last result): robust to other processes' load."""
    best, out = np.inf, None
    for _ in range(repeat):
        tic = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - tic)
    return best, out


def bench_against_cvxpy(n: int, k: int, seed: int, repeat: int) -> list[str]:
    import cvxpy as cp

    rng = np.random.default_rng(seed)
    y, gamma, a, b = make_instances(rng, n, k)
    for i in range(min(n, 20)):  # warm-up
        project_step(y[i], gamma, a[i], b[i])
    t_ours, ours = zip(
        *(best_of(repeat, project_step, y[i], gamma, a[i], b[i]) for i in range(n)), strict=True
    )
    q_ours = np.array(ours)
    binding = np.einsum("nk,nk->n", a, q_ours) > b - 1e-9

    def build_and_solve(i: int, **solver_args: object) -> tuple[np.ndarray, str]:
        x = cp.Variable(k)
        cons = [cp.sum(x) == 1, x >= gamma, a[i] @ x <= b[i]]
        prob = cp.Problem(cp.Minimize(cp.sum_squares(x - y[i])), cons)
        prob.solve(**solver_args)
        return np.asarray(x.value), prob.solver_stats.solver_name

    t_build, q_build, solver = [], [], ""
    spent = 0.0
    for i in range(n):
        dt, (xi, solver) = best_of(repeat, build_and_solve, i)
        t_build.append(dt)
        q_build.append(xi)
        spent += dt * repeat
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
        dt, _ = best_of(repeat, prob.solve)
        t_param.append(dt)
        q_param.append(np.asarray(x.value))
        spent += dt * repeat
        if spent > CVXPY_BUDGET_S:
            break
    n_param = len(q_param)

    # Accuracy reference: Clarabel (interior point) at tight tolerances on the first instances.
    n_tight = min(n, 200)
    tight = {
        "solver": cp.CLARABEL,
        "tol_gap_abs": 1e-12,
        "tol_gap_rel": 1e-12,
        "tol_feas": 1e-12,
        "tol_ktratio": 1e-10,
    }
    q_tight = np.array([build_and_solve(i, **tight)[0] for i in range(n_tight)])
    diff_tight = float(np.abs(q_tight - q_ours[:n_tight]).max())
    obj_ours = ((q_ours[:n_tight] - y[:n_tight]) ** 2).sum(1)
    obj_tight = ((q_tight - y[:n_tight]) ** 2).sum(1)
    obj_excess = float((obj_ours - obj_tight).max())  # > 0 would mean Clarabel found better
    kkt = max(kkt_residual(y[i], gamma, a[i], b[i]) for i in range(n))

    med_ours = float(np.median(t_ours))
    med_build = float(np.median(t_build))
    med_param = float(np.median(t_param))
    diff_build = float(np.abs(np.array(q_build) - q_ours[:n_build]).max())
    diff_param = float(np.abs(np.array(q_param) - q_ours[:n_param]).max())
    t_ours_a = np.array(t_ours)
    lines = [
        f"### project_step vs cvxpy ({solver}, default tolerances), K = {k}, gamma = 1/(10K)",
        "",
        f"{n} instances, cut binding in {int(binding.sum())} of them. cvxpy build-and-solve "
        f"covered {n_build} instances, the parametrised re-solve {n_param}"
        + (" (time budget reached)" if min(n_build, n_param) < n else "")
        + f". Each time is the best of {repeat} calls on that instance; medians over instances.",
        "",
        "| method | median time per solve | ratio to project_step | max abs diff to project_step |",
        "|---|---:|---:|---:|",
        f"| project_step (one call per instance) | {fmt(med_ours)} | 1 | — |",
        f"| cvxpy, build and solve | {fmt(med_build)} | {med_build / med_ours:.0f}x "
        f"| {diff_build:.1e} |",
        f"| cvxpy, parametrised re-solve | {fmt(med_param)} | {med_param / med_ours:.0f}x "
        f"| {diff_param:.1e} |",
        "",
        f"project_step median on binding cuts {fmt(float(np.median(t_ours_a[binding])))} "
        f"({np.median(t_build) / np.median(t_ours_a[binding]):.0f}x faster than build and "
        f"solve), on non-binding cuts {fmt(float(np.median(t_ours_a[~binding])))}. "
        f"Against Clarabel at tolerances 1e-12 ({n_tight} instances) the largest difference is "
        f"{diff_tight:.1e}, and project_step's objective is never worse than Clarabel's by more "
        f"than {max(obj_excess, 0.0):.1e}. project_step's largest KKT residual over all {n} "
        f"instances is {kkt:.1e}: the differences above are the solvers' accuracy.",
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

            t_single.append(best_of(3, solve_one_by_one, y, gamma, a, b)[0] / runs)
            t_batch.append(best_of(3, project_step, y, gamma, a, b)[0])
        single, batch = float(np.median(t_single)), float(np.median(t_batch))
        lines.append(f"| {k:,} | {runs} | {fmt(single)} | {fmt(batch)} | {fmt(batch / runs)} |")
    lines += [
        "",
        "Medians over repetitions with fresh instances (cut binding in about half); each time "
        "is the best of 3.",
    ]
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
    print("\n".join(bench_against_cvxpy(n, 50, args.seed, repeat=1 if args.quick else 3)))
    print()
    print("\n".join(bench_large(args.seed + 1, args.quick)))


if __name__ == "__main__":
    main()
