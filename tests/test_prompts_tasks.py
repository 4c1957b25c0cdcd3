"""Contexts from a prompt's text by task: a classifier of an eval table's task labels
(``msroute.prompts.tasks``), its held-out contexts for a warm start, its file, the fallback to
clusters without labels, the errors of a bad label column, and a router fitted that way."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
import scipy.sparse as sp

from _router import decides_as_twin
from msroute._npzip import read_zip, zip_bytes
from msroute.errors import InvalidValueError, RouterConfigError
from msroute.prompts import (
    ContextModel,
    ContextModelError,
    feature_matrix,
    fit_context_model,
    load_context_model,
)
from msroute.prompts.features import row_keys
from msroute.router import Router
from test_prompts import prompted, write_prompted
from test_router_text import config, traffic


def labels_of(table):
    return [table.categories[i] for i in table.category]


def test_the_classifier_learns_separable_tasks_and_names_its_contexts_after_them():
    table = prompted(0, 300)
    model = fit_context_model(table.prompts, table.scores.sum(axis=1), labels=labels_of(table))
    assert model.info["by"] == "task" and model.format_version == 3
    assert model.names == tuple(dict.fromkeys(labels_of(table)))  # in order of appearance
    assert sorted(model.names) == ["code", "math", "trivia"]
    assert model.info["held_out_accuracy"] > 0.95
    new = prompted(1, 300)  # prompts the model never saw
    assigned = model.assign_texts(new.prompts)
    assert np.mean(np.array(model.names)[assigned] == np.array(labels_of(new))) > 0.95
    assert np.array_equal(assigned, model.assign_matrix(feature_matrix(new.prompts)))
    assert model.context_of("") == model.names[model.fallback]
    # The table's names, not clusters: a given k or an unknown ``by`` is refused.
    with pytest.raises(InvalidValueError, match="one context per task"):
        fit_context_model(table.prompts, labels=labels_of(table), by="task", k=3)
    with pytest.raises(InvalidValueError, match="by =="):
        fit_context_model(table.prompts, labels=labels_of(table), by="topics")


def test_a_warm_start_sees_the_fitted_prompts_in_their_held_out_contexts():
    # Two tasks of one distribution of texts: fitted on them, the classifier puts most prompts
    # in their own task, a fit without them only as often as chance.
    table = prompted(2, 240)
    rng = np.random.default_rng(0)
    labels = [("a", "b")[i] for i in rng.integers(0, 2, table.n_prompts)]
    model = fit_context_model(table.prompts, labels=labels, seed=3)
    counts = table.prompt_counts()
    truth = np.array([model.names.index(label) for label in labels])
    in_sample, held = model.assign_matrix(counts), model.eval_contexts(counts)
    assert np.mean(in_sample == truth) > 0.8
    assert np.mean(held == truth) < 0.65
    assert model.info["held_out_accuracy"] < 0.65
    # Prompts the model was not fitted on are assigned as any prompt.
    other = feature_matrix([f"{text} Thanks!" for text in prompted(3, 50).prompts])
    assert np.array_equal(model.eval_contexts(other), model.assign_matrix(other))
    # A prompt is found by its features, whatever its row and however its buckets are stored.
    rows = np.array([5, 0, 7])
    sub = sp.csr_matrix(counts[rows])
    sub.sort_indices()
    spans = list(itertools.pairwise(sub.indptr))
    shuffled = sp.csr_matrix(
        (
            np.concatenate([sub.data[a:b][::-1] for a, b in spans]),
            np.concatenate([sub.indices[a:b][::-1] for a, b in spans]),
            sub.indptr,
        ),
        shape=sub.shape,
    )
    assert not shuffled.has_sorted_indices
    assert np.array_equal(row_keys(shuffled), row_keys(counts)[rows])
    assert len(set(row_keys(counts).tolist())) == len({t for t in table.prompts})
    assert np.array_equal(model.eval_contexts(counts[rows]), held[rows])
    # Another seed, other folds: the same classifier, other held-out contexts.
    again = fit_context_model(table.prompts, labels=labels, seed=4)
    assert np.array_equal(again.weights, model.weights)
    assert not np.array_equal(again.eval_contexts(counts), held)


def test_a_task_model_file_round_trips_bit_for_bit_and_a_damaged_one_is_refused(tmp_path):
    table = prompted(4, 200)
    model = fit_context_model(table.prompts, labels=labels_of(table), seed=1)
    path = tmp_path / "tasks.npz"
    sha = model.save(path)
    again = fit_context_model(table.prompts, labels=labels_of(table), seed=1)
    assert sha == model.sha256 == again.sha256
    back = load_context_model(path)
    assert back.to_bytes() == model.to_bytes() and back.names == model.names
    counts = table.prompt_counts()
    assert np.array_equal(back.eval_contexts(counts), model.eval_contexts(counts))
    assert np.array_equal(back.assign_texts(table.prompts), model.assign_texts(table.prompts))
    manifest, arrays = read_zip(model.to_bytes(), "m", "context model", ContextModelError)
    keys = arrays["held_out_keys"]
    with pytest.raises(ContextModelError, match="sorted and distinct"):
        ContextModel.from_bytes(
            zip_bytes(json.dumps(manifest), {**arrays, "held_out_keys": keys[::-1]}), "m"
        )
    with pytest.raises(ContextModelError, match="not a valid context model"):
        ContextModel.from_bytes(
            zip_bytes(json.dumps(manifest), {**arrays, "held_out_contexts": keys * 0 + 9}), "m"
        )
    lost = {k: v for k, v in arrays.items() if k != "held_out_keys"}
    with pytest.raises(ContextModelError, match="held_out_keys"):
        ContextModel.from_bytes(zip_bytes(json.dumps(manifest), lost), "m")
    with pytest.raises(InvalidValueError, match="needs idf, bias, held_out_keys"):
        dataclasses.replace(model, held_out_contexts=None)


def test_without_two_tasks_the_model_falls_back_to_clusters():
    table = prompted(5, 300)
    scores = table.scores.sum(axis=1)
    for labels in (None, ["all"] * table.n_prompts):
        model = fit_context_model(table.prompts, scores, labels=labels, seed=1)
        assert model.info["by"] == "scores" and model.format_version == 2
        assert model.names[0].startswith("text-")
    # Clusters on request, labels or not; a task model needs labels of two tasks.
    asked = fit_context_model(table.prompts, scores, labels=labels_of(table), by="scores", k=3)
    assert asked.info["by"] == "scores" and asked.k == 3
    with pytest.raises(InvalidValueError, match="one task \\('all'\\) only"):
        fit_context_model(table.prompts, labels=["all"] * table.n_prompts, by="task")
    with pytest.raises(InvalidValueError, match="give the labels"):
        fit_context_model(table.prompts, scores, by="task")


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        (["math"] * 10, "10 given for 20 prompts"),
        (["math", 3] * 10, r"labels\[1\] == 3: each prompt's task must be a non-empty string"),
        (["math", " "] * 10, r"labels\[1\] == ' '"),
        ("math" * 5, "one task per prompt, not one string"),
        ([f"p{i}" for i in range(20)], "20 of the 20 tasks have fewer than 2 prompts"),
    ],
)
def test_a_bad_label_column_is_refused_with_what_is_wrong(labels, match):
    table = prompted(6, 20)
    with pytest.raises(InvalidValueError, match=match):
        fit_context_model(table.prompts, table.scores.sum(axis=1), labels=labels)


#: A prompt of each task and its best model.
_FIRST = (
    ("Compute 3 + 4 and give the sum in \\boxed{}.", "m0"),
    ("def f_1(x: int) -> int:\n    '''Return x times 2.'''", "m1"),
    ("who wrote the novel number 7 in the series", "m2"),
)


def test_a_router_of_a_table_with_tasks_routes_by_the_predicted_task(tmp_path):
    eval_path = tmp_path / "eval.csv"
    write_prompted(eval_path, prompted(0, 450))
    given = {"prompts": str(eval_path), "seed": 1}
    warm = {"table": str(eval_path), "strength": 30}

    def created(name):
        return Router(
            config(
                eval_path, tmp_path / name, contexts_from=given, warm_start=warm, snapshot_every=40
            )
        )

    router = created("r.db")
    assert sorted(router.context_names) == ["code", "math", "trivia"]
    model = load_context_model(tmp_path / "r.db.contexts.npz")
    assert model.info["by"] == "task" and router.config.contexts_from["sha256"] == model.sha256
    # Warm-started from the tasks' prompts: each task's prompts go to its best model at once.
    for text, best in _FIRST:
        assert router.route(prompt=text).propensities[best] > 0.5, text
    traffic(router, 60)
    router.close()
    twin = created("t.db")
    for text, _ in _FIRST:
        twin.route(prompt=text)
    traffic(twin, 60)
    decides_as_twin(tmp_path / "r.db", twin, 10, prompt=_FIRST[2][0])


def test_a_router_refuses_a_bad_label_column_or_way_to_fit(tmp_path):
    ids = prompted(7, 40)
    ids = dataclasses.replace(ids, categories=ids.prompt_ids, category=np.arange(40))
    path = tmp_path / "ids.csv"
    write_prompted(path, ids)
    with pytest.raises(RouterConfigError, match="fewer than 2 prompts"):
        Router(config(path, contexts_from={"prompts": str(path)}))
    # Clusters, on request, from the same table.
    router = Router(config(path, contexts_from={"prompts": str(path), "by": "words", "k": 2}))
    assert router.context_names == ["text-0", "text-1"]
    router.close()
    with pytest.raises(RouterConfigError, match="by == 'topics'"):
        Router(config(path, contexts_from={"prompts": str(path), "by": "topics"}))
    with pytest.raises(RouterConfigError, match=r"contexts_from\.by: a string, with prompts"):
        Router(config(path, contexts_from={"model": str(path), "by": "task"}))
