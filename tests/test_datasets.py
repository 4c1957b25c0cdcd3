"""Crowd data loading and the Section 6.1 instance builder."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from msroute.datasets import (
    DATASETS,
    TREC2010_SHA256,
    WEB_SHA256,
    CrowdData,
    Instance,
    build_instance,
    load_crowd,
    sample_instance,
)
from msroute.datasets import crowd as crowd_module
from msroute.datasets import instance as instance_module
from msroute.errors import DataFormatError, MSRouteError

SHARED_TREC = Path(__file__).resolve().parents[2] / "shared" / "data" / "trec2010"
SHARED_WEB = Path(__file__).resolve().parents[2] / "shared" / "data" / "web"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# A hand-made data set (task worker response / task gold). Tasks 1..6 have a gold label, task 7
# has none (its annotations are dropped by the inner join). Labels are multi-class (task 4: 2).
HAND_CROWD = """\
1 10 1
2 10 1
3 10 1
4 10 2
5 10 0
7 10 1
1 20 0
4 20 2
2 20 0
6 30 0
3 30 1
7 30 0
1 40 1
2 40 0
3 40 1
4 40 2
5 40 0
6 40 1
"""
HAND_TRUTH = "1 1\n2 0\n3 1\n4 2\n5 0\n6 1\n"


@pytest.fixture
def hand(tmp_path: Path) -> CrowdData:
    return load_crowd(
        write(tmp_path / "crowd.txt", HAND_CROWD), write(tmp_path / "truth.txt", HAND_TRUTH)
    )


@pytest.fixture(scope="module")
def trec() -> CrowdData:
    return load_crowd()


# --------------------------------------------------------------------------- TREC 2010
def test_trec_statistics_of_the_paper(trec: CrowdData) -> None:
    assert (trec.n_workers, trec.n_tasks, trec.n_annotations) == (677, 2275, 12863)
    reliable = trec.reliable_workers()
    assert reliable.size == 270
    assert np.all(np.diff(reliable) > 0)  # sorted, distinct
    counts = dict(zip(trec.worker_ids.tolist(), trec.annotation_counts.tolist(), strict=True))
    assert all(counts[w] >= 5 for w in reliable.tolist())
    assert sum(c >= 5 for c in counts.values()) == 270
    assert trec.annotation_counts.sum() == trec.n_annotations


def test_packaged_files_match_their_checksums() -> None:
    folder = resources.files("msroute.datasets").joinpath("data")
    for checksums, shared_dir in ((TREC2010_SHA256, SHARED_TREC), (WEB_SHA256, SHARED_WEB)):
        for name, digest in checksums.items():
            raw = folder.joinpath(name).read_bytes()
            assert hashlib.sha256(raw).hexdigest() == digest
            shared = shared_dir / name
            if shared.exists():  # the packaged copy is the project's reference data
                assert shared.read_bytes() == raw
    names = {n for _, crowd, truth in DATASETS.values() for n in (crowd, truth)}
    assert names == {*TREC2010_SHA256, *WEB_SHA256}


def test_web_statistics_of_its_readme() -> None:
    """The join and reliability counts stated in the web data's README (CRLF, tab-separated,
    grades 1-5): 176 workers, 2,653 tasks, 15,539 annotations, 139 reliable workers."""
    web = load_crowd(dataset="web")
    assert (web.n_workers, web.n_tasks, web.n_annotations) == (176, 2653, 15539)
    assert web.reliable_workers().size == 139
    assert np.unique(web.ann_gold).tolist() == [1, 2, 3, 4, 5]
    assert web.source.startswith("web relevance")
    # An independent count straight from the text: a line per annotation; kept iff gold known.
    folder = resources.files("msroute.datasets").joinpath("data")
    gold = dict(
        line.split("\t") for line in folder.joinpath("web_truth.txt").read_text().splitlines()
    )
    rows = [line.split("\t") for line in folder.joinpath("web_crowd.txt").read_text().splitlines()]
    assert len(rows) == 15567
    kept = [r for r in rows if r[0] in gold]
    assert len(kept) == web.n_annotations
    hits = sum(r[2] == gold[r[0]] for r in kept)
    assert hits == int(web.correct.sum())


def test_web_instances_follow_the_same_protocol() -> None:
    web = load_crowd(dataset="web")
    inst = sample_instance(web, n_experts=50, n_dims=3, seed=7)
    assert inst.skills_base.shape == (3, 50) and int(inst.costs[:, 1].sum()) == 10
    assert np.isin(inst.workers, web.reliable_workers()).all()
    assert inst.costs[:, 0].max() == 1.0
    with pytest.raises(DataFormatError, match="only 139 reliable workers"):
        sample_instance(web, n_experts=140, seed=0)


def test_dataset_names_are_checked() -> None:
    with pytest.raises(ValueError, match=r"dataset == 'imdb'.*trec, web"):
        load_crowd(dataset="imdb")
    with pytest.raises(ValueError, match="not both"):
        load_crowd("a.txt", "b.txt", dataset="web")


@pytest.fixture
def corrupted_checksum(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    crowd_module._load_packaged.cache_clear()
    monkeypatch.setattr(
        crowd_module, "TREC2010_SHA256", {**TREC2010_SHA256, "trec_truth.txt": "0" * 64}
    )
    monkeypatch.setattr(crowd_module, "WEB_SHA256", {**WEB_SHA256, "web_crowd.txt": "0" * 64})
    yield
    crowd_module._load_packaged.cache_clear()


def test_packaged_data_fails_loudly_on_a_bad_checksum(corrupted_checksum: None) -> None:
    with pytest.raises(DataFormatError, match=r"trec_truth\.txt .*fails its SHA-256 check"):
        load_crowd()
    with pytest.raises(DataFormatError, match=r"web_crowd\.txt .*web relevance.*SHA-256"):
        load_crowd(dataset="web")


@pytest.mark.skipif(not SHARED_TREC.exists(), reason="shared TREC files not available")
def test_explicit_paths_give_the_packaged_data(trec: CrowdData) -> None:
    data = load_crowd(SHARED_TREC / "trec_crowd.txt", str(SHARED_TREC / "trec_truth.txt"))
    for name in ("ann_task", "ann_worker", "ann_response", "ann_gold", "accuracy"):
        assert np.array_equal(getattr(data, name), getattr(trec, name))


def test_trec_accuracy_is_the_mean_of_correct(trec: CrowdData) -> None:
    w = int(trec.worker_ids[17])
    mine = trec.ann_worker == w
    expected = np.mean(trec.ann_response[mine] == trec.ann_gold[mine])
    assert trec.accuracy[17] == expected
    assert trec.annotation_counts[17] == mine.sum()


# --------------------------------------------------------------------------- loading
def test_inner_join_and_per_worker_statistics(hand: CrowdData) -> None:
    assert hand.worker_ids.tolist() == [10, 20, 30, 40]
    assert hand.task_ids.tolist() == [1, 2, 3, 4, 5, 6]  # task 7 has no gold label
    assert hand.n_annotations == 16  # 18 rows minus the two on task 7
    assert hand.annotation_counts.tolist() == [5, 3, 2, 6]
    assert hand.accuracy.tolist() == [4 / 5, 2 / 3, 1 / 2, 1.0]
    assert hand.reliable_workers(min_annotations=3).tolist() == [10, 20, 40]
    assert hand.reliable_workers(min_annotations=7).tolist() == []


def test_blank_lines_and_repeated_identical_gold_are_accepted(tmp_path: Path) -> None:
    crowd = write(tmp_path / "c.txt", "\n1\t5\t1\r\n\n2 5 0\n   \n")
    truth = write(tmp_path / "t.txt", "1 1\n2 1\n1 1\n")
    data = load_crowd(crowd, truth)
    assert (data.n_annotations, data.n_tasks) == (2, 2)
    assert data.accuracy.tolist() == [0.5]


@pytest.mark.parametrize(
    "text",
    [
        "1 10 1\n2 10 0\n",
        "\n1\t5\t1\r\n\n2 5 0\n   \n",
        "+1 -10 007\n-0 999999999999999999 +5",
        "3 4 5",
    ],
)
def test_the_bulk_reading_gives_the_line_by_line_table(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plainly well-formed text is read in bulk (``_plain_table``), with the very table and
    line numbers that reading it line by line gives."""
    bulk = crowd_module._plain_table(text, 3)
    assert bulk is not None
    monkeypatch.setattr(crowd_module, "_plain_table", lambda text, ncol: None)
    table, lines = crowd_module._parse_table(text, "c.txt", ("task", "worker", "response"))
    assert table.dtype == bulk[0].dtype == lines.dtype == bulk[1].dtype == np.int64
    assert table.tolist() == bulk[0].tolist() and lines.tolist() == bulk[1].tolist()


@pytest.mark.parametrize(
    "text",
    [
        "1 10 1\n2 10\n",  # a line short
        "1 10 1\r2 10 0\n",  # a lone CR ends a line
        "1 10 1\n2 10 0\r",
        "1 10 1\n2 1-0 0\n",  # a sign amid a field
        "1 10 1\n2 - 0\n",  # a sign alone
        "1 10 1\n2 1234567890123456789 0\n",  # 19 digits: may not fit in 64 bits
        "1 10 1\n2 10 x\n",
        "1 10 1\n2 10 \u0663\n",
        "1 10 1\f2 10 0\n",
        "\n \n",
    ],
)
def test_the_bulk_reading_leaves_other_texts_to_the_line_by_line_one(text: str) -> None:
    """Anything not plainly well formed is left to ``_parse_table``'s line by line reading
    (which names a malformed file's problem), valid or not."""
    assert crowd_module._plain_table(text, 3) is None


def test_arrays_are_read_only(hand: CrowdData) -> None:
    with pytest.raises(ValueError, match="read-only"):
        hand.accuracy[0] = 0.0


GOOD_CROWD = "1 10 1\n2 10 0\n"
GOOD_TRUTH = "1 1\n2 1\n"


@pytest.mark.parametrize(
    ("crowd", "truth", "error", "match"),
    [
        (
            "1 10 1\n2 10 x\n",
            GOOD_TRUTH,
            DataFormatError,
            r"c\.txt, line 2: response must be an integer, got 'x'",
        ),
        ("1 10 1\n2 10 1.5\n", GOOD_TRUTH, DataFormatError, r"c\.txt, line 2: response .*'1\.5'"),
        ("1 10 1\n2 1_0 1\n", GOOD_TRUTH, DataFormatError, r"c\.txt, line 2: worker .*'1_0'"),
        ("1 10 1\n2 \u0663 1\n", GOOD_TRUTH, DataFormatError, r"c\.txt, line 2: worker"),
        (
            "1 10 1\n\n2 99999999999999999999 1\n",
            GOOD_TRUTH,
            DataFormatError,
            r"c\.txt, line 3: worker .*64 bits",
        ),
        (GOOD_CROWD, "1 1\ntwo 1\n", DataFormatError, r"t\.txt, line 2: task must be an integer"),
        (
            "1 10 1\n2 10\n",
            GOOD_TRUTH,
            DataFormatError,
            r"c\.txt, line 2: expected 3 .*got 2 field",
        ),
        ("1 10 1 0\n", GOOD_TRUTH, DataFormatError, r"c\.txt, line 1: expected 3 .*got 4 field"),
        (GOOD_CROWD, "1 1 1\n", DataFormatError, r"t\.txt, line 1: expected 2 .*\(task gold\)"),
        ("", GOOD_TRUTH, DataFormatError, r"c\.txt is empty"),
        (GOOD_CROWD, "\n  \n", DataFormatError, r"t\.txt is empty"),
        (
            GOOD_CROWD,
            "1 1\n2 1\n1 2\n",
            DataFormatError,
            r"t\.txt, line 3: task 1 has gold label 2 but line 1",
        ),
        (GOOD_CROWD, "3 1\n", DataFormatError, r"no task of .*c\.txt has a gold label in .*t\.txt"),
    ],
)
def test_malformed_files(
    tmp_path: Path, crowd: str, truth: str, error: type[Exception], match: str
) -> None:
    c = write(tmp_path / "c.txt", crowd)
    t = write(tmp_path / "t.txt", truth)
    with pytest.raises(error, match=match):
        load_crowd(c, t)


def test_binary_file_is_a_format_error(tmp_path: Path) -> None:
    c = tmp_path / "c.txt"
    c.write_bytes(b"1 2 3\n\xff\xfe\n")
    with pytest.raises(DataFormatError, match=r"c\.txt is not a text file"):
        load_crowd(c, write(tmp_path / "t.txt", GOOD_TRUTH))


def test_one_path_alone_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="truth_path is missing"):
        load_crowd(write(tmp_path / "c.txt", GOOD_CROWD))
    with pytest.raises(ValueError, match="crowd_path is missing"):
        load_crowd(truth_path=write(tmp_path / "t.txt", GOOD_TRUTH))


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_crowd(tmp_path / "nope.txt", write(tmp_path / "t.txt", GOOD_TRUTH))


# --------------------------------------------------------------------------- build_instance
def test_build_instance_by_hand(hand: CrowdData) -> None:
    # Sorted tasks 1..6 -> groups j mod 3: {1, 4}, {2, 5}, {3, 6}.
    # Worker 30: task 3 right, task 6 wrong (task 7 dropped) -> 1/2 overall; only group 2.
    # Worker 10: 1 ok, 4 ok | 2 wrong, 5 ok | 3 ok               -> 4/5 overall.
    # Worker 20: 1 wrong, 4 ok | 2 ok | (none: imputed 2/3)       -> 2/3 overall.
    inst = build_instance(hand, [30, 10, 20], n_dims=3, n_flagged=2)
    assert inst.workers == (30, 10, 20)
    expected_skills = [
        [1 / 2, 2 / 2, 1 / 2],
        [1 / 2, 1 / 2, 1 / 1],
        [1 / 2, 1 / 1, 2 / 3],
    ]
    np.testing.assert_allclose(inst.skills_base, expected_skills, rtol=0, atol=1e-15)
    # Workload = count / the pool's largest count (5, worker 10; worker 40's 6 is not in the
    # pool); expert flag for the 2 most accurate of the pool (10: 0.8, 20: 0.667).
    np.testing.assert_allclose(inst.costs, [[2 / 5, 0], [5 / 5, 1], [3 / 5, 1]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(inst.accuracy, [1 / 2, 4 / 5, 2 / 3])
    assert inst.annotations.tolist() == [2, 5, 3]
    assert (inst.n_dims, inst.n_experts, inst.n_flagged) == (3, 3, 2)
    assert inst.cost_names == ("workload", "expert")
    one = build_instance(hand, [30, 10, 20], n_dims=3, n_flagged=1)
    assert one.costs[:, 1].tolist() == [0.0, 1.0, 0.0]


def test_build_instance_single_dimension_is_overall_accuracy(hand: CrowdData) -> None:
    inst = build_instance(hand, [40, 20], n_dims=1, n_flagged=0)
    assert inst.skills_base.tolist() == [[1.0, 2 / 3]]
    assert inst.costs[:, 1].tolist() == [0.0, 0.0]


def test_expert_ties_go_to_the_lower_worker_id(tmp_path: Path) -> None:
    # Workers 7 and 3 both at accuracy 1/2 (1 of 2 and 2 of 4), worker 5 at 0.
    crowd = "1 7 1\n2 7 0\n1 3 1\n2 3 0\n3 3 1\n4 3 0\n1 5 0\n"
    truth = "1 1\n2 1\n3 1\n4 1\n"
    data = load_crowd(write(tmp_path / "c.txt", crowd), write(tmp_path / "t.txt", truth))
    inst = build_instance(data, [7, 5, 3], n_dims=2, n_flagged=1)
    assert inst.accuracy[0] == inst.accuracy[2]
    assert inst.costs[:, 1].tolist() == [0.0, 0.0, 1.0]
    assert build_instance(data, [7, 5, 3], n_dims=2, n_flagged=2).costs[:, 1].tolist() == [
        1.0,
        0.0,
        1.0,
    ]


def test_instance_round_trips_through_json(hand: CrowdData) -> None:
    inst = build_instance(hand, [30, 10, 20], n_dims=2, n_flagged=1)
    back = Instance.from_dict(json.loads(json.dumps(inst.to_dict())))
    assert back.workers == inst.workers
    for name in ("skills_base", "costs", "accuracy", "annotations"):
        assert np.array_equal(getattr(back, name), getattr(inst, name))
    assert (back.n_flagged, back.cost_names, back.source) == (1, inst.cost_names, inst.source)
    with pytest.raises(ValueError, match="read-only"):
        inst.costs[0, 0] = 9.0


@pytest.mark.parametrize(
    ("workers", "kwargs", "error", "match"),
    [
        ([10, 99, 98], {}, DataFormatError, r"unknown worker id\(s\) \[99, 98\]"),
        ([10, 20, 10], {}, DataFormatError, r"repeats id\(s\) \[10\]"),
        ([], {}, DataFormatError, "worker list is empty"),
        ([[10, 20]], {}, DataFormatError, "must be 1-d"),
        ([10.0, 20.0], {}, TypeError, "worker ids must be integers"),
        ([10, 20], {"n_dims": 0}, ValueError, "n_dims == 0, must be >= 1"),
        ([10, 20], {"n_dims": 7}, ValueError, r"n_dims == 7, must be <= the number of tasks \(6\)"),
        ([10, 20], {"n_flagged": 3}, ValueError, "n_flagged == 3, must be <= the pool size K = 2"),
        ([10, 20], {"n_flagged": -1}, ValueError, "n_flagged == -1"),
    ],
)
def test_build_instance_bad_input(
    hand: CrowdData, workers: list[int], kwargs: dict[str, int], error: type[Exception], match: str
) -> None:
    args = {"n_dims": 2, "n_flagged": 1, **kwargs}
    with pytest.raises(error, match=match):
        build_instance(hand, workers, **args)


def test_build_instance_needs_crowd_data() -> None:
    with pytest.raises(TypeError, match="data must be a CrowdData"):
        build_instance({"workers": []}, [1], n_dims=1)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- sample_instance
def test_sample_instance_on_trec(trec: CrowdData) -> None:
    inst = sample_instance(trec, n_experts=50, n_dims=3, seed=2024)
    ids = np.array(inst.workers)
    assert inst.skills_base.shape == (3, 50) and inst.costs.shape == (50, 2)
    assert np.all(np.diff(ids) > 0)
    assert np.isin(ids, trec.reliable_workers()).all()
    assert inst.costs[:, 0].max() == 1.0 and np.all(inst.costs[:, 0] > 0)
    assert inst.costs[:, 1].sum() == 10
    top = np.lexsort((ids, -inst.accuracy))[:10]
    assert np.flatnonzero(inst.costs[:, 1]).tolist() == sorted(top.tolist())
    assert np.all((inst.skills_base >= 0) & (inst.skills_base <= 1))
    same = sample_instance(trec, n_experts=50, n_dims=3, seed=2024)
    assert same.workers == inst.workers and np.array_equal(same.skills_base, inst.skills_base)
    assert sample_instance(trec, n_experts=50, n_dims=3, seed=2025).workers != inst.workers
    seq = np.random.SeedSequence(2024)
    assert sample_instance(trec, 50, 3, seq).workers == inst.workers


def test_sample_instance_draws_uniformly_from_the_reliable_pool(hand: CrowdData) -> None:
    # Reliable at 3 annotations: workers 10, 20, 40; each pool of 2 leaves one out.
    left_out = {10: 0, 20: 0, 40: 0}
    n = 3000
    for seed in range(n):
        inst = sample_instance(
            hand, n_experts=2, n_dims=2, seed=seed, n_flagged=1, min_annotations=3
        )
        assert 30 not in inst.workers
        (missing,) = {10, 20, 40} - set(inst.workers)
        left_out[missing] += 1
    for count in left_out.values():  # 1/3 each; 5 standard errors is about 0.043
        assert abs(count / n - 1 / 3) < 0.045


@pytest.mark.parametrize(
    ("seed", "error", "match"),
    [
        (-1, ValueError, r"seed == -1, must be >= 0"),
        (1.5, TypeError, r"seed must be an int or a numpy SeedSequence, got float"),
        ("3", TypeError, r"seed must be an int or a numpy SeedSequence, got str"),
        ([1, 2], TypeError, r"seed must be an int or a numpy SeedSequence, got list"),
        (True, TypeError, r"seed must be an int or a numpy SeedSequence, got bool"),
    ],
)
def test_sample_instance_refuses_a_bad_seed(
    hand: CrowdData, seed: object, error: type[Exception], match: str
) -> None:
    # msroute's own errors (InvalidValueError, InvalidTypeError), as every other seed gets;
    # numpy alone raised a bare ValueError for -1 and read a list or "3" as entropy.
    with pytest.raises(error, match=match) as info:
        sample_instance(hand, 2, 2, seed, n_flagged=1, min_annotations=3)  # type: ignore[arg-type]
    assert isinstance(info.value, MSRouteError)


def test_sample_instance_needs_crowd_data() -> None:
    with pytest.raises(TypeError, match="data must be a CrowdData"):
        sample_instance(None, 2, 1, seed=0)  # type: ignore[arg-type]


def test_too_few_reliable_workers(trec: CrowdData, hand: CrowdData) -> None:
    with pytest.raises(DataFormatError, match=r"only 270 reliable workers .* fewer than the 271"):
        sample_instance(trec, n_experts=271, seed=0)
    with pytest.raises(DataFormatError, match=r"only 3 reliable workers \(>= 3 annotations\)"):
        sample_instance(hand, n_experts=4, n_dims=2, seed=0, n_flagged=1, min_annotations=3)


@pytest.mark.parametrize("module", [crowd_module, instance_module])
def test_doctests_of_the_module(module: object) -> None:
    import doctest

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_contiguous_split_groups_blocks_of_sorted_tasks() -> None:
    """Four tasks, two groups: round-robin {1, 3} / {2, 4}, contiguous {1, 2} / {3, 4}."""
    from msroute.datasets import CrowdData, build_instance

    # One worker, right on tasks 1 and 2, wrong on 3 and 4.
    data = CrowdData([1, 2, 3, 4], [5, 5, 5, 5], [1, 1, 0, 0], [1, 1, 1, 1])
    rr = build_instance(data, [5], n_dims=2, n_flagged=0)
    blocks = build_instance(data, [5], n_dims=2, n_flagged=0, split="contiguous")
    assert rr.skills_base[:, 0].tolist() == [0.5, 0.5]
    assert blocks.skills_base[:, 0].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="split"):
        build_instance(data, [5], n_dims=2, n_flagged=0, split="random")


def test_an_exact_duplicate_annotation_counts_once_with_a_warning(tmp_path: Path) -> None:
    from msroute.errors import DataWarning

    truth = write(tmp_path / "t.txt", "1 1\n2 0\n")
    once = load_crowd(write(tmp_path / "a.txt", "1 5 1\n2 5 1\n1 6 0\n"), truth)
    text = "1 5 1\n2 5 1\n1 5 1\n1 6 0\n1 5 1\n"
    with pytest.warns(DataWarning, match=r"b\.txt: 2 exact duplicate.*first repeat is line 3"):
        twice = load_crowd(write(tmp_path / "b.txt", text), truth)
    assert twice.n_annotations == once.n_annotations == 3
    np.testing.assert_array_equal(twice.annotation_counts, once.annotation_counts)
    np.testing.assert_array_equal(twice.accuracy, once.accuracy)
    np.testing.assert_array_equal(
        twice.reliable_workers(min_annotations=2), once.reliable_workers(min_annotations=2)
    )


def test_conflicting_duplicate_annotations_name_both_lines(tmp_path: Path) -> None:
    truth = write(tmp_path / "t.txt", "1 1\n2 0\n")
    crowd = write(tmp_path / "c.txt", "1 5 1\n2 5 1\n\n1 5 0\n")
    with pytest.raises(
        DataFormatError, match=r"c\.txt, line 4: worker 5 labels task 1 0, but line 1 gives it 1"
    ):
        load_crowd(crowd, truth)
