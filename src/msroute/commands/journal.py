"""``msroute journal``: verify, export and evaluate a router's journal.

``msroute journal replay PATH`` rebuilds the router from the journal alone (every event from
the first, no snapshot) and re-derives every logged decision: exit 0 when all agree, exit 1 and
the first mismatch otherwise. ``msroute journal export PATH --format jsonl|csv`` writes the
events to stdout (or ``--out``). ``msroute journal evaluate PATH --q FILE.json`` estimates what
a fixed candidate distribution would have earned and spent (off-policy evaluation).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, TextIO

__all__ = ["register"]

#: The columns of ``export --format csv`` (the event's other fields go to ``payload``).
CSV_COLUMNS = ("seq", "kind", "ref", "time", "payload")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``journal`` command and its actions."""
    parser = subparsers.add_parser(
        "journal",
        help="a router's journal: verify by replay, export, off-policy evaluation",
        description="Work with the SQLite journal of an msroute Router.",
    )
    actions = parser.add_subparsers(dest="journal_action", metavar="ACTION")
    actions.required = True
    replay = actions.add_parser(
        "replay",
        help="rebuild the router from the journal and verify every logged decision",
        description="Replay every event from the start; exit 1 with the first decision that "
        "re-derives differently.",
    )
    replay.add_argument("path", type=Path)
    replay.set_defaults(func=_replay)
    export = actions.add_parser(
        "export", help="the events as JSON lines or CSV", description="Write every event."
    )
    export.add_argument("path", type=Path)
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    export.add_argument("--out", type=Path, help="output file (default: stdout)")
    export.set_defaults(func=_export)
    evaluate = actions.add_parser(
        "evaluate",
        help="off-policy estimate of a candidate distribution's reward and cost",
        description="IPS and self-normalized IPS estimates, with confidence intervals and the "
        "effective sample size, of a fixed distribution q' over the experts.",
    )
    evaluate.add_argument("path", type=Path)
    evaluate.add_argument(
        "--q", type=Path, required=True, help="JSON object: expert id -> probability"
    )
    evaluate.add_argument("--level", type=float, default=0.95, help="CI level (default 0.95)")
    evaluate.set_defaults(func=_evaluate)


def _replay(args: argparse.Namespace) -> int:
    from msroute.errors import JournalError
    from msroute.router import Router

    try:
        router = Router.open(args.path, use_snapshot=False)
    except JournalError as exc:
        print(f"msroute journal replay: MISMATCH: {exc}", file=sys.stderr)
        return 1
    with router:
        st = router.state()
    print(
        f"{args.path}: {st['seq']} events replayed, {st['decisions']} decisions verified; "
        f"{st['feedback_applied']} feedbacks applied, {st['pending']} pending, "
        f"{st['expired']} expired"
    )
    return 0


def _events(path: Path) -> list[dict[str, Any]]:
    from msroute.router.journal import Journal

    journal = Journal(path, create=False)
    try:
        return [
            {"seq": s, "kind": k, "ref": r, "time": t, **payload}
            for s, k, r, t, payload, _ in journal.events()
        ]
    finally:
        journal.close()


def _export(args: argparse.Namespace) -> int:
    events = _events(args.path)
    out: TextIO = sys.stdout if args.out is None else args.out.open("w", newline="")
    try:
        if args.format == "jsonl":
            for e in events:
                out.write(json.dumps(e) + "\n")
        else:
            writer = csv.writer(out)
            writer.writerow(CSV_COLUMNS)
            for e in events:
                rest = {k: v for k, v in e.items() if k not in CSV_COLUMNS}
                writer.writerow([e["seq"], e["kind"], e["ref"], repr(e["time"]), json.dumps(rest)])
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from msroute.errors import InvalidValueError
    from msroute.router.ope import evaluate

    try:
        q = json.loads(args.q.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidValueError(f"--q {args.q}: not JSON: {exc}") from exc
    result = evaluate(args.path, q, level=args.level)
    print(json.dumps(result.to_dict(), indent=2))
    return 0
