"""The README's library example runs as written (with a shorter horizon)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_library_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = blocks[0]
    assert "T, R = 10_000, 4" in example
    exec(example.replace("T, R = 10_000, 4", "T, R = 300, 4"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["omd", "ts-bwk"]


def test_quickstart_uses_the_ci_test_command() -> None:
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q -n 2" in text and "python -m pytest -q -n 2" in ci
    assert 'pip install -e ".[test,dev]"' in text and 'pip install --quiet -e ".[test,dev]"' in ci
