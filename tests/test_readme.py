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


def test_routing_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The "Routing live traffic" example, as written (its journal in a temporary directory)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    (example,) = [b for b in blocks if "msroute.Router.from_config" in b]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(example, namespace)
    decisions, *_ = capsys.readouterr().out.split(maxsplit=1)
    assert decisions == "2000"
    reopened = namespace["router"]
    state = reopened.state()  # type: ignore[attr-defined]
    assert state["decisions"] == 2000 and state["avg_cost"]["usd"] <= 0.03
    assert state["q"]["big"] > state["q"]["small"]  # it learned who is good, within budget
    reopened.close()  # type: ignore[attr-defined]
