"""The ``msroute`` command line: a thin dispatcher over the subcommand modules.

Each subcommand lives in ``msroute.commands.<name>`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` to a handler ``(args) -> int``. Heavy imports happen
inside the handlers, so ``msroute --help`` stays fast. Bad input never shows a traceback: a
usage error (a flag's value out of range, an unknown option) and a library error (an infeasible
budget, a file that is not what it should be) are each one line on stderr and exit 2; a bug
(any other exception) keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn, TextIO

from msroute import _version
from msroute.errors import MSRouteError, MSRouteWarning

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = ("reproduce", "run", "bench", "data", "journal", "serve", "gateway")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit 2, as argparse's do)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and documentation)."""
    parser = _Parser(
        prog="msroute",
        description="Multinomial Subset Routing: learn whom to route each query to, online, "
        "under long-term constraints.",
    )
    parser.add_argument("--version", action="version", version=f"msroute {_version.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"msroute.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``msroute`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warning
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        code: int = args.func(args)
    except BrokenPipeError:  # the reader of stdout went away (``| head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (MSRouteError, OSError) as exc:  # a bug (any other error) keeps its traceback
        print(f"msroute {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print(
            f"msroute {args.command}: error: out of memory; use a smaller horizon or fewer "
            "seeds or runs",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"msroute {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


_default_showwarning = warnings.showwarning


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """msroute's own warnings as one line (``msroute: warning: ...``), others as usual."""
    if issubclass(category, MSRouteWarning):
        print(f"msroute: warning: {message}", file=file or sys.stderr)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
