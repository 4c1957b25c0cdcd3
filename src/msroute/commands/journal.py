"""``msroute journal``: verify, export and evaluate a router's journal.

``msroute journal replay PATH`` rebuilds the router from the journal alone (every event from
the first, no snapshot) and re-derives every logged decision: exit 0 when all agree, exit 1 and
the first mismatch otherwise (a journal that cannot be read at all, e.g. one a live router holds,
is an error, exit 2). ``msroute journal export PATH --format jsonl|csv`` writes the events as
rows in the HTTP API's names (``msroute.router.rows``; CSV: one column per field, costs and
propensities flattened by name) to stdout (or ``--out``); ``msroute journal schema`` prints
the rows' JSON Schema. ``msroute journal evaluate PATH --q FILE.json`` estimates what a fixed
candidate distribution would have earned and spent (off-policy evaluation), as JSON (an
estimate that does not exist, such as a one-sample interval, is ``null``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from msroute._spreadsheet import text_cell

__all__ = ["register"]

#: The first columns of ``export --format csv``; the others follow in order of first use.
CSV_FIRST = ("seq", "kind", "time", "decision_id", "expert_id")


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
    schema = actions.add_parser(
        "schema",
        help="the JSON Schema of the rows of export",
        description="Print the JSON Schema (draft 2020-12) of one row of 'journal export'.",
    )
    schema.set_defaults(func=_schema)
    evaluate = actions.add_parser(
        "evaluate",
        help="off-policy estimate of a candidate distribution's reward and cost",
        description="IPS and self-normalized IPS estimates, with a betting confidence interval "
        "and the effective sample size, of a fixed distribution q' over the experts.",
    )
    evaluate.add_argument("path", type=Path)
    evaluate.add_argument(
        "--q", type=Path, required=True, help="JSON object: expert id -> probability"
    )
    evaluate.add_argument("--level", type=float, default=0.95, help="CI level (default 0.95)")
    evaluate.add_argument(
        "--min-ess",
        type=float,
        default=None,
        help="the smallest effective sample size an estimate is given for (default 100; "
        "0 gives one whatever the log's support)",
    )
    evaluate.add_argument(
        "--reward-range",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        default=None,
        help="bounds every reward lies within, for the intervals (default: the log's smallest "
        "and largest reward)",
    )
    evaluate.set_defaults(func=_evaluate)


def _replay(args: argparse.Namespace) -> int:
    from msroute.errors import JournalError
    from msroute.router import Router
    from msroute.router.journal import Journal

    # Opening it on its own first tells a journal that cannot be read (missing, damaged, held
    # by a live router) from one whose replay disagrees with what it logged.
    Journal(args.path, create=False).close()
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


def _rows(path: Path) -> list[dict[str, Any]]:
    from msroute.router.journal import Journal
    from msroute.router.rows import export_rows

    journal = Journal(path, create=False)
    try:
        config = json.loads(journal.meta("config"))
        return list(export_rows(journal.events(), config))
    finally:
        journal.close()


def _export(args: argparse.Namespace) -> int:
    from msroute._atomic import atomic_path
    from msroute.errors import InvalidValueError

    if args.out is not None and _same_file(args.out, args.path):
        raise InvalidValueError(f"--out {args.out}: is the journal itself; choose another file")
    rows = _rows(args.path)
    if args.out is None:
        _write_rows(rows, args.format, sys.stdout)
        return 0
    with atomic_path(args.out) as tmp, tmp.open("w", newline="") as out:
        _write_rows(rows, args.format, out)
    return 0


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (the journal's own files included: its tail, its WAL)."""
    try:
        if a.exists() and b.exists() and a.samefile(b):
            return True
    except OSError:
        return False
    target, journal = a.resolve(), b.resolve()
    suffixes = ("", "-wal", "-shm", "-journal", "-tail", "-tail-old")
    own = {journal.name + suffix for suffix in suffixes}
    return target.parent == journal.parent and target.name in own


def _write_rows(rows: list[dict[str, Any]], form: str, out: TextIO) -> None:
    from msroute.router.rows import flatten_row

    if form == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        return
    flat = [flatten_row(row) for row in rows]
    columns = dict.fromkeys(CSV_FIRST)
    for row in flat:
        columns.update(dict.fromkeys(row))
    writer = csv.writer(out)
    writer.writerow(text_cell(c) for c in columns)
    for row in flat:
        writer.writerow(_cell(row.get(c)) for c in columns)


def _cell(value: Any) -> str:
    """A CSV cell: empty for None, ``true``/``false``, numbers at full precision, text that
    begins like a spreadsheet formula (an expert id ``-2+3``) behind a ``'``
    (``msroute._spreadsheet``)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return text_cell(value)
    return str(value)


def _schema(args: argparse.Namespace) -> int:
    from msroute.router.rows import row_schema

    print(json.dumps(row_schema(), indent=2))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from msroute._validation import quoted, unique_keys
    from msroute.errors import InvalidValueError
    from msroute.router.ope import evaluate

    try:
        raw = args.q.read_bytes()
    except OSError as exc:
        raise InvalidValueError(f"--q {args.q}: cannot read it: {exc.strerror or exc}") from exc
    try:  # ValueError: JSON's errors, a key given twice, an integer of thousands of digits
        q = json.loads(raw.decode(), object_pairs_hook=unique_keys)
    except (ValueError, RecursionError) as exc:
        raise InvalidValueError(f"--q {args.q}: not JSON: {quoted(str(exc), 200)}") from exc
    if not isinstance(q, dict):
        raise InvalidValueError(
            f"--q {args.q}: must be a JSON object of expert id -> probability, "
            f"got {type(q).__name__}"
        )
    extra: dict[str, Any] = {} if args.min_ess is None else {"min_ess": args.min_ess}
    if args.reward_range is not None:
        extra["reward_range"] = tuple(args.reward_range)
    result = evaluate(args.path, q, level=args.level, **extra)
    print(json.dumps(_finite_or_none(result.to_dict()), indent=2, allow_nan=False))
    return 0


def _finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: JSON has no NaN or Infinity (an
    interval from one sample, a self-normalized estimate without weight, does not exist)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_none(v) for v in value]
    return value
