"""Argument types shared by the subcommands: messages quote bad input cut short."""

from __future__ import annotations

import argparse
import re

from msroute._validation import quoted

__all__ = ["int_arg"]

_INT = re.compile(r"[+-]?[0-9]{1,19}")


def int_arg(text: str) -> int:
    """An integer flag value: at most 19 digits (64 bits), quoted cut short when it is not."""
    if _INT.fullmatch(text.strip()) is None:
        what = "too many digits" if text.strip().lstrip("+-").isdigit() else "not an integer"
        raise argparse.ArgumentTypeError(f"{quoted(text)} is {what}")
    return int(text)
