"""A gateway config over the stub upstream, for the gateway's tests, docs and benchmark."""

from __future__ import annotations

from pathlib import Path

from _server import ServerProcess
from _service import TOKEN

#: The upstream key the stub receives (a test checks it is this, never the gateway's token).
UPSTREAM_KEY = "sk-upstream-test"
KEY_ENV = "STUB_UPSTREAM_KEY"


def expert(base_url: str, behaviour: str, inp: float, out: float, **extra: object) -> str:
    """One ``[routers.R.experts.ID]`` body: the stub told how to behave by its model name."""
    lines = [
        f'base_url = "{base_url}"',
        f'model = "stub?{behaviour}"',
        f'api_key_env = "{KEY_ENV}"',
        f"input_usd_per_mtok = {inp}",
        f"output_usd_per_mtok = {out}",
    ]
    lines += [f"{k} = {v}" for k, v in extra.items()]
    return "\n".join(lines)


def write_config(path: Path, base_url: str) -> Path:
    """Routers: ``chat`` (one member per query; experts that answer, fail, hang, report no
    usage), ``team`` (two members; learns from Langfuse scores named "quality" only), ``ctx``
    (routes by context), ``dear`` (every call bills twice the configured tokens, under a bound
    on dollars per query) and ``daily`` (a daily budget)."""
    u = base_url
    text = f"""
[routers.chat]
policy = "omd"
m_draws = 1
seed = 1
expected_tokens = {{ input = 100, output = 50 }}
[routers.chat.experts.a]
{expert(u, "prompt=100&completion=50&cached=40", 2.0, 8.0, cached_input_usd_per_mtok=0.5)}
[routers.chat.experts.b]
{expert(u, "prompt=300&completion=10", 0.5, 1.5)}
[routers.chat.experts.slow]
{expert(u, "hang=1", 1.0, 1.0, timeout_s=0.5)}
[routers.chat.experts.broken]
{expert(u, "status=500&error_usage=1&prompt=7&completion=0", 1.0, 1.0)}
[routers.chat.experts.nousage]
{expert(u, "no_usage=1", 3.0, 3.0)}

[routers.team]
policy = "omd"
m_draws = 2
seed = 2
score_name = "quality"
expected_tokens = {{ input = 100, output = 50 }}
[routers.team.experts.x]
{expert(u, "prompt=10&completion=5&chunks=2", 1.0, 1.0)}
[routers.team.experts.y]
{expert(u, "prompt=20&completion=5&chunks=3", 1.0, 1.0)}

[routers.ctx]
policy = "omd"
m_draws = 1
contexts = ["code", "chat"]
expected_tokens = {{ input = 100, output = 50 }}
[routers.ctx.experts.a]
{expert(u, "prompt=10&completion=5", 1.0, 1.0)}
[routers.ctx.experts.b]
{expert(u, "prompt=10&completion=5", 2.0, 2.0)}

[routers.dear]
policy = "omd"
m_draws = 1
seed = 3
expected_tokens = {{ input = 100, output = 20 }}
[routers.dear.constraints]
upper = {{ usd = 0.0006 }}
[routers.dear.experts.cheap]
{expert(u, "prompt=200&completion=40", 1.0, 1.0)}
[routers.dear.experts.pricey]
{expert(u, "prompt=200&completion=40", 10.0, 10.0)}

[routers.daily]
policy = "omd"
m_draws = 1
expected_tokens = {{ input = 100, output = 20 }}
usd_per_day = 5.0
[routers.daily.experts.cheap]
{expert(u, "prompt=100&completion=20", 1.0, 1.0)}
[routers.daily.experts.pricey]
{expert(u, "prompt=100&completion=20", 10.0, 10.0)}
"""
    path.write_text(text)
    return path


def gateway_process(config: Path, data_dir: Path, log: Path | None = None) -> ServerProcess:
    """``msroute gateway`` on ``config`` (experts of the stub upstream, whose key it is given),
    with the test token; a context manager that starts and stops it."""
    return ServerProcess(
        config, data_dir, token=TOKEN, command="gateway", env={KEY_ENV: UPSTREAM_KEY}, log=log
    )
