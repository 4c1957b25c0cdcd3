"""``msroute serve`` start-up rules and the service config (``tests/test_imports.py`` checks that
``import msroute`` loads none of the service stack)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _service import ROUTER, write_config
from msroute.cli import main
from msroute.service import ServiceConfig, load_service_config
from msroute.service.auth import check_start, is_loopback


@pytest.mark.parametrize(
    ("host", "token", "no_auth", "message"),
    [
        ("127.0.0.1", None, False, "MSROUTE_TOKEN"),
        ("127.0.0.1", "  ", False, "MSROUTE_TOKEN"),
        ("127.0.0.1", "two words", False, "whitespace"),
        ("0.0.0.0", None, True, "loopback"),
        ("192.168.1.5", "t", True, "loopback"),
        ("example.com", None, True, "loopback"),
    ],
)
def test_unsafe_starts_are_refused(
    host: str, token: str | None, no_auth: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_start(host, token, no_auth)


def test_safe_starts() -> None:
    assert check_start("127.0.0.1", "s3cret", False) == "s3cret"
    assert check_start("0.0.0.0", "s3cret", False) == "s3cret"
    assert check_start("::1", None, True) is None
    assert check_start("localhost", "ignored", True) is None
    assert [is_loopback(h) for h in ("127.0.0.2", "[::1]", "10.0.0.1", "::")] == [
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "MSROUTE_TOKEN"),
        (["--no-auth", "--host", "0.0.0.0"], {}, "loopback"),
        (["--no-auth", "--host", "0.0.0.0"], {"MSROUTE_TOKEN": "t"}, "loopback"),
    ],
)
def test_cli_refuses_to_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    monkeypatch.delenv("MSROUTE_TOKEN", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = write_config(tmp_path / "s.toml", {"llm": ROUTER})
    code = main(["serve", "--config", str(config), "--data-dir", str(tmp_path), *argv])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "llm.db").exists()


def test_config_journal_defaults_to_data_dir(tmp_path: Path) -> None:
    other = dict(ROUTER, journal="sub/other.db")
    abs_journal = str(tmp_path / "elsewhere" / "x.db")
    path = write_config(
        tmp_path / "s.toml",
        {"a": ROUTER, "b": other, "c": dict(ROUTER, journal=abs_journal)},
        {"max_body_bytes": 1000},
    )
    cfg = load_service_config(path, data_dir=tmp_path / "data")
    assert cfg.routers["a"]["journal"] == str((tmp_path / "data" / "a.db").resolve())
    assert cfg.routers["b"]["journal"] == str((tmp_path / "data" / "sub" / "other.db").resolve())
    assert cfg.routers["c"]["journal"] == abs_journal
    assert cfg.max_body_bytes == 1000 and cfg.max_rows == 10000 and cfg.read_timeout_s == 10.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[routers]\n", "no router"),
        ("[server]\nport = 1\n", "server"),
        ("[service]\nmax_body = 1\n[routers.a]\npolicy='omd'\n", "max_body"),
        ("[service]\nmax_body_bytes = 0\n", "max_body_bytes"),
        ("[service]\nread_timeout_s = 0\n[routers.a]\npolicy='omd'\n", "read_timeout_s == 0"),
        ("[service]\nread_timeout_s = nan\n[routers.a]\npolicy='omd'\n", "read_timeout_s"),
        ("[service]\nread_timeout_s = 1e9\n[routers.a]\npolicy='omd'\n", "read_timeout_s"),
        ("[service]\nread_timeout_s = '10'\n[routers.a]\npolicy='omd'\n", "number of seconds"),
        ("[service]\nread_timeout_s = true\n[routers.a]\npolicy='omd'\n", "number of seconds"),
        ("[routers.'a/b']\npolicy = 'omd'\n", "a/b"),
        ("[routers.a]\npolicy = 'omd'\nm_draws = 0\n", "routers.a"),
        ("routers = 3\n", "routers"),
        ("[routers.a\n", "not valid TOML"),
    ],
)
def test_bad_configs_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises((ValueError, TypeError), match=message) as info:
        load_service_config(path, data_dir=tmp_path)
    assert str(path) in str(info.value)


def test_two_routers_cannot_share_a_journal(tmp_path: Path) -> None:
    routers = {"a": dict(ROUTER, journal="j.db"), "b": dict(ROUTER, journal="j.db")}
    with pytest.raises(ValueError, match="own journal"):
        load_service_config(write_config(tmp_path / "s.toml", routers), data_dir=tmp_path)
    # the same file through a symlinked directory or a path with ".." is the same journal
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data", target_is_directory=True)
    for other in ("link/j.db", "data/../data/j.db"):
        routers = {"a": dict(ROUTER, journal="data/j.db"), "b": dict(ROUTER, journal=other)}
        with pytest.raises(ValueError, match="own journal"):
            load_service_config(write_config(tmp_path / "s.toml", routers), data_dir=tmp_path)


def test_service_config_is_frozen(tmp_path: Path) -> None:
    cfg = ServiceConfig.from_dict({"routers": {"a": ROUTER}}, data_dir=tmp_path)
    with pytest.raises(TypeError):
        cfg.routers["a"]["seed"] = 1  # type: ignore[index]
