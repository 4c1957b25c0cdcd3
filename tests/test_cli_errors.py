"""The command line never shows a traceback or floods the terminal: huge horizons are refused
with a memory estimate, quoted input is cut short, huge digit fields name file and line, and
Ctrl-C with --jobs stops without worker tracebacks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import msroute
from msroute.cli import main
from msroute.errors import ResourceError


def _fails_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert len(err) < 500, f"{len(err)} characters"
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--policy", "omd", "--horizon", str(10**10)],
        ["run", "--policy", "random", "--horizon", str(10**18), "--seed", "0", "1"],
        ["reproduce", "fig2", "--horizon", str(10**10), "--quiet", "--no-plot"],
    ],
)
def test_a_huge_horizon_is_refused_with_a_memory_estimate(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if argv[0] == "reproduce":
        argv = [*argv, "--out", str(tmp_path)]
    err = _fails_in_one_line(argv, capsys)
    assert "needs about" in err and "of memory, but" in err and "--horizon" in err
    assert not (tmp_path / "cells").exists()  # refused before any work


def test_simulate_refuses_trajectories_that_cannot_fit() -> None:
    p = msroute.Problem([[1.0], [0.0]], 1, msroute.Constraints(upper=[None]))
    env = msroute.StochasticEnv(np.full((1, 2), 0.5), kappa=2.0, seed=0)
    pol = msroute.make_policy("random", p, horizon=10, seed=0)
    with pytest.raises(ResourceError, match=r"T = 1000000000000000 needs about .* PiB of memory"):
        msroute.simulate({"r": pol}, env, msroute.ProblemBatch(p, 1), 10**15)


def test_a_huge_malformed_line_is_quoted_cut_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crowd = tmp_path / "c.txt"
    crowd.write_text("1 2 1\n" + "9 " * 3_000_000 + "\n")  # a 6 MB line
    (tmp_path / "t.txt").write_text("1 1\n")
    argv = ["data", "stats", "--crowd", str(crowd), "--truth", str(tmp_path / "t.txt")]
    err = _fails_in_one_line(argv, capsys)
    assert "line 2: expected 3 whitespace-separated integers" in err
    assert "(5999999 characters)" in err  # stripped


def test_a_field_of_a_million_digits_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crowd = tmp_path / "c.txt"
    crowd.write_text("1 2 1\n\n3 " + "7" * 1_000_000 + " 1\n")
    (tmp_path / "t.txt").write_text("1 1\n")
    argv = ["data", "stats", "--crowd", str(crowd), "--truth", str(tmp_path / "t.txt")]
    err = _fails_in_one_line(argv, capsys)
    assert f"{crowd}, line 3: worker" in err and "does not fit in 64 bits" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--policy", "omd", "--horizon", "9" * 5000],
        ["run", "--policy", "omd", "--seed", "x" * 5000],
        ["run", "--policy", "omd", "--param", "eta=" + "1" * 5000],
        ["reproduce", "fig2", "--seeds", "1" * 100_000],
        ["data", "instance", "--workers", "1" * 5000, "--dims", "3"],
    ],
)
def test_huge_flag_values_are_quoted_cut_short(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage error
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err) < 1500, f"{len(err)} characters"


def test_a_toml_integer_of_thousands_of_digits_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[fig2]\nseeds = " + "1" * 10_000 + "\n")
    argv = ["reproduce", "fig2", "--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]
    err = _fails_in_one_line(argv, capsys)
    assert f"{cfg}: not valid TOML" in err


@pytest.mark.parametrize(
    "text",
    [
        "[fig2]\nseeds = " + "[" * 5000 + "]" * 5000,  # the parser's RecursionError
        "[" + ".".join(["fig2"] * 5_000) + "]\n",  # parsed, then too deep to walk recursively
    ],
)
def test_a_toml_file_nested_thousands_deep_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    argv = ["reproduce", "fig2", "--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]
    err = _fails_in_one_line(argv, capsys)
    assert f"{cfg}: tables or arrays nested more than 32 levels deep" in err


def test_toml_nesting_is_read_to_its_documented_limit(tmp_path: Path) -> None:
    from msroute._toml import MAX_DEPTH, read_toml
    from msroute.errors import ConfigError

    path = tmp_path / "c.toml"
    for depth in (MAX_DEPTH, MAX_DEPTH + 1):
        arrays = "x = " + "[" * depth + "1" + "]" * depth  # x's array is level 1
        tables = "[" + ".".join(["t"] * depth) + "]\ny = 1"
        for text in (arrays, tables):
            path.write_text(text)
            if depth == MAX_DEPTH:
                assert read_toml(path, ConfigError, "config")
            else:
                with pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH} levels"):
                    read_toml(path, ConfigError, "config")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_with_jobs_stops_without_worker_tracebacks(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C does, while workers run."""
    env = {**os.environ, "PYTHONPATH": str(Path(msroute.__file__).parents[1])}
    cmd = [sys.executable, "-m", "msroute.cli", "reproduce", "fig2", "--quick"]
    cmd += ["--jobs", "2", "--out", str(tmp_path), "--no-plot", "--horizon", "20000"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, so the test can signal all of it
        # As from a terminal: SIGINT at its default even when this test runs as a background
        # job of a non-interactive shell, whose children inherit SIGINT ignored.
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 60
        # Wait until the worker processes exist (the parent has children).
        while time.monotonic() < deadline:
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            if kids.exists() and len(kids.read_text().split()) >= 2:
                break
            time.sleep(0.2)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            masks = [line for line in status.splitlines() if line.startswith("Sig")]
            pytest.fail(f"msroute still runs 60 s after SIGINT; its signal masks: {masks}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()  # reap it and close its pipes (no unclosed-file warnings later)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().endswith("msroute reproduce: interrupted"), err


# --- usage errors, serve and journal: one line, exit 2 --------------------------------------


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["run", "--policy", "omd", "--seed", "-1"], "a seed is >= 0"),
        (["run", "--policy", "omd", "--seed", "3", "-4"], "a seed is >= 0"),
        (["data", "instance", "--sample", "3", "--seed", "-2"], "a seed is >= 0"),
        (["serve", "--config", "s.toml", "--port", "70000"], "not a port (1..65535)"),
        (["serve", "--config", "s.toml", "--port", "0"], "not a port"),
        (["serve", "--config", "s.toml", "--port", "-5"], "not a port"),
        (["serve", "--config", "s.toml", "--port", "http"], "not an integer"),
        (["serve", "--config", "s.toml", "--bogus"], "unrecognized arguments"),
        (["journal", "export"], "required: path"),
    ],
)
def test_usage_errors_are_one_line(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _usage_error(argv, capsys)
    assert named in err and "(see 'msroute" in err


#: A serve command that wrongly starts would serve for ever: each such test has a time cap.
SERVE_CAP = pytest.mark.timeout(60)

SERVICE = """
[routers.chat]
policy = "omd"
m_draws = 2
cost_names = ["usd"]
[routers.chat.experts]
big = [0.03]
small = [0.02]
[routers.chat.constraints]
upper = { usd = %s }
"""


def _serve(tmp_path: Path, config: str | bytes, *extra: str) -> list[str]:
    path = tmp_path / "service.toml"
    if isinstance(config, bytes):
        path.write_bytes(config)
    else:
        path.write_text(config)
    return ["serve", "--config", str(path), "--no-auth", *extra]


@SERVE_CAP
def test_serve_with_an_infeasible_budget_names_the_router_and_binds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from _server import free_port

    port = free_port()
    argv = _serve(tmp_path, SERVICE % "0.001", "--data-dir", str(tmp_path), "--port", str(port))
    err = _fails_in_one_line(argv, capsys)
    assert "router chat:" in err and "budget usd <= 0.001" in err and "infeasible" in err
    assert not (tmp_path / "chat.db").exists()
    with socket.socket() as sock:  # the port was given back
        sock.bind(("127.0.0.1", port))


@SERVE_CAP
def test_serve_on_a_port_in_use_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = _serve(tmp_path, SERVICE % "0.05", "--data-dir", str(tmp_path), "--port", str(port))
        err = _fails_in_one_line(argv, capsys)
    assert f"--port {port}: cannot listen there" in err
    assert not (tmp_path / "chat.db").exists()  # refused before any journal was opened


@SERVE_CAP
def test_serve_with_a_data_dir_that_cannot_be_created_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = _serve(tmp_path, SERVICE % "0.05", "--data-dir", str(blocker / "journals"))
    err = _fails_in_one_line(argv, capsys)
    assert "router chat:" in err and "cannot create its directory" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
@SERVE_CAP
def test_serve_with_a_read_only_data_dir_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "ro"
    data.mkdir()
    data.chmod(0o555)
    try:
        err = _fails_in_one_line(
            _serve(tmp_path, SERVICE % "0.05", "--data-dir", str(data)), capsys
        )
    finally:
        data.chmod(0o755)
    assert "router chat:" in err and "not writable" in err


@SERVE_CAP
def test_serve_with_a_binary_config_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails_in_one_line(_serve(tmp_path, bytes(range(256))), capsys)
    assert "not a TOML text file (byte 0x80 at offset 128 is not UTF-8)" in err


@SERVE_CAP
@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("m_draws = " + "9" * 5000, "not valid TOML"),  # over Python's limit on integer digits
        ("\ufeff" + "[service]\nport = 0\n", "port"),  # a BOM is the text's start
        ("x = " + "[" * 5000 + "]" * 5000, "nested more than 32 levels deep"),  # RecursionError
        ("x = " + "{a = " * 5000 + "1" + "}" * 5000, "nested more than 32 levels deep"),
    ],
)
def test_serve_config_text_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: str
) -> None:
    err = _fails_in_one_line(_serve(tmp_path, text.encode()), capsys)
    assert named in err and "Invalid statement" not in err


@SERVE_CAP
def test_serve_with_a_non_string_context_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = (SERVICE % "0.05").replace(
        'cost_names = ["usd"]', 'cost_names = ["usd"]\ncontexts = [7]'
    )
    err = _fails_in_one_line(_serve(tmp_path, config), capsys)
    assert "routers.chat: contexts" in err


def test_a_surrogate_in_an_id_is_quoted_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # What the shell hands Python for bytes that are not UTF-8 (os.fsdecode's surrogateescape).
    err = _fails_in_one_line(["data", "instance", "--workers", "12\udcff", "--dims", "3"], capsys)
    assert "not an integer worker id" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["bench", "trec-sharp", "--m-draws", "3"], "--m-draws applies to --skills/--costs"),
        (["bench", "trec-sharp", "--budget-cost", "x"], "scenario 'trec-sharp' sets its own"),
        # one budget twice ran, and was reported, twice (exit 0)
        (["bench", "trec-sharp", "--budgets", "1,2,1.0"], "levels '1' and '1.0' are the same"),
        (["bench", "trec-sharp", "--budgets", "none,1,none"], "levels 'none' and 'none' are"),
        (["bench", "llmrouter", "--budgets", "1e308"], "'1e308': 1e+308 is outside the range"),
    ],
)
def test_bench_flags_a_named_scenario_ignores_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    err = _fails_in_one_line([*argv, "--quiet", "--out", str(tmp_path / "o")], capsys)
    assert named in err
    assert not (tmp_path / "o").exists()


def test_an_empty_list_flag_is_refused_not_read_as_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag in ("--budgets", "--policies"):
        argv = ["bench", "trec-sharp", flag, ",", "--quick", "--quiet", "--out", str(tmp_path)]
        assert "no name in ','" in _usage_error(argv, capsys)


def test_repeated_names_and_unknown_shown_policies_are_refused_before_any_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for table, named in (
        ('[fig2]\nenvs = ["stochastic", "stochastic"]\n', "['stochastic'] given more than once"),
        ('[fig3]\nshow_policies = ["nope"]\n', "show_policies ['nope'] are not among"),
    ):
        config = tmp_path / "c.toml"
        config.write_text(table)
        figure = "fig2" if "fig2" in table else "fig3"
        argv = ["reproduce", figure, "--config", str(config), "--out", str(tmp_path / "o")]
        err = _fails_in_one_line([*argv, "--quiet"], capsys)
        assert named in err
        assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
