"""Property-based fuzzing of every public boundary with hostile values: NaN, inf, huge and tiny
magnitudes, wrong dtypes and shapes, empty inputs, truncated and bit-flipped files. Each call
either raises an msroute error (MSRouteError) or returns a valid result; never another
exception, never a non-finite result or state. Bounded examples: the file runs in seconds.

A longer local search: ``MSROUTE_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz.py`` (the
examples per test; 40 by default). Under ``CI`` the draws are derandomized (``conftest.py``).
Every failure such a search found is pinned below with ``@example``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import string
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import msroute
from msroute import Constraints, Problem, expected_reward, make_policy, project_step
from msroute.cli import main
from msroute.errors import MSRouteError
from msroute.policies import check_state
from msroute.policies.persist import load_policy

FUZZ = settings(
    max_examples=int(os.environ.get("MSROUTE_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
POLICIES = [n for n in msroute.available_policies() if n != "omd-contextual"]

# ---------------------------------------------------------------------- hostile values
SCALARS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-320, 1e308, -1e308, 1e-12, 1e16]),
    st.integers(-(10**30), 10**30),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
)


def hostile_array(max_dims: int = 3) -> st.SearchStrategy[Any]:
    """Arrays of any small shape (empty included) of hostile floats, or wrong dtypes."""
    floats = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0.0, 1.0, 0.5, 1e-300, 1e300, -1.0]),
    )
    shapes = st.lists(st.integers(0, 4), min_size=0, max_size=max_dims).map(tuple)
    numeric = shapes.flatmap(
        lambda s: st.lists(floats, min_size=int(np.prod(s)), max_size=int(np.prod(s))).map(
            lambda v: np.array(v, dtype=np.float64).reshape(s)
        )
    )
    wrong = st.one_of(
        st.just("abc"),
        st.just([[1.0, "x"], [2.0, 3.0]]),
        st.just(np.array([1 + 2j, 3j])),
        st.just(np.array([True, False])),
        st.just({"a": 1}),
        st.just([[1.0, 2.0], [3.0]]),
        st.none(),
    )
    return st.one_of(numeric, wrong)


def _finite(x: Any) -> bool:
    arr = np.asarray(x, dtype=np.float64)
    return bool(np.all(np.isfinite(arr)))


def _ok_or_msroute(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; an MSRouteError is fine (None is returned), any other exception fails."""
    try:
        return fn(*args, **kwargs)
    except MSRouteError:
        return None


# ---------------------------------------------------------------------- constructors
@FUZZ
@given(costs=hostile_array(2), m=SCALARS, upper=st.lists(SCALARS, max_size=3))
def test_problem_and_constraints(costs: Any, m: Any, upper: list[Any]) -> None:
    c = _ok_or_msroute(Constraints, upper=upper)
    if c is None:
        return
    p = _ok_or_msroute(Problem, costs, m, c)
    if p is not None:
        assert _finite(p.costs) and np.all(p.costs >= 0) and p.m_draws >= 1


@FUZZ
@given(
    name=st.sampled_from(POLICIES),
    key=st.sampled_from(["gamma", "eta", "horizon", "seed"]),
    value=SCALARS,
)
def test_policy_constructor_arguments(name: str, key: str, value: Any) -> None:
    p = Problem([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]], 2, Constraints(upper=[1.5, 1.5]))
    kwargs: dict[str, Any] = {"horizon": 20, "seed": 0, key: value}
    policy = _ok_or_msroute(make_policy, name, p, **kwargs)
    if policy is not None:
        check_state(policy)


# ---------------------------------------------------------------------- select / update
FEEDBACK = st.one_of(
    hostile_array(2),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda v: np.full(2, v)),
)


@FUZZ
@given(
    name=st.sampled_from(POLICIES),
    rounds=st.lists(st.tuples(FEEDBACK, FEEDBACK), min_size=1, max_size=6),
)
def test_select_update_with_hostile_feedback(name: str, rounds: list[tuple[Any, Any]]) -> None:
    p = Problem([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]], 2, Constraints(upper=[1.5, 1.5]))
    policy = make_policy(name, p, horizon=30, n_runs=2, seed=1)
    for reward, cost in rounds:
        d = policy.select()
        assert d.draws.shape == (2, 2) and d.draws.min() >= 0 and d.draws.max() < 3
        _ok_or_msroute(policy.update, d, reward, cost)
        check_state(policy)  # never a non-finite or invalid state


# ---------------------------------------------------------------------- the math
@FUZZ
@given(y=hostile_array(2), gamma=SCALARS, a=hostile_array(2), b=SCALARS)
def test_project_step(y: Any, gamma: Any, a: Any, b: Any) -> None:
    for args in ((y, gamma), (y, gamma, a, b)):
        q = _ok_or_msroute(project_step, *args)
        if q is not None:
            assert _finite(q)
            assert np.all(np.abs(q.sum(axis=-1) - 1.0) <= 1e-9)


EXTREME = st.one_of(
    st.floats(-1.7e308, 1.7e308),
    st.sampled_from([1e308, -1e308, 1e300, 1e-300, 5e-324, 1e16, 1.0, 0.0]),
)


@FUZZ
@given(
    y=st.lists(EXTREME, min_size=2, max_size=4),
    a=st.lists(EXTREME, min_size=2, max_size=4),
    where=st.floats(0.0, 1.0),
    gamma=st.sampled_from([0.0, 1e-12, 0.01]),
)
# Found by a long search: y spread over 2e308 against a gap of a of 1e-300 needs a multiplier
# beyond the largest float (the exact solver's float(mu) overflowed).
@example(y=[1e308, -1e308], a=[1e-300, 0.0], where=0.5, gamma=0.0)
# Found by the fuzzer: a free set whose a spans 1e80 to 1e234 makes the Newton step overflow
# (the row must bisect instead, without a warning).
@example(
    y=[0.0, 1.598540220390891e234, 0.0],
    a=[-1.3919572400499735e80, 1.598540220390891e234, 0.0],
    where=0.6911405483381275,
    gamma=0.0,
)
@pytest.mark.filterwarnings("error::RuntimeWarning")  # no overflow on the way to the answer
def test_project_step_binding_cut_at_extreme_scales(
    y: list[float], a: list[float], where: float, gamma: float
) -> None:
    """A cut that binds (b between the smallest reachable a . q and a . q without the cut), on
    inputs of every scale: the result is on the floored simplex to 1e-12 and meets the cut, or
    the scale is refused with an msroute error."""
    k = min(len(y), len(a))
    ya, aa = np.array(y[:k]), np.array(a[:k])
    free = project_step(ya, gamma)
    with np.errstate(over="ignore", invalid="ignore"):
        reach = gamma * aa.sum() + (1 - k * gamma) * aa.min()
        top = float(aa @ free)
        b = reach + where * (top - reach)
    if not np.isfinite(b):
        return
    q = _ok_or_msroute(project_step, ya, gamma, aa, b)
    if q is not None:
        assert _finite(q) and np.all(q >= gamma)
        assert abs(q.sum() - 1.0) <= 1e-12
        scale = np.abs(aa).max()
        assert aa @ q <= b + 1e-9 * scale
    rows = _ok_or_msroute(project_step, np.stack([ya, ya[::-1]]), gamma, aa, b)
    if rows is not None:
        assert _finite(rows) and np.all(np.abs(rows.sum(axis=-1) - 1.0) <= 1e-12)


@FUZZ
@given(q=hostile_array(2), skills=hostile_array(3), m=SCALARS)
def test_expected_reward(q: Any, skills: Any, m: Any) -> None:
    value = _ok_or_msroute(expected_reward, q, skills, m)
    if value is not None:
        assert _finite(value) and np.all(np.asarray(value) >= 0)


# ---------------------------------------------------------------------- files
LINES = st.lists(
    st.one_of(
        st.tuples(st.integers(-3, 9), st.integers(-3, 9), st.integers(-1, 2)).map(
            lambda t: " ".join(map(str, t))
        ),
        st.text(alphabet=string.printable, max_size=20),
        st.just("1 " + "9" * 40 + " 1"),
        st.just(""),
    ),
    max_size=8,
)


@FUZZ
@given(crowd=LINES, truth=LINES, raw=st.binary(max_size=30))
def test_load_crowd(tmp_path: Path, crowd: list[str], truth: list[str], raw: bytes) -> None:
    c, t = tmp_path / "c.txt", tmp_path / "t.txt"
    c.write_text("\n".join(crowd))
    t.write_bytes(raw if len(truth) % 3 == 2 else "\n".join(truth).encode())
    data = _ok_or_msroute(_load_quietly, c, t)
    if data is not None:
        assert data.n_annotations > 0 and _finite(data.accuracy)


def _load_quietly(c: Path, t: Path) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", msroute.DataWarning)
        return msroute.load_crowd(c, t)


@pytest.fixture(scope="module")
def policy_bytes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    p = Problem([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]], 2, Constraints(upper=[1.5, 1.5]))
    out = {}
    for name in ("omd", "ts-bwk"):
        pol = make_policy(name, p, horizon=30, n_runs=2, seed=1)
        for _ in range(3):
            pol.update(pol.select(), np.full(2, 1.0), np.full((2, 2), 0.5))
        path = tmp_path_factory.mktemp("pol") / f"{name}.npz"
        pol.save(path)
        out[name] = path.read_bytes()
    return out


@FUZZ
@given(
    name=st.sampled_from(["omd", "ts-bwk"]),
    cut=st.floats(0.0, 1.0),
    flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), max_size=4),
)
def test_load_policy_truncated_or_bit_flipped(
    tmp_path: Path,
    policy_bytes: dict[str, bytes],
    name: str,
    cut: float,
    flips: list[tuple[float, int]],
) -> None:
    raw = bytearray(policy_bytes[name])
    for where, mask in flips:
        raw[int(where * (len(raw) - 1))] ^= mask
    if cut < 0.3:
        raw = raw[: int(cut / 0.3 * len(raw))]
    path = tmp_path / "p.npz"
    path.write_bytes(bytes(raw))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a flipped version string
        policy = _ok_or_msroute(load_policy, path)
    if policy is not None:
        check_state(policy)
        d = policy.select()
        policy.update(d, np.full(2, 1.0), np.full((2, 2), 0.5))


@FUZZ
@given(
    key=st.sampled_from(["seeds", "horizon", "fraction", "envs", "policies", "kappa", "fig7"]),
    value=st.one_of(
        st.integers(-(10**25), 10**25),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(alphabet=string.ascii_letters, max_size=6),
        st.lists(st.text(alphabet=string.ascii_letters, max_size=4), max_size=3),
    ),
    table=st.sampled_from(["", "[fig2]\n", "[fig9]\n"]),
    garbage=st.binary(max_size=12),
)
def test_toml_config(key: str, value: Any, table: str, garbage: bytes) -> None:
    from msroute.experiments.config import load_toml, with_overrides
    from msroute.experiments.fig2 import Fig2Config

    text = table + f"{key} = {_toml(value)}\n"
    for data in (text.encode(), text.encode() + garbage):
        path = Path(_tmpdir()) / "c.toml"
        path.write_bytes(data)
        try:
            cfg = Fig2Config()
            for source, values in load_toml(path, "fig2", tables=["fig1", "fig2"]):
                cfg = with_overrides(cfg, values, source)
        except MSRouteError as exc:
            assert str(path) in str(exc) and len(str(exc)) < 2000
        else:
            assert cfg.seeds >= 1 and 0 < cfg.fraction <= 1


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value == np.inf else "-inf" if value == -np.inf else repr(value))
        )
    return json.dumps(value)


_TMP: list[str] = []


def _tmpdir() -> str:
    import tempfile

    if not _TMP:
        _TMP.append(tempfile.mkdtemp(prefix="msroute-fuzz-"))
    return _TMP[0]


# ---------------------------------------------------------------------- the command line
TOKENS = st.one_of(
    st.sampled_from(
        [
            "run",
            "data",
            "stats",
            "instance",
            "reproduce",
            "--policy",
            "omd",
            "random",
            "--horizon",
            "--seed",
            "--param",
            "eta=1e-300",
            "--workers",
            "--dims",
            "--sample",
            "--level",
            "none",
            "--json",
            "--n-dims",
            "--n-experts",
            "--m-draws",
            "0",
            "-1",
            "99999999999999999999",
            "nan",
            "1e400",
            "3",
        ]
    ),
    st.text(alphabet=string.printable, max_size=8),
)


@FUZZ
@given(argv=st.lists(TOKENS, max_size=8))
def test_cli_never_shows_a_traceback(argv: list[str]) -> None:
    if "reproduce" in argv:  # only what fails fast: no sweep in a fuzz test
        argv = [*argv, "--config", "/nonexistent/x.toml"]
    if argv[:1] == ["run"]:
        argv = [*argv, "--horizon", "20"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    text = err.getvalue()
    assert code in (0, 2), (argv, code, text)
    assert "Traceback" not in text, (argv, text)
    assert len(text) < 5000, (argv, len(text))


# ---------------------------------------------------------------------- the live router
ROUTER_CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd", "gpu"],
    "seed": 3,
    "experts": {"big": [0.03, 1.0], "small": [0.002, 0.0], "mid": [0.01, 0.5]},
    "constraints": {"upper": {"usd": 0.04}, "lower": {"gpu": 0.1}},
    "contexts": ["tech", "billing"],
}
IDS = st.one_of(
    st.sampled_from(["big", "small", "mid", "gone", "", "BIG"]),
    st.text(max_size=4),
    SCALARS,
    st.just(["big"]),
)
COSTS = st.one_of(
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(["usd", "gpu", "eur", ""]), SCALARS, max_size=3),
    SCALARS,
)
ROUTER_OPS = st.one_of(
    st.tuples(
        st.just("route"),
        st.one_of(st.sampled_from(["tech", "billing", "other"]), SCALARS),
        st.one_of(st.none(), st.lists(IDS, max_size=4), st.just("big"), SCALARS),
        st.one_of(st.none(), st.text(max_size=3), SCALARS, st.just("x" * 10_000)),
    ),
    st.tuples(st.just("feedback"), st.integers(-1, 3), SCALARS, st.one_of(st.none(), COSTS)),
    st.tuples(st.just("feedback_id"), st.one_of(SCALARS, st.just(["a"]), st.text(max_size=3))),
    st.tuples(st.just("add_expert"), IDS, COSTS),
    st.tuples(st.just("remove_expert"), IDS),
)


def _finite_state(state: Any) -> bool:
    """Every number in a router's state() is finite."""
    if isinstance(state, dict):
        return all(_finite_state(v) for v in state.values())
    if isinstance(state, list):
        return all(_finite_state(v) for v in state)
    if isinstance(state, float):
        return bool(np.isfinite(state))
    return True


@FUZZ
@given(ops=st.lists(ROUTER_OPS, min_size=1, max_size=10))
def test_router_route_feedback_and_experts(ops: list[tuple[Any, ...]]) -> None:
    """Hostile route, feedback and expert calls: each is an msroute error that changes no
    state (state() compared before and after), or a valid result; never a non-finite state."""
    from msroute import Router

    router = Router(ROUTER_CONFIG)
    routed: list[str] = []
    for op in ops:
        before = router.state()
        try:
            if op[0] == "route":
                d = router.route(context=op[1], eligible=op[2], decision_id=op[3])
                assert set(d.team) <= set(router.expert_ids) and len(d.draws) == 2
                if op[2] is not None:
                    assert set(d.team) <= set(op[2])
                assert d.propensities is None or abs(sum(d.propensities.values()) - 1) < 1e-9
                routed.append(d.decision_id)
            elif op[0] == "feedback":
                did = routed[op[1]] if 0 <= op[1] < len(routed) else "never-routed"
                assert router.feedback(did, op[2], op[3]) in ("applied", "duplicate", "late")
            elif op[0] == "feedback_id":
                router.feedback(op[1], 0.5)
            elif op[0] == "add_expert":
                router.add_expert(op[1], op[2])
                assert op[1] in router.expert_ids
            else:
                router.remove_expert(op[1])
                assert op[1] not in router.expert_ids
        except MSRouteError:
            assert router.state() == before, op
        assert _finite_state(router.state()), op
    router.close()


@FUZZ
@given(
    key=st.sampled_from(
        ["policy", "m_draws", "seed", "experts", "constraints", "contexts", "horizon", "params"]
    ),
    value=st.one_of(
        SCALARS,
        st.lists(SCALARS, max_size=3),
        st.dictionaries(st.text(max_size=3), SCALARS, max_size=2),
        st.just({"upper": {"usd": float("nan")}}),
        st.just({"big": [1e308, 1e308]}),
    ),
)
# Found by a long search: M = 2e8 draws asked for 24 GiB of random-number buffers (a worker
# was killed); the policy now refuses it with a ResourceError before allocating.
@example(key="m_draws", value=200_000_000)
def test_router_from_config(key: str, value: Any) -> None:
    from msroute import Router

    config = {**ROUTER_CONFIG, key: value}
    router = _ok_or_msroute(Router.from_config, config)
    if router is not None:
        assert _finite_state(router.state())
        d = router.route(context=(router.context_names or [None])[0])
        router.feedback(d.decision_id, 0.5)
        assert _finite_state(router.state())
        router.close()
