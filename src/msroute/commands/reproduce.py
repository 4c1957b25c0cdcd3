"""``msroute reproduce``: regenerate the paper's experiments (Section 6) from one command."""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msroute.commands._args import int_arg
from msroute.errors import InvalidValueError

__all__ = ["EXPERIMENTS", "available_cores", "register"]

#: Settings of ``--quick``: a reduced run that finishes in seconds (docs/getting-started.md, CI).
QUICK: dict[str, Any] = {"seeds": 2, "horizon": 1000}

#: Experiment name -> (module, config class, runner).
EXPERIMENTS: dict[str, tuple[str, str, str]] = {
    "fig1": ("msroute.experiments.fig1", "Fig1Config", "run_fig1"),
    "fig2": ("msroute.experiments.fig2", "Fig2Config", "run_fig2"),
    "fig3": ("msroute.experiments.fig3", "Fig3Config", "run_fig3"),
    "contextual": ("msroute.experiments.contextual", "ContextualConfig", "run_contextual"),
}


def available_cores() -> int:
    """The number of cores this process may run on (its CPU affinity, not the machine's count:
    a container or ``taskset`` may allow fewer)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def register(subparsers: Any) -> None:
    """Add the ``reproduce`` subcommand."""
    from msroute.datasets.crowd import DATASETS
    from msroute.experiments.protocol import describe_levels

    p: argparse.ArgumentParser = subparsers.add_parser(
        "reproduce",
        help="reproduce the paper's experiments (figures, tables, tidy CSV)",
        description="Regenerate the paper's experiments on the packaged TREC 2010 data (or, "
        "with --dataset web, on the packaged web relevance data under the same protocol). "
        "Finished cells are cached under OUT/cells, so an interrupted run resumes. Constraint "
        "levels (Table 1, per time-averaged round): " + describe_levels().replace("%", "%%"),
    )
    p.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    p.add_argument("--out", type=Path, default=Path("results"), help="output directory")
    p.add_argument("--seeds", type=int_arg, help="number of seeds (paper: 20; fig1: 5)")
    p.add_argument("--horizon", type=int_arg, help="rounds per run (paper: 10,000)")
    p.add_argument(
        "--dataset",
        choices=list(DATASETS),
        help="packaged crowd data the instances are drawn from (default: trec, the paper's)",
    )
    p.add_argument(
        "--jobs",
        type=int_arg,
        default=available_cores(),
        help="worker processes (default: the cores this process may use, here %(default)s)",
    )
    p.add_argument(
        "--backend",
        choices=["local", "ray"],
        default="local",
        help="where cells run: local processes (default) or Ray tasks (extra [ray]; a local "
        "Ray runtime with --jobs CPUs, or the cluster at --address)",
    )
    p.add_argument(
        "--address",
        help="with --backend ray: the cluster to join (HOST:PORT, ray://HOST:PORT or auto)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="TOML file: a [fig1]/[fig2]/... table per experiment, top-level keys for all",
    )
    p.add_argument(
        "--quick", action="store_true", help=f"a reduced run that finishes in seconds ({QUICK})"
    )
    p.add_argument("--no-plot", action="store_true", help="skip the figures")
    p.add_argument("--quiet", action="store_true", help="no progress bar or tables")
    p.set_defaults(func=run)


def build_config(name: str, args: argparse.Namespace) -> Any:
    """Defaults, then --quick, then the TOML table, then the flags."""
    import importlib

    from msroute.experiments.config import load_toml, with_overrides

    module_name, cls_name, _ = EXPERIMENTS[name]
    cls = getattr(importlib.import_module(module_name), cls_name)
    cfg = cls()
    if args.quick:
        quick = {**QUICK, **getattr(importlib.import_module(module_name), "QUICK", {})}
        cfg = with_overrides(cfg, quick, "--quick")
    if args.config is not None:
        for source, values in load_toml(args.config, name, tables=list(EXPERIMENTS)):
            cfg = with_overrides(cfg, values, source)
    given = (("seeds", args.seeds), ("horizon", args.horizon), ("dataset", args.dataset))
    flags = {k: v for k, v in given if v is not None}
    return with_overrides(cfg, flags, "command line") if flags else cfg


def run(args: argparse.Namespace) -> int:
    """Run the chosen experiment(s)."""
    import importlib

    if args.jobs < 1:
        raise InvalidValueError(f"--jobs == {args.jobs}, must be >= 1")
    # At exit, the objects this run leaves (matplotlib's, numba's) go with the process: the
    # interpreter's last collections over them took about 0.2 s after the files were written.
    atexit.unregister(gc.freeze)  # once, however often this runs in a process
    atexit.register(gc.freeze)
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    configs = {name: build_config(name, args) for name in names}  # all errors before any work
    from msroute.experiments.backends import make_backend

    backend = make_backend(args.backend, jobs=args.jobs, address=args.address)
    args.out.mkdir(parents=True, exist_ok=True)
    with backend:  # Ray starts once for all experiments
        for name in names:
            module_name, _, fn_name = EXPERIMENTS[name]
            runner: Callable[..., Any] = getattr(importlib.import_module(module_name), fn_name)
            tic = time.perf_counter()
            runner(
                configs[name],
                args.out,
                jobs=args.jobs,
                backend=backend,
                plot=not args.no_plot,
                quiet=args.quiet,
            )
            if not args.quiet:
                cfg = configs[name]
                print(
                    f"{name}: done in {time.perf_counter() - tic:.1f} s "
                    f"({cfg.seeds} seeds, T = {cfg.horizon}); results in {args.out}/{name}.*"
                )
    return 0
