"""Third-party policies through the entry-point group ``msroute.policies``.

The fixture installs the tiny package ``tests/plugins/msroute_toy_plugin`` into the test
environment the way pip leaves an installed distribution: the package and its
``.dist-info`` (METADATA and entry_points.txt) in a directory on ``sys.path``. It needs no
network and works in CI's fresh virtual environment.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from msroute.checks import check_policy
from msroute.cli import main
from msroute.policies.registry import POLICIES, get_policy_class, make_policy, reload_plugins

PLUGIN = Path(__file__).resolve().parent / "plugins" / "msroute_toy_plugin"


def install(site: Path, entry_points: str) -> None:
    shutil.copytree(PLUGIN, site / PLUGIN.name)
    dist = site / "msroute_toy_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: msroute-toy-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def toy_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site-packages"
    site.mkdir()
    install(site, "[msroute.policies]\ntoy-uniform = msroute_toy_plugin:ToyUniform\n")
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
    yield site
    monkeypatch.undo()
    sys.modules.pop("msroute_toy_plugin", None)
    reload_plugins()


def test_an_installed_plugin_is_registered_and_passes_the_kit(toy_plugin: Path) -> None:
    assert POLICIES["toy-uniform"] == "msroute_toy_plugin:ToyUniform"
    cls = get_policy_class("toy-uniform")
    assert cls.__module__ == "msroute_toy_plugin" and cls.label == "Toy uniform (plugin)"
    check_policy(cls)
    from msroute.plotting import policy_label

    assert policy_label("toy-uniform") == "Toy uniform (plugin)"  # the figures read its own


def test_msroute_run_routes_with_a_plugin(
    toy_plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--policy", "toy-uniform", "--horizon", "50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "toy-uniform" and len(out["runs"]) == 1


def test_reproduce_lists_a_plugin_in_its_configuration(toy_plugin: Path, tmp_path: Path) -> None:
    config = tmp_path / "plugin.toml"
    config.write_text('[fig2]\npolicies = ["random", "toy-uniform"]\nenvs = ["stochastic"]\n')
    args = ["reproduce", "fig2", "--quick", "--no-plot", "--quiet", "--jobs", "1"]
    assert main([*args, "--config", str(config), "--out", str(tmp_path / "out")]) == 0
    rows = (tmp_path / "out" / "fig2.csv").read_text().splitlines()
    assert sum(",toy-uniform," in r for r in rows) == 8  # 4 levels x 2 seeds


def test_the_router_routes_with_a_plugin(toy_plugin: Path) -> None:
    from msroute.router import Router

    router = Router.from_config(
        {
            "policy": "toy-uniform",
            "m_draws": 2,
            "cost_names": ["usd"],
            "seed": 0,
            "experts": {"a": [1.0], "b": [0.5], "c": [0.0]},
            "constraints": {"upper": {"usd": 2.0}},  # the dearest team fits: nothing paced
        }
    )
    decision = router.route()
    assert set(decision.team) <= {"a", "b", "c"}
    assert decision.propensities == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    assert router.feedback(decision.decision_id, 1.0) == "applied"
    router.close()


def test_a_plugin_cannot_take_a_builtin_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    install(site, "[msroute.policies]\nomd = msroute_toy_plugin:ToyUniform\n")
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
    try:
        with pytest.warns(UserWarning, match="reuses msroute's policy name 'omd'"):
            assert "omd" in POLICIES
        assert get_policy_class("omd").__module__ == "msroute.policies.omd"
    finally:
        monkeypatch.undo()
        reload_plugins()


def test_without_the_plugin_the_name_is_unknown() -> None:
    with pytest.raises(ValueError, match="unknown policy 'toy-uniform'"):
        make_policy("toy-uniform", None)
