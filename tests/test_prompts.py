"""Contexts from a prompt's text: the hashed features, the context model, its file, and the
outcome tables' prompt column with ``msroute bench --contexts text``."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from msroute.cli import main
from msroute.datasets.outcomes import OutcomeTable, load_llmrouter, read_outcomes
from msroute.errors import DataFormatError, InvalidValueError
from msroute.prompts import (
    DIM,
    ContextModel,
    ContextModelError,
    feature_matrix,
    fit_context_model,
    load_context_model,
    prompt_features,
)

#: Three tasks a router should tell apart, each with its own best model.
_TASKS = (
    lambda r: f"Compute {r.integers(2, 99)} + {r.integers(2, 99)} and give the sum in \\boxed{{}}.",
    lambda r: f'def f_{r.integers(99)}(x: int) -> int:\n    """Return x times {r.integers(9)}."""',
    lambda r: f"who wrote the novel number {r.integers(99)} in the series",
)
MEANS = np.array([[0.9, 0.2, 0.3], [0.2, 0.9, 0.3], [0.3, 0.2, 0.9]])


def prompted(seed: int, p: int) -> OutcomeTable:
    """``p`` prompts of the three tasks, their category and text, graded at ``MEANS``."""
    rng = np.random.default_rng(seed)
    task = rng.integers(0, 3, p)
    return OutcomeTable(
        prompt_ids=tuple(f"q{i}" for i in range(p)),
        categories=("math", "code", "trivia"),
        category=task,
        models=("m0", "m1", "m2"),
        dims=("score",),
        scores=(rng.random((p, 1, 3)) < MEANS[task][:, None, :]).astype(float),
        cost_names=("usd",),
        costs=np.tile([1.0, 1.0, 1.0], (p, 1))[:, :, None],
        prompts=tuple(_TASKS[t](rng) for t in task),
    )


def purity(labels: np.ndarray, truth: np.ndarray) -> float:
    return sum(np.bincount(truth[labels == j]).max() for j in np.unique(labels)) / truth.size


def test_features_count_words_pairs_and_shape_the_same_everywhere():
    ids, counts = prompt_features("a b a")
    assert counts.sum() == 3 + 2 + 6  # three words, two pairs, six shape grams
    assert ids.dtype == np.int64 and np.all(np.diff(ids) > 0) and ids.max() < DIM
    again = prompt_features("a b a")
    assert np.array_equal(ids, again[0]) and np.array_equal(counts, again[1])
    # Case and punctuation are kept: a query and a question differ.
    assert not np.array_equal(prompt_features("who is it")[0], prompt_features("Who is it?")[0])
    x = feature_matrix(["a b a", "", "x"])
    assert x.shape == (3, DIM) and np.array_equal(x[0].indices, ids)


def test_a_fitted_model_separates_the_tasks_and_chooses_k_from_the_table():
    table = prompted(0, 600)
    model = fit_context_model(table.prompt_counts(), table.scores.sum(axis=1), seed=1)
    labels = model.assign_matrix(table.prompt_counts())
    assert purity(labels, table.category) > 0.95
    crit = model.info["criterion"]
    assert model.k == int(max(crit, key=lambda k: crit[k])) and len(crit) >= 3
    assert model.k >= 3  # fewer clusters than tasks would mix two best models
    other = prompted(1, 300)  # prompts the model never saw
    assert purity(model.assign_texts(other.prompts), other.category) > 0.95
    one_by_one = model.assign_texts(other.prompts)
    assert np.array_equal(one_by_one, model.assign_matrix(feature_matrix(other.prompts)))
    assert model.context_of("") == model.names[model.fallback]  # no known word: the fallback
    assert model.info["by"] == "scores" and model.format_version == 2
    with pytest.raises(InvalidValueError, match="give the rewards"):
        fit_context_model(table.prompts)
    with pytest.raises(InvalidValueError, match="give k"):
        fit_context_model(table.prompts, by="words")
    with pytest.raises(InvalidValueError, match="by =="):
        fit_context_model(table.prompts, table.scores.sum(axis=1), by="topics")
    fixed = fit_context_model(table.prompts, k=2, seed=1, by="words")
    assert fixed.k == 2 and fixed.names == ("text-0", "text-1") and fixed.format_version == 1


#: Two topics that favour different models, each asked in two styles of many more words.
_TOPICS = ("chemistry", "poetry")
_STYLES = (
    lambda n, topic: f"please answer briefly: what is item {n} of {topic}?",
    lambda n, topic: (
        f"Q: Consider the following passage, given in full below; read it with care and "
        f"answer the question at its end. The passage describes item {n} at length, with "
        f"every detail a careful reader needs. What is item {n} of {topic}? A:"
    ),
)


def styled(seed: int, p: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``p`` prompts (their texts, topics and scores of two models): the style carries most of
    the words, the topic alone which model answers well."""
    rng = np.random.default_rng(seed)
    topic, style = rng.integers(0, 2, p), rng.integers(0, 2, p)
    texts = [_STYLES[s](rng.integers(999), _TOPICS[t]) for t, s in zip(topic, style, strict=True)]
    means = np.array([[0.9, 0.1], [0.1, 0.9]])[topic]
    return texts, topic, (rng.random((p, 2)) < means).astype(float)


def test_clusters_by_scores_part_prompts_that_favour_different_models_where_words_do_not():
    texts, topic, scores = styled(0, 400)
    by_scores = fit_context_model(texts, scores, k=2, seed=0)
    by_words = fit_context_model(texts, k=2, seed=0, by="words")
    assert purity(by_scores.assign_texts(texts), topic) > 0.95
    assert purity(by_words.assign_texts(texts), topic) < 0.7  # the words part the styles
    new_texts, new_topic, _ = styled(1, 200)
    assert purity(by_scores.assign_texts(new_texts), new_topic) > 0.95
    # k from the table: the criterion's best candidate, which keeps the topics apart.
    chosen = fit_context_model(texts, scores, seed=0)
    crit = chosen.info["criterion"]
    assert chosen.k == int(max(crit, key=lambda k: crit[k])) >= 2
    assert purity(chosen.assign_texts(new_texts), new_topic) > 0.95


@pytest.mark.parametrize("by", ["scores", "words"])
def test_a_model_file_round_trips_bit_for_bit_and_a_damaged_one_is_refused(tmp_path, by):
    table = prompted(2, 200)
    model = fit_context_model(table.prompts, table.scores.sum(axis=1), k=3, seed=0, by=by)
    path = tmp_path / "ctx.npz"
    sha = model.save(path)
    again = fit_context_model(table.prompts, table.scores.sum(axis=1), k=3, seed=0, by=by)
    assert sha == model.sha256 == again.sha256
    back = load_context_model(path)
    assert back.sha256 == sha and back.names == model.names
    assert np.array_equal(back.assign_texts(table.prompts), model.assign_texts(table.prompts))
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ContextModelError, match=r"ctx\.npz"):
        load_context_model(path)
    with pytest.raises(ContextModelError, match="cannot read"):
        load_context_model(tmp_path / "missing.npz")
    with pytest.raises(InvalidValueError, match="fallback"):
        dataclasses.replace(model, fallback=5)
    assert isinstance(ContextModel.from_bytes(model.to_bytes()), ContextModel)


DATA = Path(__file__).parent / "data"


def test_a_model_of_format_version_1_loads_and_assigns_as_before():
    """``context_model_v1.npz`` was fitted and its 40 prompts assigned by msroute before the
    clusters by scores (format version 2): it loads, assigns them the same, and its bytes are
    those a journal recorded."""
    expected = json.loads((DATA / "context_model_v1.json").read_text())
    model = load_context_model(DATA / "context_model_v1.npz")
    assert model.format_version == 1 and model.idf is None and model.bias is None
    assert model.assign_texts(expected["prompts"]).tolist() == expected["clusters"]
    counts = feature_matrix(expected["prompts"])
    assert model.assign_matrix(counts).tolist() == expected["clusters"]
    assert model.sha256 == expected["sha256"]


def test_a_model_by_scores_needs_its_idf_and_bias():
    texts, _, scores = styled(2, 120)
    model = fit_context_model(texts, scores, k=2, seed=0)
    assert model.idf is not None and model.bias is not None
    with pytest.raises(InvalidValueError, match="both idf and bias"):
        dataclasses.replace(model, bias=None)
    with pytest.raises(InvalidValueError, match="shape"):
        dataclasses.replace(model, bias=np.zeros(3))
    from msroute._npzip import read_zip, zip_bytes

    manifest, arrays = read_zip(model.to_bytes(), "m", "context model", ContextModelError)
    del arrays["bias"]
    with pytest.raises(ContextModelError, match="not a valid context model"):
        ContextModel.from_bytes(zip_bytes(json.dumps(manifest), arrays), "m")
    manifest["format_version"] = 4
    with pytest.raises(ContextModelError, match="format version 1, 2 or 3"):
        ContextModel.from_bytes(zip_bytes(json.dumps(manifest), arrays), "m")


def write_prompted(path, t: OutcomeTable) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt_id", "category", "prompt", *t.models, *(f"{m}|usd" for m in t.models)])
        for i in range(t.n_prompts):
            row = [t.prompt_ids[i], t.categories[t.category[i]], t.prompts[i]]
            w.writerow([*row, *t.scores[i, 0], *t.costs[i, :, 0]])


def test_the_outcome_format_reads_a_prompt_column_and_keeps_it_in_subsets(tmp_path):
    table = prompted(3, 30)
    write_prompted(tmp_path / "t.csv", table)
    from msroute.datasets.outcomes import load_outcomes

    back = load_outcomes(tmp_path / "t.csv")
    assert back.prompts == table.prompts and back.models == ("m0", "m1", "m2")
    part = back.subset(np.array([4, 2]))
    assert part.prompts == (table.prompts[4], table.prompts[2])
    assert part.prompt_counts().shape == (2, DIM)
    line = '{"prompt_id": "a", "prompt": 3, "m": 1, "m|usd": 1}'
    with pytest.raises(DataFormatError, match="column 'prompt': expected the prompt's text"):
        read_outcomes(line, "x.jsonl", jsonl=True)
    plain = dataclasses.replace(back, prompts=None)
    assert plain.digest() != back.digest() and not plain.has_text
    with pytest.raises(InvalidValueError, match="no prompt column"):
        plain.prompt_counts()


def test_the_packaged_table_ships_features_not_texts():
    t = load_llmrouter()
    assert t.prompts is None and t.features is not None and t.features.shape == (6108, DIM)
    # Only buckets shared by two prompts: a context model's vocabulary holds no other.
    df = np.bincount(t.features.indices, minlength=DIM)
    assert df[df > 0].min() >= 2


def test_bench_contexts_text_routes_by_clusters_of_the_prompts(tmp_path, capsys):
    path = tmp_path / "mine.csv"
    write_prompted(path, prompted(4, 600))
    out = tmp_path / "out"
    args = ["bench", "--outcomes", str(path), "--seeds", "2", "--horizon", "300", "--m-draws"]
    args += ["1", "--policies", "omd", "--budgets", "1.0", "--out", str(out)]
    args += ["--jobs", "1", "--quiet", "--no-plot", "--warm-split", "0.5"]
    assert main([*args, "--contexts", "text"]) == 0
    with (out / "bench-mine.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["contexts"] for r in rows} == {"text"} and len(rows) == 2
    assert all(int(r["n_contexts"]) >= 3 for r in rows)
    assert main([*args, "--contexts", "category"]) == 0
    with (out / "bench-mine.csv").open() as fh:
        category = list(csv.DictReader(fh))
    # The comparator is the same per-category OPT^ctx whatever the router sees.
    assert [r["opt_reward"] for r in rows] == [r["opt_reward"] for r in category]
    plain = tmp_path / "plain.csv"
    plain.write_text("prompt_id,m0,m0|usd\na,1,1\nb,0,1\n")
    assert main(["bench", "--outcomes", str(plain), "--contexts", "text", "--quiet"]) == 2
    assert "has no prompt column" in capsys.readouterr().err
