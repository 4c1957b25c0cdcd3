"""Build the packaged LLMRouter outcome table from the public LLMRouter files.

Usage: ``python tools/build_llmrouter.py DATA_DIR OUT_DIR`` with DATA_DIR holding the files named
in its PROVENANCE.md (train.json, test.json, default_query_{train,test}.jsonl, default_llm.json,
LICENSE). Writes OUT_DIR/llmrouter.csv, OUT_DIR/llmrouter.features.npz and
OUT_DIR/llmrouter.LICENSE and prints their SHA-256.

The table keeps each prompt's id, task, the models' graded scores and two costs per model, and no
prompt text. What the contexts from text need of the texts is shipped beside it as features
(``msroute.prompts.features``: each prompt's hashed word and word-pair counts, no text), only
the hash buckets found in at least two prompts: a context model's vocabulary holds no other
(``msroute.prompts.model``), so nothing it could use is left out.

* ``MODEL|tokens``: estimated tokens of one call, ``ceil(len(prompt) / 4)`` input tokens (the
  usual four characters per token of English text) plus the task's assumed answer length
  (``ANSWER_TOKENS``);
* ``MODEL|usd``: ``(input tokens x input price + answer tokens x output price) / 1e6``, with the
  model's list prices in $ per million tokens from default_llm.json.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from msroute.prompts.features import feature_matrix, features_bytes

#: Assumed answer length (output tokens) per task: a letter or a short phrase for multiple
#: choice and trivia, a worked solution for math, a function for code.
ANSWER_TOKENS = {
    "mmlu": 16,
    "gpqa": 16,
    "arc_challenge": 16,
    "openbook_qa": 16,
    "commonsense_qa": 16,
    "natural_qa": 32,
    "trivia_qa": 32,
    "commongen": 48,
    "agentverse-logicgrid": 128,
    "gsm8k": 256,
    "math": 384,
    "agentverse-mgsm": 256,
    "mbpp": 192,
    "human_eval": 192,
}

#: Characters per input token of the estimate.
CHARS_PER_TOKEN = 4


def main(data: Path, out: Path) -> None:
    prices = json.loads((data / "default_llm.json").read_text())
    tasks: dict[str, str] = {}
    for name in ("default_query_train.jsonl", "default_query_test.jsonl"):
        for line in (data / name).read_text().split("\n"):
            if not line.strip():
                continue
            row = json.loads(line)
            tasks.setdefault(row["query"], row["task_name"])  # a repeated text keeps its first
    rows = []
    texts: list[str] = []
    models: list[str] | None = None
    for split in ("train", "test"):
        for i, entry in enumerate(json.loads((data / f"{split}.json").read_text())):
            scores = entry["scores"]
            if models is None:
                models = sorted(scores)
            if sorted(scores) != models:
                raise SystemExit(f"{split}.json entry {i}: models differ")
            task = tasks[entry["question"]]
            tok_in = max(1, math.ceil(len(entry["question"]) / CHARS_PER_TOKEN))
            tok_out = ANSWER_TOKENS[task]
            row: dict[str, object] = {"prompt_id": f"{split}-{i:04d}", "category": task}
            texts.append(entry["question"])
            for m in models:
                row[m] = f"{float(scores[m]):.10g}"
            for m in models:
                p = prices[m]
                usd = (tok_in * p["input_price"] + tok_out * p["output_price"]) / 1e6
                row[f"{m}|usd"] = f"{usd:.6e}"
            for m in models:
                row[f"{m}|tokens"] = tok_in + tok_out
            rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "llmrouter.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    counts = feature_matrix(texts)
    shared = np.bincount(counts.indices, minlength=counts.shape[1]) >= 2
    counts = counts @ sp.diags(shared.astype(np.float64))
    counts.eliminate_zeros()
    ids = [str(r["prompt_id"]) for r in rows]
    (out / "llmrouter.features.npz").write_bytes(features_bytes(counts, ids))
    shutil.copyfile(data / "LICENSE", out / "llmrouter.LICENSE")
    for name in ("llmrouter.csv", "llmrouter.features.npz", "llmrouter.LICENSE"):
        print(name, hashlib.sha256((out / name).read_bytes()).hexdigest())


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
