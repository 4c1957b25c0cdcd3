"""Argument types shared by the subcommands: messages quote bad input cut short."""

from __future__ import annotations

import argparse
import re

from msroute._validation import quoted

__all__ = ["int_arg", "port_arg", "seed_arg"]

_INT = re.compile(r"[+-]?[0-9]{1,19}")


def int_arg(text: str) -> int:
    """An integer flag value: at most 19 digits (64 bits), quoted cut short when it is not."""
    if _INT.fullmatch(text.strip()) is None:
        what = "too many digits" if text.strip().lstrip("+-").isdigit() else "not an integer"
        raise argparse.ArgumentTypeError(f"{quoted(text)} is {what}")
    return int(text)


def seed_arg(text: str) -> int:
    """A seed: an integer from 0 to 2**63 - 1 (numpy's seeds are non-negative)."""
    value = int_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is negative; a seed is >= 0")
    return value


def port_arg(text: str) -> int:
    """A TCP port to listen on: an integer from 1 to 65535."""
    value = int_arg(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a port (1..65535)")
    return value
