"""The experiment configuration is validated up front against one schema: every key, type and
range, with messages that name the file, the table and the key."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from msroute.cli import main
from msroute.errors import ConfigError
from msroute.experiments.config import RANGES, load_toml, with_overrides
from msroute.experiments.contextual import ContextualConfig
from msroute.experiments.fig1 import Fig1Config
from msroute.experiments.fig2 import Fig2Config
from msroute.experiments.fig3 import Fig3Config

CONFIGS = (Fig1Config, Fig2Config, Fig3Config, ContextualConfig)


def _reproduce(
    tmp_path: Path, toml: str | bytes, capsys: pytest.CaptureFixture[str], exp: str = "fig2"
) -> str:
    cfg = tmp_path / "c.toml"
    if isinstance(toml, bytes):
        cfg.write_bytes(toml)
    else:
        cfg.write_text(toml)
    out = tmp_path / "out"
    code = main(["reproduce", exp, "--quick", "--out", str(out), "--config", str(cfg), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not out.exists() or not any(out.iterdir()), "nothing may run before the error"
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[fig7]\nseeds = 2\n", r"c\.toml: unknown table\(s\) \[fig7\]; known tables: \[fig1\]"),
        ("[fig2]\nseeds = true\n", r"c\.toml \[fig2\]: seeds must be an integer, got True"),
        ("seeds = true\n", r"c\.toml \(top level\): seeds must be an integer, got True \(bool\)"),
        ("[fig2]\nseeds = 2.5\n", r"\[fig2\]: seeds must be an integer, got 2\.5 \(float\)"),
        ("[fig2]\nseeds = 0\n", r"\[fig2\]: seeds == 0, must be in \[1, "),
        ("[fig2]\nenvs = 'regime'\n", r"\[fig2\]: envs must be an array of strings, got 'regime'"),
        ("[fig2]\npolicies = 3\n", r"\[fig2\]: policies must be an array of strings, got 3 \(int"),
        ("[fig2]\npolicies = [1, 2]\n", r"\[fig2\]: policies entry must be a string, got 1"),
        ("[fig2]\nfraction = 0.0\n", r"\[fig2\]: fraction == 0\.0, must be in \(0, 1\]"),
        ("[fig2]\nfraction = 1.5\n", r"\[fig2\]: fraction == 1\.5, must be in \(0, 1\]"),
        ("[fig2]\nshrink = -0.1\n", r"\[fig2\]: shrink == -0\.1, must be in \[0, 1\]"),
        ("[fig2]\nkappa = nan\n", r"\[fig2\]: kappa == nan, must be a finite number"),
        ("[fig2]\neta_mult = inf\n", r"\[fig2\]: eta_mult == inf, must be a finite number"),
        # subnormal: the sweep ended in a ZeroDivisionError traceback in the projection
        ("[fig2]\neta_mult = 1e-320\n", r"\[fig2\]: eta_mult == 1e-320 is subnormal \(nonzero"),
        ("[fig2]\nfraction = 5e-324\n", r"\[fig2\]: fraction == 5e-324 is subnormal"),
        ("[fig2]\neta_mult = '0.1'\n", r"\[fig2\]: eta_mult must be a number, got '0\.1' \(str"),
        ("[fig2]\nhorizon = 1e400\n", r"\[fig2\]: horizon must be an integer, got inf"),
        ("[fig2]\nlevels = ['tight', 'tigth']\n", r"\[fig2\]: unknown level\(s\) \['tigth'\]"),
        ("[fig2]\nfig3 = 1\n", r"\[fig2\]: unknown setting\(s\) \['fig3'\]"),
        ("[fig2]\nseeds = 2\nseeds = 3\n", r"c\.toml: not valid TOML: .*line 3"),
        ("[fig2]\nn_blocks = {a = 1}\n", r"\[fig2\]: n_blocks must be an integer, got \{'a': 1\}"),
    ],
)
def test_a_bad_configuration_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, expected: str
) -> None:
    err = _reproduce(tmp_path, toml, capsys)
    assert err.startswith("msroute reproduce: error: ")
    assert str(tmp_path / "c.toml") in err
    assert re.search(expected, err), err


def test_a_binary_file_is_named_as_not_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _reproduce(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00", capsys)
    assert "not a TOML text file (byte 0x89 at offset 0 is not UTF-8)" in err


def test_contextual_case_types_are_checked_as_nested_integers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _reproduce(tmp_path, "[contextual]\ncase_types = ['ab']\n", capsys, "contextual")
    assert "case_types entry must be an array of integers, got 'ab'" in err
    err = _reproduce(tmp_path, "[contextual]\ncase_types = [[0, 1], [-1]]\n", capsys, "contextual")
    assert "case_types == -1" in err


@pytest.mark.parametrize("cls", CONFIGS)
def test_every_numeric_setting_has_a_range_and_the_defaults_are_in_it(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    numeric = {f.name for f in dataclasses.fields(cls) if int in _leaf_types(hints[f.name])}
    numeric |= {f.name for f in dataclasses.fields(cls) if float in _leaf_types(hints[f.name])}
    assert numeric <= set(RANGES), numeric - set(RANGES)
    cls()  # the paper's defaults pass the schema


def _leaf_types(tp: object) -> set[object]:
    args = typing.get_args(tp)
    return {t for a in args if a is not Ellipsis for t in _leaf_types(a)} if args else {tp}


def test_programmatic_construction_goes_through_the_same_schema() -> None:
    with pytest.raises(TypeError, match="seeds must be an integer, got True"):
        Fig2Config(seeds=True)
    with pytest.raises(ValueError, match=r"fraction == 2\.0"):
        Fig2Config(fraction=2.0)
    with pytest.raises(ConfigError, match=r"flags: window == 0"):
        with_overrides(Fig3Config(), {"window": 0}, "flags")


def test_a_valid_file_still_applies_top_level_then_table(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("seeds = 3\n[fig2]\nseeds = 4\nenvs = ['regime']\n")
    cfg = Fig2Config()
    for source, values in load_toml(path, "fig2", tables=["fig2"]):
        cfg = with_overrides(cfg, values, source)
    assert (cfg.seeds, cfg.envs) == (4, ("regime",))
