"""Reading an outcome table's header as the number of models grows.

Run: ``python benchmarks/bench_outcome_header.py [--sizes 1000 5000 20000]``.

Each size is a table of K models (a score and a ``usd`` column each) and two prompts, read by
``msroute.datasets.outcomes.read_outcomes``; the time per column should stay flat (linear
work), where a check of each column against every earlier one makes it grow with K.
"""

from __future__ import annotations

import argparse
import time

from msroute.datasets.outcomes import read_outcomes


def table(k: int) -> str:
    """A table of ``k`` models and two prompts."""
    header = ["prompt_id"] + [f"m{i}" for i in range(k)] + [f"m{i}|usd" for i in range(k)]
    row = ["1"] * k + ["0.5"] * k
    return "\n".join([",".join(header), ",".join(["p1", *row]), ",".join(["p2", *row])]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000])
    args = ap.parse_args()
    print("| models K | seconds | microseconds per column |")
    print("|---:|---:|---:|")
    for k in args.sizes:
        text = table(k)
        tic = time.perf_counter()
        read_outcomes(text, "wide.csv")
        dt = time.perf_counter() - tic
        print(f"| {k} | {dt:.3f} | {1e6 * dt / (2 * k + 1):.2f} |")


if __name__ == "__main__":
    main()
