"""``msroute data``: statistics of crowd data and the instances built from it (Section 6.1).

``msroute data stats`` prints the counts of the packaged TREC 2010 data (``--dataset web``: the
packaged web relevance data; or of ``--crowd`` and ``--truth`` files) as one JSON object;
``msroute data instance`` prints the instance of a pool of workers, given (``--workers``) or
sampled from the reliable ones (``--sample K --seed S``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from msroute._validation import quoted
from msroute.commands._args import int_arg, seed_arg
from msroute.errors import DataFormatError

__all__ = ["register"]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DEFAULT_FLAGGED = 10


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``data`` command and its actions to the ``msroute`` parser."""
    parser = subparsers.add_parser(
        "data",
        help="crowd data: statistics and MSR instances (paper Section 6.1)",
        description="Crowd-labelling data (by default the packaged TREC 2010 files) and the "
        "MSR instances built from it. Output is JSON on stdout.",
    )
    actions = parser.add_subparsers(dest="data_action", metavar="ACTION")
    actions.required = True

    stats = actions.add_parser(
        "stats",
        help="counts of workers, tasks, annotations and reliable workers",
        description="Print one JSON object with the counts of the joined data.",
    )
    _add_source(stats)
    stats.add_argument(
        "--min-annotations",
        type=int_arg,
        default=5,
        metavar="A",
        help="a worker is reliable with at least A annotations (default: 5)",
    )
    stats.set_defaults(func=_stats)

    inst = actions.add_parser(
        "instance",
        help="the instance (skills_base, costs) of a pool of workers",
        description="Print the instance of Section 6.1 for a pool of workers as JSON: "
        "skills_base (N, K), costs (K, 2) = (workload, expert flag), accuracy, annotations.",
    )
    _add_source(inst)
    pool = inst.add_mutually_exclusive_group(required=True)
    pool.add_argument(
        "--workers",
        nargs="+",
        metavar="ID",
        help="worker ids, in column order (spaces or commas between them)",
    )
    pool.add_argument(
        "--sample",
        type=int_arg,
        metavar="K",
        help="draw K workers uniformly without replacement from the reliable ones",
    )
    inst.add_argument("--dims", type=int_arg, default=3, metavar="N", help="skill dimensions N")
    inst.add_argument(
        "--flagged",
        type=int_arg,
        default=None,
        metavar="F",
        help="the F most accurate workers of the pool get the expert flag "
        "(default: 10, or K if the pool is smaller)",
    )
    inst.add_argument("--seed", type=seed_arg, default=0, help="seed of --sample (default: 0)")
    inst.add_argument(
        "--min-annotations",
        type=int_arg,
        default=5,
        metavar="A",
        help="reliability threshold of --sample (default: 5)",
    )
    inst.set_defaults(func=_instance)


def _add_source(parser: argparse.ArgumentParser) -> None:
    from msroute.datasets.crowd import DATASETS

    parser.add_argument(
        "--crowd", metavar="FILE", help="annotations, rows 'task worker response' (integers)"
    )
    parser.add_argument("--truth", metavar="FILE", help="gold labels, rows 'task gold'")
    parser.add_argument(
        "--dataset",
        choices=list(DATASETS),
        help="a packaged data set instead of --crowd/--truth (default: trec)",
    )


def _parse_workers(tokens: list[str]) -> list[int]:
    ids: list[int] = []
    for token in tokens:
        for part in token.split(","):
            part = part.strip()
            if not part:
                continue
            if _INTEGER.fullmatch(part) is None or len(part.lstrip("+-")) > 19:
                raise DataFormatError(
                    f"--workers: {quoted(part)} is not an integer worker id (at most 19 digits)"
                )
            ids.append(int(part))
    if not ids:
        raise DataFormatError("--workers: no worker id given")
    return ids


def _emit(obj: dict[str, Any]) -> None:
    """One JSON object, a key per line, each value (arrays included) on its key's line."""
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in obj.items()]
    sys.stdout.write("{\n" + ",\n".join(lines) + "\n}\n")


def _flagged(args: argparse.Namespace, n_experts: int) -> int:
    return min(_DEFAULT_FLAGGED, n_experts) if args.flagged is None else int(args.flagged)


def _stats(args: argparse.Namespace) -> int:
    from msroute.datasets import load_crowd

    data = load_crowd(args.crowd, args.truth, dataset=args.dataset)
    _emit(data.summary(args.min_annotations))
    return 0


def _instance(args: argparse.Namespace) -> int:
    from msroute.datasets import build_instance, load_crowd, sample_instance

    data = load_crowd(args.crowd, args.truth, dataset=args.dataset)
    if args.workers is not None:
        workers = _parse_workers(args.workers)
        inst = build_instance(data, workers, args.dims, _flagged(args, len(workers)))
        _emit(inst.to_dict())
        return 0
    inst = sample_instance(
        data,
        n_experts=args.sample,
        n_dims=args.dims,
        seed=args.seed,
        n_flagged=_flagged(args, args.sample),
        min_annotations=args.min_annotations,
    )
    _emit({**inst.to_dict(), "seed": args.seed, "min_annotations": args.min_annotations})
    return 0
