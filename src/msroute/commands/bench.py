"""``msroute bench``: the reward-budget frontier of a scenario against the certified optimum."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from msroute._validation import quoted
from msroute.commands._args import int_arg
from msroute.commands.reproduce import available_cores
from msroute.errors import InvalidValueError

__all__ = ["QUICK", "register"]

#: Settings of ``msroute bench --quick``: a sweep of seconds (docs/routing.md, CI).
QUICK: dict[str, Any] = {"seeds": 2, "horizon": 1000, "n_budgets": 4}


def _names(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:  # an empty flag is no request for the defaults
        raise argparse.ArgumentTypeError(f"no name in {quoted(text)}")
    return names


def register(subparsers: Any) -> None:
    """Add the ``bench`` subcommand."""
    from msroute.scenarios import SCENARIOS

    p: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="reward-budget frontier of a scenario: every policy against the certified OPT",
        description="Sweep a scenario's budget from the cheapest feasible level to "
        "unconstrained; for every budget report each policy's time-averaged reward, cost and "
        "feasibility, and OPT (the certified best fixed feasible policy of eq. (3)). Writes "
        "OUT/bench-SCENARIO.csv/.json/.png/.svg and prints the regret to the frontier. "
        f"Scenarios: {', '.join(SCENARIOS)}; or --skills FILE.csv --costs FILE.csv.",
    )
    p.add_argument(
        "scenario", nargs="?", choices=[*SCENARIOS, "llmrouter"], help="a named scenario"
    )
    p.add_argument(
        "--outcomes",
        type=Path,
        help="an outcome table (CSV or JSON Lines): prompt_id[,category],MODEL...,MODEL|COST...",
    )
    p.add_argument("--skills", type=Path, help="CSV: rows experts, columns reward dims, in [0,1]")
    p.add_argument("--costs", type=Path, help="CSV: rows experts, one column per named cost")
    p.add_argument(
        "--budget-cost", help="with --costs or --outcomes: the budgeted cost (default: first)"
    )
    p.add_argument(
        "--m-draws",
        type=int_arg,
        help="M (default 2 with --skills; 1 and 2 for outcome tables)",
    )
    p.add_argument("--policies", type=_names, help="comma-separated registered policies")
    p.add_argument(
        "--budgets", type=_names, help="comma-separated budget levels (numbers, or 'none')"
    )
    p.add_argument(
        "--team-answer",
        help="outcome tables: how a team's answer is combined: best (the best member's, "
        "sum-max: an upper bound), judge:P (the best member's with probability P, else a "
        "random member's) or random (default best)",
    )
    p.add_argument(
        "--warm-start",
        metavar="EVAL",
        help="outcome tables: start the OMD policies from this eval table (its models are the "
        "stream's; 'llmrouter' for the packaged one)",
    )
    p.add_argument(
        "--warm-split",
        metavar="F",
        type=float,
        help="outcome tables: split the table by prompt per seed, warm-start on a fraction F "
        "and stream the rest",
    )
    p.add_argument(
        "--warm-strength",
        metavar="N",
        type=float,
        help="the warm start's pseudo-counts per context and model (default: the router's)",
    )
    p.add_argument(
        "--contexts",
        choices=["category", "text", "none"],
        help="outcome tables: what the router sees of a prompt (default category; text: its "
        "task predicted from its text by a model fitted on the eval table, or clusters)",
    )
    p.add_argument("--seeds", type=int_arg, help="number of seeds (default 5)")
    p.add_argument("--horizon", type=int_arg, help="rounds per run (default 5000)")
    p.add_argument("--quick", action="store_true", help=f"a run of seconds ({QUICK})")
    p.add_argument("--out", type=Path, default=Path("results"), help="output directory")
    p.add_argument(
        "--jobs",
        type=int_arg,
        default=available_cores(),
        help="worker processes (default: the cores this process may use, here %(default)s)",
    )
    p.add_argument("--no-plot", action="store_true", help="skip the figure")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> Any:
    """Defaults, then --quick, then the flags."""
    from msroute.experiments.bench import BenchConfig
    from msroute.scenarios import FILES, files_scenario

    outcome_only = [
        flag
        for flag, value in (
            ("--team-answer", args.team_answer),
            ("--warm-start", args.warm_start),
            ("--warm-split", args.warm_split),
            ("--warm-strength", args.warm_strength),
            ("--contexts", args.contexts),
        )
        if value is not None
    ]
    if outcome_only:
        raise InvalidValueError(
            f"{outcome_only[0]} applies to outcome tables (llmrouter, --outcomes FILE), not to a "
            "scenario or --skills/--costs files"
        )
    files = args.skills is not None or args.costs is not None
    if files and args.scenario is not None:
        raise InvalidValueError("give a scenario name or --skills/--costs files, not both")
    if files and (args.skills is None or args.costs is None):
        missing = "--costs" if args.costs is None else "--skills"
        raise InvalidValueError(f"{missing} is missing: --skills and --costs go together")
    if not files and args.scenario is None:
        raise InvalidValueError("give a scenario name or --skills FILE.csv --costs FILE.csv")
    values: dict[str, Any] = dict(QUICK) if args.quick else {}
    if files:
        scenario = files_scenario(
            str(args.skills),
            str(args.costs),
            m_draws=2 if args.m_draws is None else args.m_draws,
            budget_cost=args.budget_cost,
        )
        values.update(scenario=FILES, scenario_params=scenario.params)
    else:
        ignored = [
            flag
            for flag, value in (("--m-draws", args.m_draws), ("--budget-cost", args.budget_cost))
            if value is not None
        ]
        if ignored:  # a named scenario sets its own team size and budgeted cost
            raise InvalidValueError(
                f"{' and '.join(ignored)} {'apply' if len(ignored) > 1 else 'applies'} to "
                "--skills/--costs files and --outcomes "
                f"tables; scenario {args.scenario!r} sets its own"
            )
        values["scenario"] = args.scenario
    given = {
        "policies": args.policies,
        "budgets": args.budgets,
        "seeds": args.seeds,
        "horizon": args.horizon,
    }
    values.update({k: v for k, v in given.items() if v is not None})
    return BenchConfig(**values)


def run(args: argparse.Namespace) -> int:
    """Run the sweep."""
    from msroute.experiments.bench import run_bench

    if args.jobs < 1:
        raise InvalidValueError(f"--jobs == {args.jobs}, must be >= 1")
    if args.outcomes is not None or args.scenario == "llmrouter":
        return run_outcomes(args)
    cfg = build_config(args)
    args.out.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    run_bench(cfg, args.out, jobs=args.jobs, plot=not args.no_plot, quiet=args.quiet)
    if not args.quiet:
        print(
            f"bench {cfg.scenario}: done in {time.perf_counter() - tic:.1f} s ({cfg.seeds} seeds, "
            f"T = {cfg.horizon}); results in {args.out}/bench-{cfg.scenario}.*"
        )
    return 0


def outcome_config(args: argparse.Namespace) -> Any:
    """The outcome bench's settings: the packaged table or ``--outcomes``, then the flags."""
    from msroute.experiments.outcomes import LLMROUTER, OutcomeBenchConfig

    if args.outcomes is not None and args.scenario is not None:
        raise InvalidValueError("give a scenario name or --outcomes FILE, not both")
    if args.skills is not None or args.costs is not None:
        raise InvalidValueError("--outcomes and --skills/--costs are different inputs: give one")
    values: dict[str, Any] = {"table": LLMROUTER if args.outcomes is None else str(args.outcomes)}
    if args.quick:
        values.update(seeds=2, horizon=2000)
    given = {
        "policies": args.policies,
        "budgets": args.budgets,
        "seeds": args.seeds,
        "horizon": args.horizon,
        "budget_cost": args.budget_cost,
        "m_draws": None if args.m_draws is None else (args.m_draws,),
        "team_answer": args.team_answer,
        "warm_start": args.warm_start,
        "warm_split": args.warm_split,
        "warm_strength": args.warm_strength,
        "contexts": args.contexts,
    }
    values.update({k: v for k, v in given.items() if v is not None})
    return OutcomeBenchConfig(**values)


def run_outcomes(args: argparse.Namespace) -> int:
    """Run the sweep on a recorded outcome table."""
    from msroute.experiments.outcomes import run_outcome_bench

    cfg = outcome_config(args)
    tic = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = run_outcome_bench(cfg, args.out, jobs=args.jobs, plot=not args.no_plot, quiet=args.quiet)
    if not args.quiet:
        name = rows[0]["table"] if rows else cfg.table
        print(
            f"bench {name}: done in {time.perf_counter() - tic:.1f} s ({cfg.seeds} seeds, "
            f"T = {cfg.horizon}, M in {list(cfg.m_draws)}); results in {args.out}/"
        )
    return 0
