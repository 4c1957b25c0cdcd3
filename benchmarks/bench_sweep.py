"""Speed of the paper's sweeps (``msroute reproduce``), cold cache, on this machine.

Measures, in one run:

1. the full Figure 2 sweep (8 policies x 4 levels x 2 environments x 20 seeds = 1,280 runs of
   10,000 rounds) with ``--jobs 2``, wall-clock;
2. Figure 3 and Figure 1 from a cold cache, each with ``--jobs 2`` (Figure 1 with and without
   the certified OPT of every run);
3. the same policies run the straightforward way — one run at a time (R = 1), round by round —
   on a sample of runs, extrapolated to the 1,280 runs of Figure 2; the ratio to (1) is the
   gain of batching runs.

Usage: ``python benchmarks/bench_sweep.py [--quick]`` (``--quick``: a smaller sweep, for a
smoke test of this script). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from msroute.experiments.cells import CellSpec, params_items
from msroute.experiments.fig1 import Fig1Config, run_fig1
from msroute.experiments.fig2 import Fig2Config, run_fig2
from msroute.experiments.fig3 import Fig3Config, run_fig3
from msroute.experiments.sweep import sweep_worker


def timed(fn, *args, **kwargs) -> float:  # type: ignore[no-untyped-def]
    tic = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - tic


def per_run_estimate(cfg: Fig2Config, sample_rounds: int) -> tuple[float, dict[str, float]]:
    """Seconds for all runs of the sweep done one at a time, from a timed sample."""
    per_policy = {}
    for policy in cfg.policies:
        params = {"eta_mult": cfg.eta_mult} if policy == "omd" else {}
        spec = CellSpec(
            experiment="bench",
            env="stochastic",
            policy=policy,
            levels=("tight",),
            seeds=(0,),
            horizon=sample_rounds,
            policy_params=params_items(params),
        )
        per_policy[policy] = timed(sweep_worker, spec)
    scale = (cfg.horizon / sample_rounds) * len(cfg.levels) * len(cfg.envs) * cfg.seeds
    return sum(per_policy.values()) * scale, per_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seeds, horizon = (4, 2000) if args.quick else (20, 10_000)
    fig2 = Fig2Config(seeds=seeds, horizon=horizon)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t2 = timed(run_fig2, fig2, Path(tmp) / "a", jobs=2, plot=False, quiet=True)
        n_runs = fig2.seeds * len(fig2.policies) * len(fig2.levels) * len(fig2.envs)
        rows.append(("Figure 2 sweep, --jobs 2", f"{n_runs} runs x {horizon}", t2))
        t3 = timed(
            run_fig3,
            Fig3Config(seeds=seeds, horizon=horizon),
            Path(tmp) / "b",
            jobs=2,
            plot=False,
            quiet=True,
        )
        rows.append(("Figure 3 (cold cache), --jobs 2", "its 6 policies' Figure 2 cells", t3))
        f1 = Fig1Config(seeds=max(2, seeds // 4), horizon=horizon, opt=False)
        t1 = timed(run_fig1, f1, Path(tmp) / "c", jobs=2, plot=False, quiet=True)
        rows.append(("Figure 1 without OPT, --jobs 2", f"{f1.seeds * 6} runs", t1))
        f1o = Fig1Config(seeds=max(2, seeds // 4), horizon=horizon, opt=True)
        t1o = timed(run_fig1, f1o, Path(tmp) / "d", jobs=2, plot=False, quiet=True)
        rows.append(("Figure 1 with certified OPT per run, --jobs 2", f"{f1o.seeds * 6} runs", t1o))
    sample = 1000 if args.quick else 2000
    naive, per_policy = per_run_estimate(fig2, sample)
    print("| measurement | size | seconds |")
    print("|---|---|---|")
    for name, size, sec in rows:
        print(f"| {name} | {size} | {sec:.1f} |")
    print(
        f"| Figure 2 one run at a time (R = 1), extrapolated from {sample} rounds of one run "
        f"per policy | {n_runs} runs x {horizon} | {naive:.0f} |"
    )
    print()
    print(
        f"Batched sweep vs one run at a time: {naive / t2:.0f}x faster (wall, 2 jobs); "
        f"{naive / (2 * t2):.0f}x per core."
    )
    print(
        "Per-policy seconds for one run of",
        sample,
        "rounds:",
        ", ".join(f"{k} {v:.2f}" for k, v in per_policy.items()),
    )


if __name__ == "__main__":
    main()
