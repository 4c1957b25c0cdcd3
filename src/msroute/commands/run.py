"""``msroute run``: one cell of the sweep (a policy, an environment, a level) over some seeds."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from msroute._version import __version__
from msroute.commands._args import int_arg, seed_arg
from msroute.errors import InvalidValueError

__all__ = ["register"]

_ASCII_INT = re.compile(r"[+-]?[0-9]+")


def _param(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``: the value as an int (ASCII digits), a float (an ASCII decimal number:
    ``int`` and ``float`` also read other scripts' digits and ``1_0``), or else the string."""
    from msroute._validation import parse_decimal, quoted

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param takes KEY=VALUE, got {quoted(text)}")
    if len(value) > 400:
        raise argparse.ArgumentTypeError(f"--param {quoted(key)}: value of {len(value)} characters")
    if _ASCII_INT.fullmatch(value.strip()):
        return key, int(value)
    try:
        return key, parse_decimal(value)
    except ValueError:
        return key, value


def register(subparsers: Any) -> None:
    """Add the ``run`` subcommand."""
    from msroute.datasets.crowd import DATASETS, DEFAULT_DATASET
    from msroute.experiments.protocol import ENVIRONMENTS, LEVELS, describe_levels
    from msroute.policies.registry import POLICIES

    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run one policy on one environment and constraint level, print a summary",
        description="Run one cell of the paper's sweep on packaged crowd data: the seed's "
        "worker pool, its skill stream and the level's constraints, exactly as in "
        "`reproduce fig2`.",
    )
    p.add_argument(
        "--policy", required=True, choices=[n for n in POLICIES if n != "omd-contextual"]
    )
    p.add_argument("--env", default="stochastic", choices=ENVIRONMENTS)
    p.add_argument(
        "--level",
        default="tight",
        choices=list(LEVELS),
        help="Table 1's constraint level, per time-averaged round (each distinct routed "
        "expert counted once): " + describe_levels().replace("%", "%%"),
    )
    p.add_argument("--seed", type=seed_arg, nargs="+", default=[0], help="one or more seeds (>= 0)")
    p.add_argument("--horizon", type=int_arg, default=10_000)
    p.add_argument(
        "--dataset",
        default=DEFAULT_DATASET,
        choices=list(DATASETS),
        help="packaged crowd data (default: trec, the paper's TREC 2010)",
    )
    p.add_argument("--n-dims", type=int_arg, default=3)
    p.add_argument("--n-experts", type=int_arg, default=50)
    p.add_argument("--m-draws", type=int_arg, default=5)
    p.add_argument(
        "--param",
        type=_param,
        action="append",
        default=[],
        help="policy constructor argument KEY=VALUE (repeatable), e.g. eta_mult=0.03",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the cell and print its summary."""
    import numpy as np

    from msroute._validation import quoted
    from msroute.core.bounds import bound_report
    from msroute.experiments.cells import CellSpec, params_items
    from msroute.experiments.output import peak_memory_mb
    from msroute.experiments.sweep import sweep_worker

    if len(set(args.seed)) != len(args.seed):
        raise InvalidValueError(f"--seed has repeated values: {args.seed}")
    keys = [key for key, _ in args.param]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:  # dict() would keep the last value silently
        raise InvalidValueError(
            f"--param {quoted(repeated[0])} is given more than once; give each parameter once"
        )
    params = dict(args.param)
    for key, flag in (("horizon", "--horizon"), ("seed", "--seed"), ("n_runs", "--seed")):
        if key in params:
            raise InvalidValueError(f"--param {key}=...: {key} is set by {flag}")
    if args.policy in ("ts", "ts-bwk"):
        params.setdefault("reward_scale", float(args.n_dims))  # Section 6.3's r_t / N
    spec = CellSpec(
        experiment="run",
        env=args.env,
        policy=args.policy,
        levels=(args.level,),
        seeds=tuple(args.seed),
        horizon=args.horizon,
        n_experts=args.n_experts,
        m_draws=args.m_draws,
        n_dims=args.n_dims,
        policy_params=params_items(params),
        dataset=args.dataset,
    )
    res = sweep_worker(spec)
    report = bound_report(
        res["avg_cost"],
        np.full_like(res["bounds"], -np.inf),
        res["bounds"],
        ["workload", "experts"],
    )
    runs = [
        {
            "seed": seed,
            "avg_reward": float(res["avg_reward"][i]),
            "avg_workload": float(res["avg_cost"][i, 0]),
            "budget_bound": float(res["bounds"][i, 0]),
            "avg_experts": float(res["avg_cost"][i, 1]),
            "expert_cap": float(res["bounds"][i, 1]),
            "feasible": bool(res["feasible"][i]),
            "r2": float(res["r2"][i]),
            "bounds": report[i],
        }
        for i, seed in enumerate(spec.seeds)
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "msroute_version": __version__,
                    "seeds": list(spec.seeds),
                    "policy": args.policy,
                    "env": args.env,
                    "level": args.level,
                    "dataset": args.dataset,
                    "horizon": args.horizon,
                    "params": params,
                    "seconds": float(res["wall_time"]),
                    "peak_memory_mb": peak_memory_mb()["driver"],
                    "runs": runs,
                }
            )
        )
        return 0
    from msroute.experiments.output import print_table

    short = {
        "avg_reward": "reward",
        "avg_workload": "workload",
        "budget_bound": "budget",
        "avg_experts": "experts",
        "expert_cap": "cap",
        "feasible": "feasible",
        "r2": "R2",
    }

    def slack(r: dict[str, Any]) -> str:
        return " ".join(f"{b['slack']:+.3f}" + ("*" if b["binds"] else "") for b in r["bounds"])

    print_table(
        f"{args.policy} on {args.dataset}/{args.env}, level {args.level}, T = {args.horizon} "
        f"({float(res['wall_time']):.1f} s): time averages per seed",
        ["seed", *short.values(), "slack (* binds)"],
        [[r["seed"], *(r[k] for k in short), slack(r)] for r in runs],
    )
    return 0
