"""Saving and resuming every registered policy (msroute.policies.persist)."""

from __future__ import annotations

import doctest
import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _policy_sim import beta_skills
from msroute import Constraints, DataFormatError, MSRouteError, Problem, batch_sum_max_reward
from msroute.policies import (
    GreedyPolicy,
    PolicyFileError,
    available_policies,
    load_policy,
    make_policy,
    save_policy,
    state_walk,
)
from msroute.policies import persist as persist_module
from msroute.policies.base import BasePolicy, draws_to_mask
from msroute.policies.persist import FORMAT_VERSION
from msroute.policies.state_walk import state_attrs, state_dict

NAMES = available_policies()
K, M, N, R, X = 6, 2, 2, 3, 2
COSTS = np.array([[1.0, 0.0], [0.8, 0.2], [0.5, 0.5], [0.2, 0.4], [0.0, 1.0], [0.3, 0.3]])
# An upper and a lower bound, both on coordinate 0; feasible for OMD's floor 1/(10K).
PROBLEM = Problem(COSTS, M, Constraints(upper=[0.9, 1.2], lower=[0.2, None]))
MEANS = np.array([[0.9, 0.7, 0.6, 0.5, 0.4, 0.3], [0.4, 0.8, 0.5, 0.6, 0.7, 0.2]])
BEFORE, AFTER = 40, 30


@pytest.fixture(scope="module")
def skills() -> np.ndarray:
    return beta_skills(MEANS, R, BEFORE + AFTER, seed=7)


@pytest.fixture(scope="module")
def contexts() -> np.ndarray:
    return np.random.default_rng(8).integers(0, X, size=(BEFORE + AFTER, R))


def make(name: str, **kwargs: Any) -> BasePolicy:
    if name == "omd-contextual":
        kwargs.setdefault("n_contexts", X)
    return make_policy(name, PROBLEM, horizon=200, n_runs=R, seed=11, **kwargs)


def feedback(policy: BasePolicy, draws: np.ndarray, skills_t: np.ndarray):
    mask = draws_to_mask(draws, policy.n_experts)
    return batch_sum_max_reward(skills_t, mask), policy.problem_batch.realized_cost(mask)


def play(policy: BasePolicy, skills: np.ndarray, contexts: np.ndarray, rounds: range) -> None:
    for t in rounds:
        decision = policy.select(contexts[t])
        policy.update(decision, *feedback(policy, decision.draws, skills[t]))


def assert_same_state(a: BasePolicy, b: BasePolicy) -> None:
    sa, sb = state_dict(a), state_dict(b)
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(sb[key], value, err_msg=key)
            assert sb[key].dtype == value.dtype, key
        else:
            assert sb[key] == value, key
    # The public diagnostics too: q and w of OMD; lambda and counts of the baselines.
    for attr in ("q", "w", "lambda_", "counts"):
        if hasattr(a, attr):
            np.testing.assert_array_equal(getattr(b, attr), getattr(a, attr), err_msg=attr)


def lockstep(
    a: BasePolicy, b: BasePolicy, skills: np.ndarray, contexts: np.ndarray, rounds: range
) -> None:
    """Both policies select; the selections must agree; both get the same feedback."""
    for t in rounds:
        da, db = a.select(contexts[t]), b.select(contexts[t])
        assert np.array_equal(da.draws, db.draws), f"round {t}: {da.draws} != {db.draws}"
        if da.probs is not None:
            assert db.probs is not None
            np.testing.assert_array_equal(da.probs, db.probs)
        fb = feedback(a, da.draws, skills[t])
        a.update(da, *fb)
        b.update(db, *fb)


# ---------------------------------------------------------------------- round trips
@pytest.mark.parametrize("name", NAMES)
def test_resumed_policy_decides_exactly_like_the_original(name, skills, contexts, tmp_path):
    original = make(name)
    play(original, skills, contexts, range(BEFORE))
    path = tmp_path / "router.npz"
    save_policy(original, path)
    loaded = load_policy(path)
    assert type(loaded) is type(original)
    assert loaded.t == original.t == BEFORE
    assert_same_state(original, loaded)
    lockstep(original, loaded, skills, contexts, range(BEFORE, BEFORE + AFTER))
    assert_same_state(original, loaded)
    if name in ("cbwk", "ts-bwk", "moe"):  # the dual has moved: its check is not vacuous
        assert np.any(original.lambda_ > 0)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_right_after_construction(name, skills, contexts, tmp_path):
    original = make(name)
    original.save(tmp_path / "fresh.npz")
    loaded = load_policy(tmp_path / "fresh.npz")
    assert loaded.t == 0
    assert_same_state(original, loaded)
    lockstep(original, loaded, skills, contexts, range(AFTER))
    assert_same_state(original, loaded)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_between_select_and_update(name, skills, contexts, tmp_path):
    original = make(name)
    play(original, skills, contexts, range(BEFORE))
    decision = original.select(contexts[BEFORE])
    save_policy(original, tmp_path / "mid.npz")
    loaded = load_policy(tmp_path / "mid.npz")
    fb = feedback(original, decision.draws, skills[BEFORE])
    original.update(decision, *fb)
    loaded.update(decision, *fb)
    lockstep(original, loaded, skills, contexts, range(BEFORE + 1, BEFORE + AFTER))
    assert_same_state(original, loaded)


def _undeclared_changes(obj: object, fresh: object, prefix: str = "") -> list[str]:
    """Array or scalar attributes that learning changed but ``_state_attrs`` does not declare."""
    declared = state_attrs(obj)
    changed = []
    for attr, value in vars(obj).items():
        if attr in declared:
            if state_attrs(value):  # a component: its own attributes must be declared too
                changed += _undeclared_changes(value, getattr(fresh, attr), f"{prefix}{attr}.")
            continue
        old = vars(fresh).get(attr)
        if isinstance(value, np.ndarray):
            same = isinstance(old, np.ndarray) and old.shape == value.shape
            if not (same and np.array_equal(old, value, equal_nan=True)):
                changed.append(prefix + attr)
        elif type(value) in (bool, int, float, str) and value != old:
            changed.append(prefix + attr)
    return changed


@pytest.mark.parametrize("name", NAMES)
def test_every_attribute_that_learns_is_declared_state(name, skills, contexts):
    policy = make(name)
    play(policy, skills, contexts, range(BEFORE))
    assert _undeclared_changes(policy, make(name)) == []


@pytest.mark.parametrize("name", NAMES)
def test_file_holds_json_and_plain_arrays_only(name, skills, contexts, tmp_path):
    policy = make(name)
    play(policy, skills, contexts, range(5))
    path = tmp_path / "router.npz"
    policy.save(path)
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("manifest.json"))
    assert names[0] == "manifest.json"
    assert all(n.endswith(".npy") for n in names[1:])
    with np.load(path, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    arrays = [v for k, v in members.items() if k != "manifest.json"]
    assert arrays and all(v.dtype != object for v in arrays)
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["policy"] == name
    assert manifest["state"]["t"] == 5
    assert manifest["state"]["streams.uniforms.generators"] == [
        g.bit_generator.state for g in policy.streams.uniforms.generators
    ]
    assert manifest["kwargs"]["horizon"] == 200
    assert manifest["problems"][0]["constraints"] == PROBLEM.constraints.to_dict()
    assert manifest["problem_of_run"] == [0] * R


def test_saving_does_not_touch_the_policy_and_is_deterministic(skills, contexts, tmp_path):
    policy = make("ts-bwk")
    play(policy, skills, contexts, range(15))
    before = state_dict(policy)
    policy.save(tmp_path / "a.npz")
    policy.save(tmp_path / "b.npz")
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    assert state_dict(policy).keys() == before.keys()
    assert [g.bit_generator.state for g in policy.streams.uniforms.generators] == before[
        "streams.uniforms.generators"
    ]
    np.testing.assert_array_equal(policy.streams.gamma_state, before["streams.gamma_state"])
    policy.save(tmp_path / "a.npz")  # overwriting leaves no temporary file behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz", "b.npz"]


@pytest.mark.parametrize("name", ["omd", "ts-bwk"])
def test_policy_bytes_are_the_file_and_resume_alike(name, skills, contexts, tmp_path):
    policy = make(name)
    play(policy, skills, contexts, range(BEFORE))
    blob = persist_module.policy_bytes(policy)
    policy.save(tmp_path / "p.npz")
    assert blob == (tmp_path / "p.npz").read_bytes()
    twin = persist_module.policy_from_bytes(blob)
    assert_same_state(policy, twin)
    lockstep(policy, twin, skills, contexts, range(BEFORE, BEFORE + AFTER))
    with pytest.raises(PolicyFileError, match=r"^my snapshot: .*truncated"):
        persist_module.policy_from_bytes(blob[: len(blob) // 2], "my snapshot")


def test_per_run_problems_and_seed_sequence_are_kept(skills, contexts, tmp_path):
    other = Problem(COSTS * 0.5, M, Constraints(upper=[0.6, None], names=["gpu", "usd"]), cbar=2.0)
    problems = [PROBLEM, other, PROBLEM]
    original = make_policy(
        "omd", problems, horizon=200, seed=np.random.SeedSequence(3, spawn_key=(1,)), gamma=0.02
    )
    play(original, skills, contexts, range(20))
    original.save(tmp_path / "r.npz")
    loaded = load_policy(tmp_path / "r.npz")
    lp = loaded.problem_batch.problems
    assert lp[0] is lp[2] and lp[0] is not lp[1]
    assert lp[1].cbar == 2.0 and lp[1].constraints == other.constraints
    np.testing.assert_array_equal(loaded.problem_batch.costs, original.problem_batch.costs)
    assert loaded._init_kwargs["seed"].spawn_key == (1,)
    assert loaded.gamma == 0.02
    lockstep(original, loaded, skills, contexts, range(20, 40))


def test_numpy_scalar_arguments_are_saved_as_numbers(tmp_path):
    policy = make("cucb", c=np.float64(0.5), warmup=np.int64(3))
    policy.save(tmp_path / "r.npz")
    loaded = load_policy(tmp_path / "r.npz")
    assert (loaded.c, loaded.warmup) == (0.5, 3)


def test_the_module_doctest_runs():
    result = doctest.testmod(persist_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------------- what cannot be saved
def test_unregistered_class_cannot_be_saved(tmp_path):
    class MyGreedy(GreedyPolicy):
        pass

    with pytest.raises(TypeError, match="only registered policies can be saved"):
        save_policy(MyGreedy(PROBLEM, horizon=10), tmp_path / "r.npz")
    assert not any(tmp_path.iterdir())


def test_unsupported_argument_is_refused(tmp_path):
    policy = make("cucb", c=[2.0][0])
    policy._init_kwargs["c"] = {2.0}  # as if a set had been passed
    with pytest.raises(TypeError, match=r"constructor argument c=\{2.0\}"):
        policy.save(tmp_path / "r.npz")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("fixed", {"q": [0.1, 0.2, 0.3, 0.1, 0.2, 0.1]}),
        ("fixed", {"q": np.array([0.1, 0.2, 0.3, 0.1, 0.2, 0.1])}),
        ("fixed", {"q": {"e0": 0.5, "e2": 0.5}}),
        ("omd", {"seed": [4, 5, 6]}),
    ],
)
def test_list_array_and_mapping_arguments_are_saved(name, kwargs, skills, contexts, tmp_path):
    named = Problem(COSTS, M, PROBLEM.constraints, expert_names=[f"e{i}" for i in range(K)])
    original = make_policy(name, [named] * R, horizon=200, **{"seed": 1, **kwargs})
    play(original, skills, contexts, range(10))
    original.save(tmp_path / "r.npz")
    loaded = load_policy(tmp_path / "r.npz")
    lockstep(original, loaded, skills, contexts, range(10, 30))


# ---------------------------------------------------------------------- bad files
@pytest.fixture
def saved(tmp_path, skills, contexts) -> Path:
    policy = make("omd")
    play(policy, skills, contexts, range(12))
    path = tmp_path / "router.npz"
    policy.save(path)
    return path


def rewrite(path: Path, edit: Callable[[dict[str, Any], dict[str, bytes]], None]) -> None:
    """Apply ``edit(manifest, members)`` to a saved file, in place."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members.pop("manifest.json"))
    edit(manifest, members)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        for n, data in members.items():
            zf.writestr(n, data)


def test_error_class_is_in_the_hierarchy():
    assert issubclass(PolicyFileError, DataFormatError)
    assert issubclass(PolicyFileError, MSRouteError)
    assert issubclass(PolicyFileError, ValueError)


def test_missing_file(tmp_path):
    with pytest.raises(PolicyFileError, match=r"nope\.npz: no such file"):
        load_policy(tmp_path / "nope.npz")


@pytest.mark.parametrize("keep", [0, 3, 100, 0.5, -1, -30])
def test_truncated_file(saved, keep):
    data = saved.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    saved.write_bytes(data[:n])
    with pytest.raises(PolicyFileError, match=r"router\.npz: .*truncated"):
        load_policy(saved)


def test_corrupted_member(saved):
    data = bytearray(saved.read_bytes())
    start = data.find(b"state._q.npy")  # flip bytes inside the member's compressed data
    data[start + 40 : start + 48] = bytes(8)
    saved.write_bytes(bytes(data))
    with pytest.raises(PolicyFileError, match=r"router\.npz: unreadable policy file"):
        load_policy(saved)


def _into(path, write):
    """Write through a handle that is closed afterwards (np.save on a path appends .npy)."""
    with path.open("wb") as fh:
        write(fh)


@pytest.mark.parametrize(
    ("writer", "match"),
    [
        (lambda p: p.write_bytes(b"just some text, not a zip"), "not a zip archive"),
        (lambda p: _into(p, lambda f: np.save(f, np.arange(3))), "not a zip archive"),
        (lambda p: _into(p, lambda f: np.savez(f, q=np.arange(3))), "no manifest.json"),
    ],
)
def test_not_a_policy_file(tmp_path, writer, match):
    path = tmp_path / "x.npz"
    writer(path)
    with pytest.raises(PolicyFileError, match=match):
        load_policy(path)


def test_newer_format_version_is_refused(saved):
    rewrite(saved, lambda m, _: m.update(format_version=FORMAT_VERSION + 1, msroute_version="9"))
    newer = FORMAT_VERSION + 1
    with pytest.raises(PolicyFileError, match=rf"format version {newer} \(msroute 9\).*upgrade"):
        load_policy(saved)


def test_version_1_file_with_a_saved_last_decision_loads(skills, contexts, tmp_path):
    """Format 1 saved OMD's last decision (``_ctx``, ``_q_play``); it is dropped on load."""
    original = make("omd-contextual")
    play(original, skills, contexts, range(BEFORE))
    path = tmp_path / "v1.npz"
    original.save(path)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.full((R, K), 1.0 / K), allow_pickle=False)

    def to_v1(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        manifest["format_version"] = 1
        manifest["arrays"] += ["_ctx", "_q_play"]
        members["state._ctx.npy"] = members["state._visits.npy"]  # any array will do
        members["state._q_play.npy"] = buf.getvalue()

    rewrite(path, to_v1)
    loaded = load_policy(path)
    assert_same_state(original, loaded)
    lockstep(original, loaded, skills, contexts, range(BEFORE, BEFORE + AFTER))


def _as_version_2(path: Path) -> None:
    """Rewrite a saved file as format 2 wrote it: three more buffered streams in place of the
    Gamma sampler's generator (their contents are never read again)."""
    policy = load_policy(path)
    runs, block = policy.n_runs, policy.streams.uniforms.block
    gens = [np.random.default_rng(i).bit_generator.state for i in range(runs)]

    def to_v2(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        manifest["format_version"] = 2
        manifest["arrays"].remove("streams.gamma_state")
        del members["state.streams.gamma_state.npy"]
        for stream in ("normals", "spare_uniforms", "spare_normals"):
            manifest["state"][f"streams.{stream}.generators"] = gens
            for part, arr in (("buffer", np.zeros((runs, block))), ("pos", np.zeros(runs, int))):
                buf = io.BytesIO()
                np.lib.format.write_array(buf, arr, allow_pickle=False)
                members[f"state.streams.{stream}.{part}.npy"] = buf.getvalue()
                manifest["arrays"].append(f"streams.{stream}.{part}")

    rewrite(path, to_v2)


def test_version_2_files_load_without_their_old_streams(skills, contexts, tmp_path):
    # A policy that draws uniforms only continues exactly; Thompson sampling keeps what it
    # learned, and warns that its draws restart from its seed's new stream.
    original = make("omd")
    play(original, skills, contexts, range(BEFORE))
    original.save(tmp_path / "omd.npz")
    _as_version_2(tmp_path / "omd.npz")
    loaded = load_policy(tmp_path / "omd.npz")
    assert_same_state(original, loaded)
    lockstep(original, loaded, skills, contexts, range(BEFORE, BEFORE + AFTER))

    ts = make("ts-bwk")
    play(ts, skills, contexts, range(BEFORE))
    ts.save(tmp_path / "ts.npz")
    _as_version_2(tmp_path / "ts.npz")
    with pytest.warns(UserWarning, match="format version 2.*draws restart from its seed"):
        loaded = load_policy(tmp_path / "ts.npz")
    np.testing.assert_array_equal(loaded.posterior.alpha, ts.posterior.alpha)
    np.testing.assert_array_equal(loaded.lambda_, ts.lambda_)
    np.testing.assert_array_equal(loaded.streams.gamma_state, make("ts-bwk").streams.gamma_state)


def test_a_generator_state_of_zeros_is_refused(tmp_path, skills, contexts):
    # xoshiro256++ never leaves the all-zero state (it would draw zeros forever).
    policy = make("ts")
    play(policy, skills, contexts, range(12))
    policy.save(tmp_path / "ts.npz")

    def zero_row(_: dict[str, Any], members: dict[str, bytes]) -> None:
        state = policy.streams.gamma_state.copy()
        state[1] = 0
        buf = io.BytesIO()
        np.lib.format.write_array(buf, state, allow_pickle=False)
        members["state.streams.gamma_state.npy"] = buf.getvalue()

    rewrite(tmp_path / "ts.npz", zero_row)
    with pytest.raises(PolicyFileError, match=r"'streams\.gamma_state' has a row of zeros"):
        load_policy(tmp_path / "ts.npz")


@pytest.mark.parametrize("bad", [{"format": "other"}, {"format_version": "1"}])
def test_manifest_of_something_else(saved, bad):
    rewrite(saved, lambda m, _: m.update(bad))
    with pytest.raises(PolicyFileError, match="not an msroute policy file"):
        load_policy(saved)


def test_other_msroute_version_loads_with_a_warning(saved):
    rewrite(saved, lambda m, _: m.update(msroute_version="0.0.1"))
    with pytest.warns(UserWarning, match=r"saved by msroute 0\.0\.1"):
        policy = load_policy(saved)
    assert policy.t == 12


def test_unknown_policy_name(saved):
    rewrite(saved, lambda m, _: m.update(policy="ucb-v"))
    with pytest.raises(PolicyFileError, match=r"router\.npz: .*unknown policy 'ucb-v'"):
        load_policy(saved)


def test_state_of_the_wrong_shape_names_the_entry(saved):
    def edit(_: dict[str, Any], members: dict[str, bytes]) -> None:
        buf = io.BytesIO()
        np.save(buf, np.zeros((R, K + 1)))
        members["state._grad.npy"] = buf.getvalue()

    rewrite(saved, edit)
    with pytest.raises(PolicyFileError, match=r"'_grad' must be float64 of shape \(3, 1, 6\)"):
        load_policy(saved)


def test_missing_state_entry(saved):
    rewrite(saved, lambda m, _: m["state"].pop("t"))
    with pytest.raises(PolicyFileError, match=r"missing entries \['t'\]"):
        load_policy(saved)


def test_bad_constructor_arguments_in_the_file(saved):
    rewrite(saved, lambda m, _: m["kwargs"].update(gamma=-1.0))
    with pytest.raises(PolicyFileError, match="cannot rebuild the saved policy: gamma"):
        load_policy(saved)


class _Payload:
    """Unpickling it runs ``os.mkdir(marker)``: a side effect visible from outside."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_a_pickled_member_is_never_unpickled(saved, tmp_path):
    marker = tmp_path / "code-ran"

    def edit(_: dict[str, Any], members: dict[str, bytes]) -> None:
        buf = io.BytesIO()
        np.save(buf, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
        members["state._q.npy"] = buf.getvalue()

    rewrite(saved, edit)
    with pytest.raises(PolicyFileError, match="Object arrays cannot be loaded when allow_pickle"):
        load_policy(saved)
    assert not marker.exists()
    np.load(saved, allow_pickle=True)["state._q"]  # the payload works: loading it would run it
    assert marker.exists()


def _set_array(members: dict[str, bytes], name: str, edit: Callable[[np.ndarray], None]) -> None:
    import io

    arr = np.load(io.BytesIO(members[f"state.{name}.npy"]), allow_pickle=False).copy()
    edit(arr)
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    members[f"state.{name}.npy"] = buf.getvalue()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda m, a: _set_array(a, "_q", lambda q: q.flat.__setitem__(0, np.nan)),
            "'_q' has 1 NaN",
        ),
        (lambda m, a: _set_array(a, "_q", lambda q: q.__imul__(2.0)), "'_q' is off the floored"),
        (
            lambda m, a: _set_array(a, "_q", lambda q: q.flat.__setitem__(0, -0.5)),
            "off the floored",
        ),
        (lambda m, a: _set_array(a, "_grad", lambda g: g.fill(np.inf)), "'_grad' has .* infinite"),
        (lambda m, a: _set_array(a, "_visits", lambda v: v.fill(-3)), "'_visits' must be >= 0"),
        (lambda m, a: m["state"].update(t=-1), "'t' must be >= 0"),
        (
            lambda m, a: _set_array(a, "streams.uniforms.pos", lambda v: v.fill(10**9)),
            "'streams.uniforms.pos' must be in",
        ),
        (
            lambda m, a: _set_array(a, "streams.uniforms.buffer", lambda b: b.fill(7.0)),
            "uniforms in",
        ),
    ],
)
def test_loaded_values_are_validated_like_constructor_arguments(
    saved: Path, edit: Callable[[dict[str, Any], dict[str, bytes]], None], match: str
) -> None:
    rewrite(saved, edit)
    with pytest.raises(PolicyFileError, match=f"cannot rebuild the saved policy: .*{match}"):
        load_policy(saved)


def test_a_manifest_asking_for_absurd_sizes_is_a_policy_file_error(saved: Path) -> None:
    rewrite(saved, lambda m, _: m["problems"][0].update(m_draws=10**13))
    with pytest.raises(PolicyFileError, match=str(saved)):
        load_policy(saved)


# ---------------------------------------------------------------------- resizing
#: A new expert set: expert 2 removed, the others reordered, one new expert (index None).
OLD_INDEX = [4, 0, None, 1, 3, 5]
NEW_COSTS = np.array([COSTS[i] if i is not None else [0.4, 0.4] for i in OLD_INDEX])


@pytest.mark.parametrize("name", NAMES)
def test_a_policy_resizes_itself_keeping_each_experts_state(name, skills, contexts):
    """Every array a class declares along the expert axis follows its expert; a new expert
    gets the fresh policy's values; everything else of unchanged shape is carried."""
    policy = make(name)
    play(policy, skills, contexts, range(BEFORE))
    problem = Problem(NEW_COSTS, M, PROBLEM.constraints)
    resized = policy.resized(problem, OLD_INDEX)
    fresh = make_policy(name, problem, **policy._init_kwargs)
    assert type(resized) is type(policy) and resized.n_experts == len(OLD_INDEX)
    axes = state_walk.expert_axes(policy)
    assert bool(axes) == (name not in ("uniform", "fixed"))  # those two learn nothing per expert
    before, after, start = state_dict(policy), state_dict(resized), state_dict(fresh)
    for key, axis in axes.items():
        old = np.moveaxis(np.asarray(before[key]), axis, -1)
        new = np.moveaxis(np.asarray(after[key]), axis, -1)
        for j, i in enumerate(OLD_INDEX):
            if i is None:
                want = np.moveaxis(np.asarray(start[key]), axis, -1)[..., j]
            else:
                want = old[..., i]
            if key == "_q":  # OMD rescales q to the new expert set (checked below)
                continue
            np.testing.assert_array_equal(new[..., j], want, err_msg=f"{key}[{j}]")
    if "_q" in axes:
        q = np.asarray(after["_q"])
        np.testing.assert_allclose(q.sum(axis=-1), 1.0, atol=1e-12)
        assert np.all(q[..., 2] == pytest.approx(resized.gamma))  # the new one at the floor
    for key, value in before.items():
        if key in axes or key.startswith("streams") or not isinstance(value, np.ndarray):
            continue
        if value.shape == np.shape(after[key]) and key not in state_walk.variable_entries(policy):
            np.testing.assert_array_equal(after[key], value, err_msg=key)
    state_walk.check_state(resized)
    decision = resized.select(contexts[BEFORE])  # and it routes over the new set
    assert decision.draws.max() < len(OLD_INDEX)


def test_resized_refuses_an_index_that_does_not_fit() -> None:
    policy = make("omd")
    problem = Problem(NEW_COSTS, M, PROBLEM.constraints)
    for bad in ([0, 1, 2], [0, 1, 2, 3, 4, 9], [0, 1, 2, 3, 4, -1]):
        with pytest.raises(ValueError, match="old_index"):
            policy.resized(problem, bad)


@pytest.mark.parametrize("name", ["omd", "cbwk", "ts-bwk"])
def test_resized_under_other_bounds_restarts_the_dual_only(name, skills, contexts):
    policy = make(name)
    play(policy, skills, contexts, range(BEFORE))
    same = list(range(K))
    other = Problem(COSTS, M, Constraints(upper=[0.8, 1.2], lower=[0.2, None]))
    resized = policy.resized(other, same)
    fresh = make_policy(name, other, **policy._init_kwargs)
    before, after, start = state_dict(policy), state_dict(resized), state_dict(fresh)
    duals = [k for k in before if k.startswith("dual.")]
    assert duals
    for key, value in before.items():
        want = start[key] if key.startswith("dual.") else value
        if key == "_q" or key.startswith("streams"):
            continue
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(after[key], want, err_msg=key)
        else:
            assert after[key] == want, key
    kept = policy.resized(PROBLEM, same)  # the same bounds: the dual is kept too
    for key in duals:
        np.testing.assert_array_equal(np.asarray(state_dict(kept)[key]), np.asarray(before[key]))
