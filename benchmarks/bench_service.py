"""Throughput and latency of ``msroute serve`` under a bounded loopback load.

Starts ``msroute serve`` as a child process on 127.0.0.1 (one OMD router, K experts, M draws, one
cost with an upper bound, the journal at the chosen ``synchronous`` level), then C concurrent
clients, each on its own keep-alive HTTP/1.1 connection, repeat: POST a decision, POST its
feedback. The run stops after a fixed number of pairs or at the time cap, whichever comes first;
the first ``--warmup`` pairs are not measured. Reports decision+feedback pairs per second and
p50/p95/p99 latency of each endpoint, the mean group-commit size read from the server's
``/metrics``, the CPU time per pair of the server (in brackets: of its event-loop thread, which
serves HTTP and runs the router's calls; the rest is mostly the owner thread, which runs the
COMMITs) and of the client (the machine's CPUs are shared, so CPU per
pair shows the cost even when other load slows the clock), and checks that
the router's state counts every acknowledged pair. The reference row ``bare`` serves the same two
endpoints from a bare FastAPI app (pydantic bodies, no auth, router or journal) in the same run:
the ceiling of the HTTP stack on this machine at this moment. The server is
killed by its pid at the end, even on failure.

The client is a minimal HTTP/1.1 client over asyncio streams (uvloop when installed) in this
process: it costs far less CPU than a general client library, which matters because client and
server share the machine. Several settings run side by side in one invocation (``--clients``,
``--sync`` take lists). Usage::

    python benchmarks/bench_service.py [--pairs 20000] [--clients 1 8 32] [--sync full normal]

Prints Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# The loopback launcher of the service tests (tests/_server.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _server import ServerProcess

TOKEN = "bench-token"


BASELINE_APP = """
import sys, uuid
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

class Decide(BaseModel):
    context: str | None = None

class Feedback(BaseModel):
    reward: float

app = FastAPI()

@app.post("/v1/routers/bench/decisions", status_code=201)
async def decide(body: Decide) -> dict[str, object]:
    return {"decision_id": uuid.uuid4().hex, "team": ["e000"], "draws": ["e000"] * 3}

@app.post("/v1/routers/bench/decisions/{decision_id}/feedback")
async def feedback(decision_id: str, body: Feedback) -> dict[str, str]:
    return {"status": "applied"}

@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


class BareFastAPI(ServerProcess):
    """The reference: the same two endpoints in bare FastAPI (no auth, router or journal)."""

    def command(self) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-c", BASELINE_APP, str(self.port)], dict(os.environ)


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time so far of a process, or of one of its threads (Linux /proc)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_config(path: Path, *, n_experts: int, m_draws: int, sync: str) -> None:
    """One OMD router over K priced experts with a binding budget (the service config format)."""
    prices = np.linspace(0.001, 0.03, n_experts)
    experts = "\n".join(f"e{i:03d} = [{p:.6f}]" for i, p in enumerate(prices))
    path.write_text(
        f"""[routers.bench]
policy = "omd"
m_draws = {m_draws}
cost_names = ["usd"]
seed = 0
journal_sync = "{sync}"
feedback_ttl_s = 3600
reward_max = 1.0
[routers.bench.experts]
{experts}
[routers.bench.constraints]
upper = {{ usd = {float(m_draws * prices.mean() * 0.8):.6f} }}
"""
    )


class Connection:
    """One keep-alive HTTP/1.1 connection (Content-Length bodies only, as uvicorn sends them)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header[9:12])
        match = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", header)
        if match is None:
            raise RuntimeError("response without Content-Length")
        return status, await self.reader.readexactly(int(match.group(1)))

    def close(self) -> None:
        self.writer.close()


@dataclass
class Load:
    """Shared counters of one run."""

    pairs: int
    warmup: int
    time_cap_s: float
    started: int = 0
    done: int = 0
    errors: int = 0
    decide_ms: list[float] = field(default_factory=list)
    feedback_ms: list[float] = field(default_factory=list)
    measured_from: float = 0.0
    measured_pairs: int = 0


async def client(port: int, load: Load, seed: int, stop_at: float) -> None:
    rng = random.Random(seed)
    conn = await Connection.open(port)
    try:
        while load.started < load.pairs and time.perf_counter() < stop_at:
            index = load.started
            load.started += 1
            t0 = time.perf_counter()
            status, body = await conn.request("POST", "/v1/routers/bench/decisions", b"{}")
            t1 = time.perf_counter()
            if status != 201:
                load.errors += 1
                continue
            decision_id = json.loads(body)["decision_id"]
            reward = json.dumps({"reward": round(rng.random(), 6)}).encode()
            path = f"/v1/routers/bench/decisions/{decision_id}/feedback"
            status, _ = await conn.request("POST", path, reward)
            t2 = time.perf_counter()
            if status != 200:
                load.errors += 1
                continue
            load.done += 1
            if index == load.warmup:
                load.measured_from = t0
            if index >= load.warmup:
                load.measured_pairs += 1
                load.decide_ms.append((t1 - t0) * 1e3)
                load.feedback_ms.append((t2 - t1) * 1e3)
    finally:
        conn.close()


async def scrape(port: int) -> tuple[dict[str, float], dict[str, object]]:
    conn = await Connection.open(port)
    try:
        _, text = await conn.request("GET", "/metrics")
        _, state = await conn.request("GET", "/v1/routers/bench")
    finally:
        conn.close()
    values: dict[str, float] = {}
    for line in text.decode().splitlines():
        if line.startswith("msroute_commit_"):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0]] = float(value)
    return values, json.loads(state)


async def drive(port: int, clients: int, load: Load) -> float:
    stop_at = time.perf_counter() + load.time_cap_s
    await asyncio.gather(*(client(port, load, seed, stop_at) for seed in range(clients)))
    return time.perf_counter()


def run_one(sync: str, clients: int, args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    case = workdir / f"{sync}-{clients}"
    case.mkdir()
    config = case / "service.toml"
    write_config(config, n_experts=args.experts, m_draws=args.m_draws, sync=sync)
    load = Load(pairs=args.pairs, warmup=args.warmup, time_cap_s=args.time_cap)
    bare = sync == "bare"
    kind = BareFastAPI if bare else ServerProcess
    commits: dict[str, float] = {}
    state: dict[str, object] = {}
    with kind(config, case, token=TOKEN, log=case / "server.log") as server:
        port = server.port
        server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
        loop_cpu = cpu_seconds(server.pid, server.pid)
        end = asyncio.run(drive(port, clients, load))
        server_cpu = cpu_seconds(server.pid) - server_cpu
        loop_cpu = cpu_seconds(server.pid, server.pid) - loop_cpu
        client_cpu = time.process_time() - client_cpu
        if not bare:
            commits, state = asyncio.run(scrape(port))
        server.terminate()
    elapsed = end - load.measured_from if load.measured_pairs else float("nan")
    groups = commits.get("msroute_commit_groups", float("nan"))
    calls = commits.get("msroute_commit_calls", float("nan"))
    return {
        "sync": sync,
        "clients": clients,
        "pairs": load.done,
        "measured": load.measured_pairs,
        "errors": load.errors,
        "pairs_per_s": load.measured_pairs / elapsed,
        "decide": np.percentile(load.decide_ms, [50, 95, 99]).tolist() if load.decide_ms else [],
        "feedback": np.percentile(load.feedback_ms, [50, 95, 99]).tolist()
        if load.feedback_ms
        else [],
        "group": calls / groups if groups else float("nan"),
        "server_cpu_us": server_cpu / max(load.done, 1) * 1e6,
        "loop_cpu_us": loop_cpu / max(load.done, 1) * 1e6,
        "client_cpu_us": client_cpu / max(load.done, 1) * 1e6,
        "state_decisions": state.get("decisions"),
        "state_feedback": state.get("feedback_applied"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs per setting (cap)")
    parser.add_argument("--warmup", type=int, default=500, help="unmeasured first pairs")
    parser.add_argument("--time-cap", type=float, default=60.0, help="seconds per setting (cap)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument(
        "--sync",
        nargs="+",
        default=["bare", "full"],
        choices=["bare", "full", "normal"],
        help="journal synchronous level; 'bare' is the reference: the two endpoints in bare "
        "FastAPI (no auth, router or journal)",
    )
    parser.add_argument("--experts", type=int, default=20)
    parser.add_argument("--m-draws", type=int, default=3)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        pass
    print(
        f"# msroute serve: K = {args.experts}, M = {args.m_draws}, up to {args.pairs} pairs "
        f"per setting ({args.warmup} warm-up), cap {args.time_cap:.0f} s; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, client and "
        "server on the same machine\n"
    )
    print(
        "| sync | clients | pairs/s | decide p50 / p95 / p99 (ms) | feedback p50 / p95 / p99 "
        "(ms) | mean group | CPU µs/pair: server (its event loop) / client | errors | in state |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="msroute-bench-") as tmp:
        for sync in args.sync:
            for clients in args.clients:
                row = run_one(sync, clients, args, Path(tmp))
                dec = " / ".join(f"{v:.2f}" for v in row["decide"])  # type: ignore[attr-defined]
                fb = " / ".join(f"{v:.2f}" for v in row["feedback"])  # type: ignore[attr-defined]
                in_state = (
                    "n/a"
                    if sync == "bare"
                    else "yes"
                    if row["state_decisions"] == row["pairs"]
                    and row["state_feedback"] == row["pairs"]
                    else f"NO ({row['state_decisions']} dec., {row['state_feedback']} fb.)"
                )
                print(
                    f"| {sync} | {clients} | {row['pairs_per_s']:.0f} | {dec} | {fb} | "
                    f"{row['group']:.1f} | "
                    f"{row['server_cpu_us']:.0f} ({row['loop_cpu_us']:.0f}) / "
                    f"{row['client_cpu_us']:.0f} | "
                    f"{row['errors']} | {in_state} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
