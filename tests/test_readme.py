"""The README's examples run as written (the library example with a shorter horizon), and the
README stays a front door: short, its links resolving, its test command the one CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_library_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    example = python_blocks(README)[0]
    assert "T, R = 10_000, 4" in example
    exec(example.replace("T, R = 10_000, 4", "T, R = 300, 4"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["omd", "ts-bwk"]


def test_quickstart_uses_the_ci_test_command() -> None:
    text = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q -n 2" in text and "python -m pytest -q -n 2" in ci
    assert 'pip install -e ".[test,dev]"' in text and 'pip install --quiet -e ".[test,dev]"' in ci
    assert "msroute reproduce fig2 --out results" in text


def test_readme_is_a_front_door() -> None:
    """At most about 300 lines; the details live on the documentation pages it links to."""
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    targets = re.findall(r"\]\((docs/[^)#\s]+)", text)
    assert len(targets) >= 10
    missing = [t for t in targets if not (ROOT / t).is_file()]
    assert not missing, f"README links to missing files: {missing}"


@pytest.mark.parametrize("page", ["README.md", "docs/router.md"])
def test_routing_example_runs(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The "Routing live traffic" example, as written (its journal in a temporary directory)."""
    (example,) = [b for b in python_blocks(ROOT / page) if "msroute.Router.from_config" in b]
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
