"""A router's contexts_from: its context model fitted on an eval table's prompts, routing by a
prompt's text (library and HTTP), saved beside the journal, replayed, refused if changed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _router import decides_as_twin
from msroute.errors import InvalidFeedbackError, JournalError, RouterConfigError
from msroute.prompts import fit_context_model, load_context_model
from msroute.router import Router
from test_prompts import MEANS, prompted, write_prompted


def config(table, journal=None, **extra):
    cfg = {
        "policy": "omd",
        "m_draws": 1,
        "cost_names": ["usd"],
        "experts": {"m0": [1.0], "m1": [1.0], "m2": [1.0]},
        "constraints": {"upper": {"usd": 2.0}},
        "contexts_from": {"prompts": str(table), "k": 3, "seed": 1},
        "seed": 5,
        **extra,
    }
    if journal is not None:
        cfg["journal"] = str(journal)
    return cfg


@pytest.fixture(scope="module")
def eval_table(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "eval.csv"
    write_prompted(path, prompted(0, 450))
    return path


def traffic(router, n, seed=0):
    """Prompts of the three tasks, each answered right at its routed model's rate."""
    table = prompted(100 + seed, n)
    rng = np.random.default_rng(seed)
    for i in range(n):
        d = router.route(prompt=table.prompts[i])
        m = int(d.team[0][1:])
        router.feedback(d.decision_id, float(rng.random() < MEANS[table.category[i], m]))


def test_a_router_routes_by_the_prompts_cluster_and_replays_exactly(tmp_path, eval_table):
    router = Router(config(eval_table, tmp_path / "r.db", snapshot_every=40))
    model = load_context_model(tmp_path / "r.db.contexts.npz")
    assert router.context_names == list(model.names) and len(model.names) == 3
    stored = router.config.contexts_from
    assert stored["model"] == "r.db.contexts.npz" and stored["sha256"] == model.sha256
    d = router.route(prompt="Compute 3 + 4 and give the sum in \\boxed{}.")
    (event,) = router.decisions_since(0)
    assert event["context"] == model.context_of("Compute 3 + 4 and give the sum in \\boxed{}.")
    assert "Compute" not in json.dumps(event)  # the text is not journaled
    router.feedback(d.decision_id, 1.0)
    traffic(router, 150)
    # The router has learned each task's model: math prompts go to m0.
    math = model.context_of("Compute 10 + 20 and give the sum in \\boxed{}.")
    assert router.state()["q_by_context"][math]["m0"] > 0.5
    with pytest.raises(InvalidFeedbackError, match="not both"):
        router.route(context=math, prompt="x")
    before = router.state()
    with pytest.raises(InvalidFeedbackError, match="give a context or a prompt"):
        router.route()
    assert router.state() == before
    router.close()
    twin = Router(config(eval_table, tmp_path / "twin.db", snapshot_every=40))
    twin.route(prompt="Compute 3 + 4 and give the sum in \\boxed{}.")
    traffic(twin, 150)
    decides_as_twin(
        tmp_path / "r.db", twin, 20, prompt="who wrote the novel number 7 in the series"
    )
    # The configuration file it was created with reopens it; another k is another model.
    Router.open(tmp_path / "r.db", config=config(eval_table)).close()
    with pytest.raises(RouterConfigError, match="contexts_from"):
        Router.open(
            tmp_path / "r.db",
            config=config(eval_table, contexts_from={"prompts": str(eval_table), "k": 4}),
        )


def test_another_model_is_refused_and_so_is_a_prompt_without_one(tmp_path, eval_table):
    Router(config(eval_table, tmp_path / "r.db")).close()
    other = fit_context_model(prompted(9, 200).prompts, k=3, seed=2, by="words")
    other.save(tmp_path / "r.db.contexts.npz")
    with pytest.raises(JournalError, match="not the context model this router was created with"):
        Router.open(tmp_path / "r.db")
    given = tmp_path / "given.npz"
    other.save(given)
    router = Router(config(eval_table, contexts_from={"model": str(given)}))
    assert router.context_names == list(other.names)
    router.close()
    plain = Router({**config(eval_table), "contexts_from": None, "contexts": ["a", "b"]})
    with pytest.raises(InvalidFeedbackError, match="no contexts_from model"):
        plain.route(prompt="hello")
    plain.close()
    with pytest.raises(RouterConfigError, match="leave contexts out"):
        Router({**config(eval_table), "contexts": ["a", "b", "c"]})
    with pytest.raises(RouterConfigError, match="give prompts"):
        Router(config(eval_table, contexts_from={"k": 3}))
    bare = tmp_path / "bare.csv"
    bare.write_text("prompt_id,m0,m1,m2,m0|usd,m1|usd,m2|usd\na,1,0,0,1,1,1\n")
    with pytest.raises(RouterConfigError, match="has no prompt column"):
        Router(config(bare))


def test_a_warm_start_starts_each_cluster_from_the_tables_prompts_in_it(tmp_path, eval_table):
    router = Router(config(eval_table, warm_start={"table": str(eval_table), "strength": 30}))
    q = router.state()["q_by_context"]
    tasks = {
        "Compute 3 + 4 and give the sum in \\boxed{}.": "m0",
        "def f_1(x: int) -> int:\n    '''Return x times 2.'''": "m1",
        "who wrote the novel number 7 in the series": "m2",
    }
    for text, best in tasks.items():
        d = router.route(prompt=text)
        assert d.propensities[best] > 0.5, (text, q)
    router.close()


def test_the_http_decision_takes_a_prompt_instead_of_a_context(tmp_path, eval_table):
    from _service import ROUTER, served

    text = {k: v for k, v in config(eval_table).items() if k != "seed"}
    with served(tmp_path, {"txt": text, "llm": ROUTER}) as (_, client):
        resp = client.post("/v1/routers/txt/decisions", json={"prompt": "who wrote it"})
        assert resp.status_code == 201, resp.text
        rows = client.get("/v1/routers/txt/decisions").text.splitlines()
        context = next(r for r in map(json.loads, rows) if r["kind"] == "decision")["context"]
        assert context in client.get("/v1/routers/txt").json()["contexts"]
        both = {"prompt": "who wrote it", "context": context}
        assert client.post("/v1/routers/txt/decisions", json=both).status_code == 422
        resp = client.post("/v1/routers/llm/decisions", json={"prompt": "who wrote it"})
        assert resp.status_code == 422 and "no contexts_from model" in resp.text
    assert (tmp_path / "data" / "txt.db.contexts.npz").is_file()


def test_the_gateway_routes_a_chat_by_its_last_user_message(tmp_path, eval_table):
    import httpx

    from _gateway import expert, gateway_process
    from _server import free_port
    from _service import TOKEN
    from _upstream import StubUpstream

    (tmp_path / "eval.csv").write_bytes(eval_table.read_bytes())
    with StubUpstream(free_port()) as stub:
        u = stub.base_url
        (tmp_path / "gateway.toml").write_text(
            f"""[routers.txt]
policy = "omd"
m_draws = 1
expected_tokens = {{ input = 100, output = 50 }}
contexts_from = {{ prompts = "eval.csv", k = 3, seed = 1 }}
[routers.txt.experts.a]
{expert(u, "prompt=10&completion=5", 1.0, 1.0)}
[routers.txt.experts.b]
{expert(u, "prompt=10&completion=5", 2.0, 2.0)}
"""
        )
        server = gateway_process(
            tmp_path / "gateway.toml", tmp_path / "data", tmp_path / "gateway.log"
        )
        text = "who wrote the novel number 7 in the series"
        with server:
            h = {"Authorization": f"Bearer {TOKEN}"}
            body = {"model": "msroute/txt", "messages": [{"role": "user", "content": text}]}
            resp = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=h)
            assert resp.status_code == 200, resp.text
            rows = httpx.get(f"{server.url}/v1/routers/txt/decisions", headers=h).text
    model = load_context_model(tmp_path / "data" / "txt.db.contexts.npz")
    decision = next(r for r in map(json.loads, rows.splitlines()) if r["kind"] == "decision")
    assert decision["context"] == model.context_of(text)


@pytest.mark.parametrize(
    ("names", "match"),
    [
        (["a", "a", "b"], r"names must be distinct; \['a'\] repeat"),
        (["", "b", "c"], r"names\[0\]: must be a non-empty string"),
        (["a", "\ud800", "c"], r"names\[1\]: .* is not UTF-8 text"),
        (["a", 2, "c"], r"names\[1\]: must be a non-empty string, got 2"),
        ("abc", "names must be a list"),
    ],
)
def test_a_model_whose_names_are_no_contexts_is_refused_before_a_router_runs_on_it(
    tmp_path, eval_table, names, match
):
    """A model file's context names become the router's contexts, which its journal records
    and a reopen validates: names that cannot be contexts are refused when the model is read,
    not after the router has journaled traffic it could then never reopen."""
    from msroute._npzip import read_zip, zip_bytes
    from msroute.prompts import ContextModel, ContextModelError

    model = fit_context_model(prompted(9, 200).prompts, k=3, seed=2, by="words")
    manifest, arrays = read_zip(model.to_bytes(), "m", "context model", ContextModelError)
    manifest["names"] = names
    given = tmp_path / "given.npz"
    given.write_bytes(zip_bytes(json.dumps(manifest), arrays))
    with pytest.raises(ContextModelError, match=match):
        ContextModel.from_bytes(given.read_bytes(), "m")
    with pytest.raises(RouterConfigError, match=match):
        Router(config(eval_table, tmp_path / "r.db", contexts_from={"model": str(given)}))
    assert not (tmp_path / "r.db").exists()
