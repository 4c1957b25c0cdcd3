"""The experiments: end-to-end runs, tidy outputs, caching/resume, serial = parallel, configs."""

from __future__ import annotations

import csv
import dataclasses
import json
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pytest

import msroute
from msroute.cli import build_parser, main
from msroute.experiments import cells, schedule
from msroute.experiments import fig2 as fig2_module
from msroute.experiments import sweep as sweep_module
from msroute.experiments.contextual import ContextualConfig, run_contextual
from msroute.experiments.fig1 import Fig1Config, run_fig1
from msroute.experiments.fig2 import Fig2Config, run_fig2
from msroute.experiments.fig3 import Fig3Config, run_fig3
from msroute.experiments.protocol import LEVELS, level_constraints, paper_instance
from msroute.policies.registry import get_policy_class

SMALL = {"seeds": 2, "horizon": 150}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_level_constraints_follow_table_1() -> None:
    inst = paper_instance(0, 50, 3)
    mean_workload = inst.costs[:, 0].mean()
    for level, spec in LEVELS.items():
        c = level_constraints(inst, 5, level)
        if spec is None:
            assert np.all(np.isinf(c.upper_array()))
        else:
            margin, cap = spec
            np.testing.assert_allclose(c.upper_array(), [5 * mean_workload + margin, cap])
    with pytest.raises(ValueError, match="unknown level"):
        level_constraints(inst, 5, "tighter")


def test_fig2_quick_end_to_end_through_the_cli(tmp_path: Path) -> None:
    code = main(
        ["reproduce", "fig2", "--quick", "--out", str(tmp_path), "--quiet", "--horizon", "300"]
    )
    assert code == 0
    rows = read_csv(tmp_path / "fig2.csv")
    for col in ("env", "level", "policy", "seed", "avg_reward", "feasible"):
        assert col in rows[0]
    cfg = Fig2Config()
    assert len(rows) == len(cfg.envs) * len(cfg.levels) * len(cfg.policies) * 2
    assert {r["policy"] for r in rows} == set(cfg.policies)
    side = json.loads((tmp_path / "fig2.json").read_text())
    assert side["msroute_version"] == msroute.__version__
    assert side["seeds"] == [0, 1]
    assert side["parameters"]["horizon"] == 300
    assert (tmp_path / "fig2.png").stat().st_size > 0
    assert (tmp_path / "fig2.svg").stat().st_size > 0
    # Rewards are sum-max over N = 3 dimensions of skills in [0, 1].
    assert all(0.0 < float(r["avg_reward"]) <= 3.0 for r in rows)
    # Unconstrained runs are always feasible.
    assert all(r["feasible"] == "True" for r in rows if r["level"] == "none")


def test_jobs_default_to_the_cores_this_process_may_use() -> None:
    args = build_parser().parse_args(["reproduce", "fig2"])
    assert args.jobs == len(os.sched_getaffinity(0))
    assert build_parser().parse_args(["reproduce", "fig2", "--jobs", "1"]).jobs == 1


def test_fig2_on_the_web_dataset_through_flag_and_config(tmp_path: Path) -> None:
    """``--dataset web`` and ``dataset = "web"`` run the same protocol on the web pools."""
    base = ["reproduce", "fig2", "--quiet", "--no-plot", "--seeds", "2", "--horizon", "100"]
    base += ["--jobs", "1"]
    toml = tmp_path / "c.toml"
    toml.write_text('[fig2]\npolicies = ["random", "omd"]\ndataset = "web"\n')
    assert main([*base, "--config", str(toml), "--out", str(tmp_path / "cfg")]) == 0
    toml.write_text('[fig2]\npolicies = ["random", "omd"]\n')
    assert (
        main([*base, "--config", str(toml), "--dataset", "web", "--out", str(tmp_path / "f")]) == 0
    )
    assert main([*base, "--config", str(toml), "--out", str(tmp_path / "trec")]) == 0
    web_rows = read_csv(tmp_path / "cfg" / "fig2.csv")
    assert web_rows == read_csv(tmp_path / "f" / "fig2.csv")
    side = json.loads((tmp_path / "f" / "fig2.json").read_text())
    assert side["parameters"]["dataset"] == "web"
    trec_rows = read_csv(tmp_path / "trec" / "fig2.csv")
    assert [r["avg_reward"] for r in web_rows] != [r["avg_reward"] for r in trec_rows]
    # The budget bound is M * the mean workload of the seed's web pool (Table 1, margin 0).
    inst = paper_instance(0, 50, 3, dataset="web")
    assert inst.workers != paper_instance(0, 50, 3).workers
    row = next(r for r in web_rows if r["level"] == "tight" and r["seed"] == "0")
    assert float(row["budget_bound"]) == pytest.approx(5 * inst.costs[:, 0].mean())
    with pytest.raises(ValueError, match="dataset"):
        Fig2Config(dataset="nope")


def test_interrupted_sweep_resumes_without_recomputing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = Fig2Config(policies=("random", "omd"), **SMALL)
    first = run_fig2(cfg, tmp_path, plot=False, quiet=True)
    cells = sorted((tmp_path / "cells").rglob("*.npz"))
    assert len(cells) == 2  # one per policy, both environments in it
    cells[0].unlink()  # as if the run had been interrupted before this cell finished
    calls: list[str] = []
    real = fig2_module.sweep_worker

    def counting(spec):  # type: ignore[no-untyped-def]
        calls.append(spec.policy)
        return real(spec)

    monkeypatch.setattr(fig2_module, "sweep_worker", counting)
    second = run_fig2(cfg, tmp_path, plot=False, quiet=True)
    assert len(calls) == 1
    assert first == second


def test_a_sweep_runs_each_policy_on_every_environment_in_one_cell_costliest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One cell per policy (and block of seeds) runs both environments side by side; the cells
    start grouped by block of seeds (a worker's cached skills serve its next cells) and, within
    one, by the policies' relative cost; the results keep the sweep's order."""
    cfg = Fig2Config(policies=("greedy", "ts", "omd", "moe"), levels=("tight",), **SMALL)
    started: list[tuple[str, str, tuple[int, ...]]] = []
    real = fig2_module.sweep_worker

    def recording(spec):  # type: ignore[no-untyped-def]
        started.append((spec.env, spec.policy, spec.seeds))
        return real(spec)

    monkeypatch.setattr(fig2_module, "sweep_worker", recording)
    rows = run_fig2(cfg, tmp_path, plot=False, quiet=True)
    by_cost = ["omd", "ts", "moe", "greedy"]
    assert started == [("stochastic+regime", p, (0, 1)) for p in by_cost]
    assert list(dict.fromkeys(row["policy"] for row in rows)) == list(cfg.policies)
    assert list(dict.fromkeys(row["env"] for row in rows)) == list(cfg.envs)
    # Seeds in blocks: each block's skill stream is a group of its own.
    started.clear()
    blocks = dataclasses.replace(cfg, seeds_per_cell=1)
    assert run_fig2(blocks, tmp_path / "blocks", plot=False, quiet=True) == rows
    assert started == [("stochastic+regime", p, (s,)) for s in cfg.seed_list for p in by_cost]
    # Each environment alone gives its rows of the joint sweep, bit for bit.
    for env in cfg.envs:
        alone = dataclasses.replace(cfg, envs=(env,))
        own = run_fig2(alone, tmp_path / env, plot=False, quiet=True)
        assert own == [row for row in rows if row["env"] == env]


def test_serial_and_parallel_runs_give_identical_numbers(tmp_path: Path) -> None:
    cfg = Fig2Config(policies=("ts", "cbwk", "omd"), envs=("regime",), levels=("tight",), **SMALL)
    serial = run_fig2(cfg, tmp_path / "serial", jobs=1, plot=False, quiet=True)
    parallel = run_fig2(cfg, tmp_path / "parallel", jobs=2, plot=False, quiet=True)
    assert serial == parallel


@pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="workers see drawn skills when forked"
)
def test_forked_workers_use_the_skills_drawn_ahead_by_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With worker processes forked from the driver, each environment is drawn once, in the
    driver, for the whole sweep (not once per worker), and the numbers are the serial ones."""
    built = tmp_path / "built.txt"
    real = cells.make_env

    def logging(*args, **kwargs):  # type: ignore[no-untyped-def]
        with built.open("a") as fh:
            fh.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(cells, "make_env", logging)
    cfg = Fig2Config(policies=("greedy", "omd", "random"), levels=("tight",), **SMALL)
    parallel = run_fig2(cfg, tmp_path / "parallel", jobs=2, plot=False, quiet=True)
    assert built.read_text().split() == [str(os.getpid())] * len(cfg.envs)
    assert cells.cached_env.cache_info().currsize == 0  # the driver lets them go after
    assert run_fig2(cfg, tmp_path / "serial", jobs=1, plot=False, quiet=True) == parallel


_LOAD_ORDER = """
import sys
from pathlib import Path

from msroute.experiments import schedule
from msroute.experiments.fig1 import Fig1Config, run_fig1

seen = []
real = schedule.compile_ahead


def spy():
    seen.append("msroute._skill_draws" in sys.modules)
    real()


schedule.compile_ahead = spy
cfg = Fig1Config(seeds=1, horizon=200, dims=(2, 3))
run_fig1(cfg, Path(sys.argv[1]), jobs=2, plot=False, quiet=True)
print(seen)
"""


@pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="the driver loads code for forked workers"
)
def test_the_driver_imports_numba_in_one_thread_before_the_loader(tmp_path: Path) -> None:
    """In a fresh process, the driver imports the environments' compiled draws before a thread
    loads the simulator's machine code beside the draws: numba imported from two threads at
    once failed with a partially initialized module (Figure 1 from a fresh process)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _LOAD_ORDER, str(tmp_path)], capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["[True]"]


def test_same_seed_same_numbers_different_seed_different(tmp_path: Path) -> None:
    base = {
        "policies": ("omd",),
        "envs": ("stochastic",),
        "levels": ("tight",),
        "horizon": 150,
        "seeds": 1,
    }
    a = run_fig2(Fig2Config(**base), tmp_path / "a", plot=False, quiet=True)
    b = run_fig2(Fig2Config(**base), tmp_path / "b", plot=False, quiet=True)
    c = run_fig2(Fig2Config(**base, first_seed=7), tmp_path / "c", plot=False, quiet=True)
    assert a == b
    assert a[0]["avg_reward"] != c[0]["avg_reward"]


def test_fig3_reads_the_sweep_cells_and_writes_rolling_curves(tmp_path: Path) -> None:
    cfg = Fig3Config(
        window=50, every=10, envs=("stochastic",), policies=("greedy", "omd", "random"), **SMALL
    )
    run_fig2(
        Fig2Config(**{k: getattr(cfg, k) for k in ("policies", "envs", "seeds", "horizon")}),
        tmp_path,
        plot=False,
        quiet=True,
    )
    n_cells = len(list((tmp_path / "cells").rglob("*.npz")))
    rows = run_fig3(cfg, tmp_path, plot=False, quiet=True)
    assert len(list((tmp_path / "cells").rglob("*.npz"))) == n_cells  # nothing new simulated
    assert {r["policy"] for r in rows} == {"greedy", "omd"}  # Random is not shown
    assert {r["level"] for r in rows} == {"tight", "loose"}
    first = [r for r in rows if r["policy"] == "omd" and r["level"] == "tight"]
    assert first[0]["round"] == 50 and first[-1]["round"] == 150
    assert (tmp_path / "fig3.csv").exists() and (tmp_path / "fig3.json").exists()


def test_fig1_curves_are_regrets(tmp_path: Path) -> None:
    cfg = Fig1Config(seeds=1, horizon=200, dims=(3,), levels=("tight", "loose"))
    rows = run_fig1(cfg, tmp_path, plot=False, quiet=True)
    assert len(rows) == 2 * 200 // 10
    assert all(float(r["r2"]) >= 0 for r in rows)
    # True regret is against the certified best fixed policy: it dominates the proxy's q_T.
    assert all("r1_true" in r for r in rows)
    side = json.loads((tmp_path / "fig1.json").read_text())
    assert side["max_opt_gap"] <= 1e-6
    assert [r["step"] for r in rows[:3]] == [1, 2, 3]


def test_contextual_experiment_reports_both_policies(tmp_path: Path) -> None:
    cfg = ContextualConfig(seeds=1, horizon=200)
    rows = run_contextual(cfg, tmp_path, plot=False, quiet=True)
    assert {r["policy"] for r in rows} == {"omd-contextual", "omd"}
    for r in rows:
        # OPT^ctx optimizes one policy per case type: never below the single best policy.
        assert r["opt"] >= r["opt_flat"] - 1e-9


def test_toml_config_and_flags_override_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        'horizon = 120\n[fig2]\nseeds = 1\npolicies = ["random"]\n'
        'envs = ["stochastic"]\nlevels = ["none"]\n'
    )
    code = main(
        [
            "reproduce",
            "fig2",
            "--config",
            str(toml),
            "--horizon",
            "100",
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--no-plot",
        ]
    )
    assert code == 0
    side = json.loads((tmp_path / "o" / "fig2.json").read_text())
    assert side["parameters"]["horizon"] == 100  # the flag wins over the file
    assert side["parameters"]["seeds"] == 1
    assert side["parameters"]["policies"] == ["random"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[fig2]\nwindow = 3\n", "unknown setting"),
        ("[fig2]\npolicies = ['nope']\n", "unknown policy"),
        ("[fig2]\nseeds = 0\n", "seeds"),
        ("[fig2\n", "not valid TOML"),
    ],
)
def test_bad_configs_fail_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, match: str
) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    code = main(["reproduce", "fig2", "--config", str(toml), "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_run_command_prints_a_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "run",
            "--policy",
            "cbwk",
            "--env",
            "regime",
            "--level",
            "tight",
            "--seed",
            "0",
            "1",
            "--horizon",
            "200",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["seed"] for r in out["runs"]] == out["seeds"] == [0, 1]
    assert out["msroute_version"] == msroute.__version__
    assert all(0 < r["avg_reward"] <= 3 for r in out["runs"])
    assert out["runs"][0]["expert_cap"] == 2.0


def test_every_reading_option_reaches_the_simulation(tmp_path: Path) -> None:
    """cost_count and split change the numbers (they are not silently dropped)."""
    base = {
        "seeds": 1,
        "horizon": 300,
        "policies": ("omd",),
        "envs": ("stochastic",),
        "levels": ("none",),
    }
    a = run_fig2(Fig2Config(**base), tmp_path / "a", plot=False, quiet=True)
    b = run_fig2(Fig2Config(**base, cost_count="draws"), tmp_path / "b", plot=False, quiet=True)
    assert a[0]["avg_reward"] == b[0]["avg_reward"]  # OMD's rewards do not depend on it
    assert b[0]["avg_workload"] > a[0]["avg_workload"]  # repeated draws now cost again
    c1 = run_contextual(
        ContextualConfig(seeds=1, horizon=100), tmp_path / "c", plot=False, quiet=True
    )
    c2 = run_contextual(
        ContextualConfig(seeds=1, horizon=100, split="contiguous"),
        tmp_path / "d",
        plot=False,
        quiet=True,
    )
    assert c1[0]["opt"] != c2[0]["opt"]


def test_cells_of_another_version_or_damaged_are_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = Fig2Config(policies=("random",), envs=("stochastic",), levels=("none",), **SMALL)
    first = run_fig2(cfg, tmp_path, plot=False, quiet=True)
    (cell,) = list((tmp_path / "cells").rglob("*.npz"))
    calls: list[str] = []
    real = fig2_module.sweep_worker

    def counting(spec):  # type: ignore[no-untyped-def]
        calls.append(spec.policy)
        return real(spec)

    monkeypatch.setattr(fig2_module, "sweep_worker", counting)
    monkeypatch.setattr(msroute._version, "__version__", "0.0.0-other")
    assert run_fig2(cfg, tmp_path, plot=False, quiet=True) == first
    assert calls == ["random"]  # stale version: recomputed
    cell.write_bytes(cell.read_bytes()[:100])  # damaged
    with pytest.warns(msroute.CacheWarning, match="damaged"):
        assert run_fig2(cfg, tmp_path, plot=False, quiet=True) == first
    assert calls == ["random", "random"]


@pytest.mark.slow
def test_reproduce_all_writes_every_output(tmp_path: Path) -> None:
    # The whole command end to end, as small as each experiment allows (fig1's window is
    # 500 rounds); --quick's settings are Figure 2's fingerprint (test_fingerprint.py).
    args = ["reproduce", "all", "--seeds", "1", "--horizon", "500", "--out", str(tmp_path)]
    code = main([*args, "--quiet"])
    assert code == 0
    for name in ("fig1", "fig2", "fig3", "contextual"):
        for suffix in ("csv", "json", "png", "svg"):
            assert (tmp_path / f"{name}.{suffix}").stat().st_size > 0, (name, suffix)
        side = json.loads((tmp_path / f"{name}.json").read_text())
        assert side["experiment"] == name and side["msroute_version"] == msroute.__version__


_LEFT_AT_EXIT = """
import sys
from pathlib import Path

from msroute.cli import main

out = Path(sys.argv[1])
args = ["reproduce", "fig2", "--seeds", "1", "--horizon", "50", "--jobs", "1", "--no-plot"]
assert main([*args, "--quiet", "--out", str(out)]) == 0


class Cycle:
    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        (out / "collected").write_text("the last collection ran")


Cycle()  # garbage only the cyclic collector frees
"""


def test_reproduce_leaves_its_objects_to_the_process_exit(tmp_path: Path) -> None:
    """After a reproduce run, the interpreter's exit does not walk its objects (matplotlib's,
    numba's) in a last garbage collection: what is left goes with the process."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _LEFT_AT_EXIT, str(tmp_path)], capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "fig2.csv").exists()
    assert not (tmp_path / "collected").exists()


@pytest.mark.parametrize("policy", ["ts", "omd", "moe"])
def test_run_command_replays_one_run_of_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    """Each run has its own streams, so `msroute run` reproduces a sweep's run exactly."""
    cfg = Fig2Config(policies=(policy,), envs=("regime",), levels=("tight", "none"), **SMALL)
    rows = run_fig2(cfg, tmp_path, plot=False, quiet=True)
    want = next(r for r in rows if r["seed"] == 1 and r["level"] == "none")
    code = main(
        [
            "run",
            "--policy",
            policy,
            "--env",
            "regime",
            "--level",
            "none",
            "--seed",
            "1",
            "--horizon",
            str(SMALL["horizon"]),
            "--json",
        ]
    )
    assert code == 0
    got = json.loads(capsys.readouterr().out)["runs"][0]
    assert got["avg_reward"] == want["avg_reward"]
    assert got["avg_experts"] == want["avg_experts"]


@pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="the local backend forks its workers"
)
def test_when_free_runs_once_while_the_last_cell_runs(tmp_path: Path) -> None:
    # The step after a sweep (the figure) may start its fixed costs on the core that the
    # workers no longer use: once, with one cell of the three still running; never when the
    # cells run one at a time in this process or all come from the cache. It runs beside the
    # driver, which meanwhile stores the last cell (here it waits until that cell is stored).
    cfg = Fig2Config(
        seeds=1, horizon=200, policies=("random", "greedy", "cucb"), envs=("stochastic",)
    )
    specs = [spec for _, spec in fig2_module.sweep_specs(cfg, "sweep", ())]
    calls: list[bool] = []
    out = [tmp_path / "two"]

    def free() -> None:
        deadline = time.monotonic() + 30
        while len(list(out[0].rglob("*.npz"))) < len(specs) and time.monotonic() < deadline:
            time.sleep(0.01)
        calls.append(len(list(out[0].rglob("*.npz"))) == len(specs))

    schedule.run_cells(specs, fig2_module.sweep_worker, tmp_path / "two", jobs=2, when_free=free)
    assert calls == [True]
    schedule.run_cells(specs, fig2_module.sweep_worker, tmp_path / "two", jobs=2, when_free=free)
    schedule.run_cells(specs, fig2_module.sweep_worker, tmp_path / "one", jobs=1, when_free=free)
    assert calls == [True]
    # More workers than cells: a core is free from the first cell stored on; still once.
    out[0] = tmp_path / "four"
    schedule.run_cells(specs, fig2_module.sweep_worker, out[0], jobs=4, when_free=free)
    assert calls == [True, True]


def test_an_error_of_when_free_is_raised_once_every_cell_is_stored(tmp_path: Path) -> None:
    cfg = Fig2Config(seeds=1, horizon=100, policies=("random", "greedy"), envs=("stochastic",))
    specs = [spec for _, spec in fig2_module.sweep_specs(cfg, "sweep", ())]

    def free() -> None:
        raise RuntimeError("cannot load the figure's library")

    with pytest.raises(RuntimeError, match="cannot load"):
        schedule.run_cells(specs, fig2_module.sweep_worker, tmp_path, jobs=2, when_free=free)
    assert len(list(tmp_path.rglob("*.npz"))) == len(specs)


def test_a_policy_that_ignores_the_constraints_plays_one_level_for_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random, Greedy, CUCB and TS play the sweep's first level only (a quarter of the runs
    of Figure 2's four levels) and take every level's numbers from those trajectories: each
    output, per-round rewards included, equals that of playing every level."""
    played: list[int] = []
    real = sweep_module.simulate_summary

    def counting(policies, env, batch, *args, **kwargs):  # type: ignore[no-untyped-def]
        played.append(batch.n_runs)
        return real(policies, env, batch, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "simulate_summary", counting)
    cfg = Fig2Config(**SMALL)
    specs = dict(fig2_module.sweep_specs(cfg, "sweep", ("rewards",)))
    for name in ("random", "greedy", "cucb", "ts"):
        spec = specs[name]
        runs = len(cells.env_kinds(spec)) * len(spec.levels) * len(spec.seeds)
        played.clear()
        shared = sweep_module.sweep_worker(spec)
        with monkeypatch.context() as patch:
            patch.setattr(get_policy_class(name), "ignores_constraints", False)
            every = sweep_module.sweep_worker(spec)
        assert played == [runs // len(spec.levels), runs]
        assert shared.keys() == every.keys()
        for key in every.keys() - {"wall_time"}:
            np.testing.assert_array_equal(shared[key], every[key], err_msg=f"{name}: {key}")
        assert len({tuple(b) for b in every["bounds"]}) > len(cfg.seed_list)  # levels differ
