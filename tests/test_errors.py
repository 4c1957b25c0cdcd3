"""Every deliberate error is an msroute error; the command line prints those as one line and
lets anything else (a bug) keep its traceback."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import msroute
from msroute import cli
from msroute.errors import InvalidTypeError, InvalidValueError, MSRouteError

SRC = Path(msroute.__file__).resolve().parent


def test_the_package_raises_no_bare_value_or_type_error() -> None:
    bare = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in ("ValueError", "TypeError"):
                    bare.append(f"{path.relative_to(SRC)}:{node.lineno} raises {exc.id}")
    assert bare == []


def test_msroute_errors_are_still_value_and_type_errors() -> None:
    assert issubclass(InvalidValueError, MSRouteError) and issubclass(InvalidValueError, ValueError)
    assert issubclass(InvalidTypeError, MSRouteError) and issubclass(InvalidTypeError, TypeError)
    with pytest.raises(ValueError, match="horizon == 0"):
        msroute.make_policy(
            "omd", msroute.Problem([[0.0], [1.0]], 1, msroute.Constraints(upper=[1.0])), horizon=0
        )


def _run_raising(exc: BaseException) -> int:
    def fail(args: argparse.Namespace) -> int:
        raise exc

    return cli._dispatch(argparse.Namespace(command="data", func=fail))


def test_cli_prints_msroute_errors_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_raising(InvalidValueError("eta == -1, must be > 0")) == 2
    assert capsys.readouterr().err == "msroute data: error: eta == -1, must be > 0\n"


@pytest.mark.parametrize("exc", [ValueError("a bug"), TypeError("a bug"), KeyError("a bug")])
def test_cli_lets_a_bug_keep_its_traceback(exc: BaseException) -> None:
    with pytest.raises(type(exc), match="a bug"):
        _run_raising(exc)


def test_make_policy_names_an_unknown_parameter() -> None:
    problem = msroute.Problem([[0.0], [1.0]], 1, msroute.Constraints(upper=[1.0]))
    with pytest.raises(InvalidTypeError, match=r"policy 'cucb' has no parameter eta;.* c\b"):
        msroute.make_policy("cucb", problem, horizon=10, eta=0.1)


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("eta=abc", "eta must be a real number, got str 'abc'"),
        ("gamma=abc", "gamma must be a real number, got str 'abc'"),
        ("foo=1", "policy 'omd' has no parameter foo"),
        ("horizon=5", r"horizon is set by --horizon"),
        # ASCII decimal numbers only: int() and float() read these as 0.3, 1 and 0.5
        ("eta_mult=\u0660.\u0663", "eta_mult must be a real number, got str '\u0660.\u0663'"),
        ("batch=\uff11", "batch must be an integer, got str"),
        ("eta_mult=0_5", "eta_mult must be a real number, got str '0_5'"),
    ],
)
def test_cli_bad_policy_parameters_are_one_line_errors(
    param: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "--policy", "omd", "--horizon", "10", "--param", param]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msroute run: error: ") and err.count("\n") == 1
    assert re.search(message, err)


def test_cli_refuses_a_policy_parameter_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    # A repeated key is a conflict, not an override: the last value won silently before.
    argv = ["run", "--policy", "omd", "--horizon", "10", "--param", "eta=1", "--param", "eta=2"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "msroute run: error: --param 'eta' is given more than once; give each parameter once\n"
    )


def _problem() -> msroute.Problem:
    return msroute.Problem([[1.0], [0.0], [0.5]], 2, msroute.Constraints(upper=[1.0]))


@pytest.mark.parametrize(
    ("call", "error", "named"),
    [
        (
            lambda: msroute.expected_reward(np.full(3, 1 / 3), np.zeros((0, 3)), 2),
            InvalidValueError,
            "at least one dimension and one expert",
        ),
        (
            lambda: msroute.monte_carlo_reward(
                np.full(3, 1 / 3), np.ones((2, 3)), 2, n_samples=10, seed="x"
            ),
            InvalidTypeError,
            "seed must be an int",
        ),
        (lambda: msroute.load_policy(3), InvalidTypeError, "path must be a file path"),
        (
            lambda: msroute.save_policy("x", msroute.make_policy("omd", _problem(), horizon=5)),
            InvalidTypeError,
            "policy must be a policy (save_policy(policy, path))",
        ),
        (
            lambda: msroute.simulate(
                {"o": msroute.make_policy("omd", _problem(), horizon=10, seed=0)},
                msroute.SequenceEnv(np.ones((10, 2, 3)), n_runs=1),
                _problem(),
                10,
                progress=3,
            ),
            InvalidTypeError,
            "progress must be a callable or None",
        ),
    ],
)
def test_misused_library_calls_name_the_argument(call: Any, error: type, named: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert named in str(info.value)
