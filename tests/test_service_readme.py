"""The serving page's example (docs/serving.md): the example config is valid; the Python client
runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _server import ServerProcess
from _service import TOKEN
from msroute.service import load_service_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "serve.toml"

pytestmark = pytest.mark.timeout(120)


def serving_section() -> str:
    return (ROOT / "docs" / "serving.md").read_text()


def test_example_config_is_valid(tmp_path: Path) -> None:
    cfg = load_service_config(EXAMPLE, data_dir=tmp_path)
    assert list(cfg.routers) == ["chat"]
    assert cfg.routers["chat"]["journal"] == str(tmp_path.resolve() / "chat.db")
    assert "--config examples/serve.toml" in serving_section()


def test_python_client_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", serving_section(), flags=re.S)
        if "urllib" in b
    ]
    with ServerProcess(EXAMPLE, tmp_path, token=TOKEN, log=tmp_path / "server.log") as server:
        monkeypatch.setenv("MSROUTE_URL", server.url)
        monkeypatch.setenv("MSROUTE_TOKEN", TOKEN)
        exec(block, {})
    team, status = capsys.readouterr().out.strip().rsplit(" ", 1)
    assert status == "applied"
    assert team.startswith("[")
