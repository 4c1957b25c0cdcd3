"""The printed summary table keeps every value whole when written to a file or a pipe."""

from __future__ import annotations

import pytest

from msroute.experiments.output import print_table

COLUMNS = (
    "M",
    "budget",
    "policy",
    "reward",
    "avg usd",
    "% within",
    "OPT^ctx",
    "OPT",
    "best single",
)


def test_a_table_wider_than_80_columns_keeps_its_values_whole_off_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    rows = [(1, "0.000244", "omd", 0.5975, "0.000668", "100", 0.5868, 0.5868, 0.567)]
    print_table("bench", COLUMNS, rows)
    out = capsys.readouterr().out
    assert "…" not in out
    for cell in ("0.000244", "0.000668", "0.598", "best single"):
        assert cell in out
    assert max(len(line) for line in out.splitlines()) > 80  # the width it needs, not 80
