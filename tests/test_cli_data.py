"""``msroute data``: JSON output, and one-line errors with a non-zero exit on bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msroute.cli import main
from msroute.datasets import build_instance, load_crowd, sample_instance

CROWD = "1 10 1\n2 10 0\n3 10 1\n1 20 1\n2 20 1\n3 30 0\n4 30 1\n"
TRUTH = "1 1\n2 1\n3 1\n"  # task 4 has no gold label


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    crowd, truth = tmp_path / "crowd.txt", tmp_path / "truth.txt"
    crowd.write_text(CROWD)
    truth.write_text(TRUTH)
    return ["--crowd", str(crowd), "--truth", str(truth)]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_on_the_packaged_trec_data(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, ["data", "stats"])
    assert code == 0 and err == ""
    stats = json.loads(out)
    assert (stats["workers"], stats["tasks"], stats["annotations"]) == (677, 2275, 12863)
    assert stats["reliable_workers"] == 270 and stats["min_annotations"] == 5


def test_stats_on_the_packaged_web_data(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, ["data", "stats", "--dataset", "web"])
    assert code == 0 and err == ""
    stats = json.loads(out)
    assert (stats["workers"], stats["tasks"], stats["annotations"]) == (176, 2653, 15539)
    assert stats["reliable_workers"] == 139 and stats["labels"] == [1, 2, 3, 4, 5]


def test_stats_on_given_files(capsys: pytest.CaptureFixture[str], files: list[str]) -> None:
    code, out, _ = run(capsys, ["data", "stats", *files, "--min-annotations", "2"])
    assert code == 0
    stats = json.loads(out)
    # Task 4 is dropped: workers 10 (3), 20 (2), 30 (1 annotation); 6 annotations on 3 tasks.
    assert (stats["workers"], stats["tasks"], stats["annotations"]) == (3, 3, 6)
    assert stats["reliable_workers"] == 2
    assert stats["labels"] == [1]


def test_instance_for_given_workers(capsys: pytest.CaptureFixture[str], files: list[str]) -> None:
    code, out, err = run(
        capsys, ["data", "instance", *files, "--workers", "30,10", "20", "--dims", "2"]
    )
    assert code == 0 and err == ""
    got = json.loads(out)
    data = load_crowd(files[1], files[3])
    expected = build_instance(data, [30, 10, 20], n_dims=2, n_flagged=3).to_dict()
    assert got == expected  # default flag count: min(10, K)
    assert got["workers"] == [30, 10, 20]
    assert np.array(got["skills_base"]).shape == (2, 3)


def test_instance_sampled_from_trec(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["data", "instance", "--sample", "50", "--dims", "3", "--seed", "9"]
    code, out, _ = run(capsys, argv)
    assert code == 0
    got = json.loads(out)
    expected = sample_instance(load_crowd(), n_experts=50, n_dims=3, seed=9)
    assert got["workers"] == list(expected.workers)
    assert got["costs"] == expected.costs.tolist()
    assert got["seed"] == 9 and sum(c[1] for c in got["costs"]) == 10


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["data", "instance", "--workers", "10", "99"], r"unknown worker id\(s\) \[99\]"),
        (["data", "instance", "--workers", "10", "10"], r"repeats id\(s\) \[10\]"),
        (["data", "instance", "--workers", "10", "x"], r"--workers: 'x' is not an integer"),
        (["data", "instance", "--workers", ","], "--workers: no worker id given"),
        (["data", "instance", "--workers", "10", "--dims", "0"], "n_dims == 0, must be >= 1"),
        (["data", "instance", "--workers", "10", "--flagged", "2"], "n_flagged == 2"),
        (["data", "instance", "--sample", "3", "--min-annotations", "2"], "only 2 reliable"),
        (["data", "stats", "--min-annotations", "-1"], "min_annotations == -1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], files: list[str], argv: list[str], match: str
) -> None:
    code, out, err = run(capsys, [*argv[:2], *files, *argv[2:]])
    assert code == 2 and out == ""
    assert err.startswith("msroute data: error: ") and err.count("\n") == 1
    assert "Traceback" not in err
    assert re.search(match, err), err


@pytest.mark.parametrize(
    ("crowd", "truth", "match"),
    [
        ("1 10 1\n2 10 one\n", TRUTH, r"crowd\.txt, line 2: response must be an integer"),
        ("1 10\n", TRUTH, r"crowd\.txt, line 1: expected 3"),
        (CROWD, "", r"truth\.txt is empty"),
    ],
)
def test_malformed_files_name_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, crowd: str, truth: str, match: str
) -> None:
    (tmp_path / "crowd.txt").write_text(crowd)
    (tmp_path / "truth.txt").write_text(truth)
    argv = ["--crowd", str(tmp_path / "crowd.txt"), "--truth", str(tmp_path / "truth.txt")]
    for action in (["stats"], ["instance", "--workers", "10"]):
        code, out, err = run(capsys, ["data", *action, *argv])
        assert code == 2 and out == "" and err.count("\n") == 1
        assert re.search(match, err), err


def test_missing_files_and_half_a_pair(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(
        capsys, ["data", "stats", "--crowd", str(tmp_path / "no.txt"), "--truth", "x"]
    )
    assert code == 2 and "No such file" in err and err.count("\n") == 1
    code, _, err = run(capsys, ["data", "stats", "--crowd", str(tmp_path / "no.txt")])
    assert code == 2 and "truth_path is missing" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["data"],
        ["data", "instance"],
        ["data", "instance", "--workers", "1", "--sample", "2"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert "Traceback" not in capsys.readouterr().err


def test_console_script() -> None:
    script = Path(sys.executable).with_name("msroute")
    if not script.exists():
        pytest.skip("the msroute console script is not installed next to this interpreter")
    proc = subprocess.run(
        [str(script), "data", "stats"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["reliable_workers"] == 270
    bad = subprocess.run(
        [str(script), "data", "instance", "--workers", "-5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("msroute data: error: unknown worker id(s) [-5]")
    assert "Traceback" not in bad.stderr
