"""The gateway page's examples (docs/gateway.md) run as written: the example config is the
page's; the OpenAI client and LiteLLM blocks run against a gateway and a stub upstream on
127.0.0.1 (their base URLs pointed at the stub)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from _server import ServerProcess, free_port
from _service import TOKEN
from _upstream import StubUpstream
from msroute.gateway import load_gateway_config

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "gateway.md"
EXAMPLE = ROOT / "examples" / "gateway.toml"

pytestmark = pytest.mark.timeout(180)


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_example_config_is_the_pages_and_valid(tmp_path: Path) -> None:
    (toml,) = blocks("toml")
    assert toml in EXAMPLE.read_text()
    config = load_gateway_config(EXAMPLE, data_dir=tmp_path, environ={"OPENAI_API_KEY": "sk-x"})
    mini = config.routers["chat"].upstreams["mini"].prices  # from LiteLLM's shipped map
    assert mini.input_usd_per_mtok > 0 and mini.output_usd_per_mtok > mini.input_usd_per_mtok
    assert "--config examples/gateway.toml" in PAGE.read_text()


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # LiteLLM's own event loops (see
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # test_litellm)
def test_the_pages_python_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client_block, litellm_block = blocks("python")
    with StubUpstream(free_port()) as stub:
        text = re.sub(r'base_url = "[^"]*"', f'base_url = "{stub.base_url}"', EXAMPLE.read_text())
        config = tmp_path / "gateway.toml"
        config.write_text(text)
        server = ServerProcess(
            config,
            tmp_path / "data",
            token=TOKEN,
            command="gateway",
            env={"OPENAI_API_KEY": "sk-test"},
            log=tmp_path / "gateway.log",
        )
        with server:
            monkeypatch.setenv("MSROUTE_URL", server.url)
            monkeypatch.setenv("MSROUTE_TOKEN", TOKEN)
            exec(client_block, {})
            team, _, content = capsys.readouterr().out.strip().partition(" ")
            assert team in ("frontier", "mini", "local") and content.startswith("answer of")
        monkeypatch.setenv("UPSTREAM_URL", stub.base_url)
        namespace: dict[str, object] = {}
        exec(litellm_block, namespace)
        assert capsys.readouterr().out.startswith("answer of gpt-4o")
        router = namespace["router"]
        deadline = time.monotonic() + 30  # the callback books the cost as LiteLLM logs the call
        while time.monotonic() < deadline:
            kinds = [r["kind"] for r in router.export_rows()]  # type: ignore[attr-defined]
            if "cost" in kinds:
                break
            time.sleep(0.05)
        assert kinds[0] == "decision" and "cost" in kinds and "feedback" in kinds
