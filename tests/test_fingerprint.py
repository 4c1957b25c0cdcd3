"""``msroute reproduce fig2 --quick`` gives today's numbers bit for bit.

The fixture ``tests/data/fig2_quick.csv`` is the CSV of that command (every float at full
``repr`` precision). A refactor must reproduce it exactly. A change that *means* to move the
paper's numbers regenerates it, from the repository root, with::

    PYTHONPATH=src python tests/test_fingerprint.py

(a fresh temporary directory, so no cached cell is reused) and says in its commit what moved and
why.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from msroute.cli import main

FIXTURE = Path(__file__).resolve().parent / "data" / "fig2_quick.csv"
ARGS = ["reproduce", "fig2", "--quick", "--no-plot", "--quiet"]


def test_fig2_quick_reproduces_the_fixture_bit_for_bit(tmp_path: Path) -> None:
    assert main([*ARGS, "--out", str(tmp_path)]) == 0
    got = (tmp_path / "fig2.csv").read_text().splitlines()
    want = FIXTURE.read_text().splitlines()
    assert got[0] == want[0], "the CSV columns changed"
    assert len(got) == len(want), f"{len(got)} rows, the fixture has {len(want)}"
    diff = [(i, w, g) for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g]
    assert not diff, (
        f"{len(diff)} of {len(want) - 1} rows differ from {FIXTURE.name}; first: row "
        f"{diff[0][0]}\n  fixture: {diff[0][1]}\n  now:     {diff[0][2]}\n"
        "(regenerate with `PYTHONPATH=src python tests/test_fingerprint.py` only in a change "
        "meant to move the numbers)"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        if main([*ARGS, "--out", tmp]) != 0:
            raise SystemExit("msroute reproduce fig2 --quick failed")
        shutil.copyfile(Path(tmp) / "fig2.csv", FIXTURE)
    print(f"wrote {FIXTURE}")
