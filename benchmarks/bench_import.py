"""Start-up cost: the time of `import msroute.errors`, `import msroute` and `msroute --help`.

Each command runs in a fresh interpreter, ``--reps`` times, interleaved with the other commands
and source trees so that load on the machine hits them alike; the table reports the median and
the fastest wall time of each, and what was loaded (numpy, scipy, matplotlib, rich).
``python -c pass`` and ``import numpy`` are the floors. ``--src`` compares source trees side by
side (e.g. ``--src src /path/to/old/src``: the first is this tree).

Usage: ``python benchmarks/bench_import.py [--reps 15] [--src DIR ...]``. Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "scipy", "matplotlib", "rich")
COMMANDS = {
    "python -c pass": "pass",
    "import numpy": "import numpy",
    "import msroute.errors": "import msroute.errors",
    "import msroute": "import msroute",
    "msroute --help": (
        "import contextlib, io, sys\nsys.argv = ['msroute', '--help']\n"
        "from msroute.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()"
    ),
}
PROBE = "\nimport json, sys\nprint(json.dumps(sorted({m.partition('.')[0] for m in sys.modules})))"


def run(code: str, src: Path) -> tuple[float, set[str]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    elapsed = time.perf_counter() - t0
    out = subprocess.run(
        [sys.executable, "-c", code + PROBE], env=env, check=True, capture_output=True, text=True
    ).stdout
    return elapsed, set(json.loads(out.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--src", type=Path, nargs="+", default=[ROOT / "src"])
    args = parser.parse_args()
    times: dict[tuple[str, Path], list[float]] = {}
    loaded: dict[tuple[str, Path], set[str]] = {}
    for _ in range(args.reps):
        for src in args.src:
            for label, code in COMMANDS.items():
                elapsed, mods = run(code, src.resolve())
                times.setdefault((label, src), []).append(elapsed)
                loaded[(label, src)] = mods
    print(f"Python {platform.python_version()}, {os.cpu_count()} cores, {args.reps} runs each\n")
    print("| command | source | median (s) | fastest (s) | loads |")
    print("|---|---|---|---|---|")
    for label in COMMANDS:
        for src in args.src:
            t = times[(label, src)]
            heavy = ", ".join(h for h in HEAVY if h in loaded[(label, src)]) or "-"
            print(f"| `{label}` | {src} | {statistics.median(t):.3f} | {min(t):.3f} | {heavy} |")


if __name__ == "__main__":
    main()
