"""What ``msroute gateway`` adds to an LLM call: latency over calling the upstream directly.

Starts the stub OpenAI-compatible upstream (tests/_upstream.py, answering after ``--latency-ms``
with a usage) and one ``msroute gateway`` per journal ``synchronous`` level (a router of two
experts on the stub, each call's usage different from its booking, so that every call is a
journaled decision and a journaled cost report), all child processes on 127.0.0.1. Then
``--clients`` concurrent clients, each on its own keep-alive connection, POST chat completions
to the stub directly and to each gateway, in alternating phases of ``--requests`` calls (the
first tenth of each phase not measured), ``--rounds`` times, after the servers have gone idle
(a gateway loads its compiled step in the background once it answers) and a warm-up phase of
half as many calls each, each round starting one target
later than the one before: side by side in one run, so the machine's other load weighs on both
alike. Reports p50/p95/p99 latency and calls per second of each target, the CPU time its
server process spent per measured call (the stub's for the direct
calls, the gateway's own, not counting the stub's, for the gateway's; Linux only) and the load
generator's (this process: it competes with the servers for the same cores), and the
gateway's overhead at p50 and p99 (gateway minus direct): over all rounds' calls pooled, and
the median over rounds of each round's overhead (a gateway's phase against the direct phase of
the same round: other work that loads the machine during one phase moves one round's figure,
not the median). ``--baseline SRC`` adds gateways run from another msroute tree's ``src``
directory (another commit, checked out with ``git worktree add``) to the same run. The load
generator runs in this process, on the same cores as the servers. Every process is killed by
its pid at the end, even on failure. Usage::

    python benchmarks/bench_gateway.py [--clients 50] [--requests 2000] [--latency-ms 50]
                                       [--sync full normal] [--rounds 2] [--baseline SRC]

Prints Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _server import ServerProcess, free_port  # noqa: E402 (after the path)
from _upstream import ChildServer, StubUpstream  # noqa: E402
from bench_service import TOKEN, Connection  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used so far (NaN where /proc is not there)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def config(base_url: str, latency_ms: float, sync: str) -> str:
    model = f"stub?latency_ms={latency_ms:g}&prompt=200&completion=50"
    experts = "".join(
        f"""
[routers.bench.experts.{name}]
base_url = "{base_url}"
model = "{model}"
input_usd_per_mtok = {price}
output_usd_per_mtok = {4 * price}
"""
        for name, price in (("big", 2.5), ("small", 0.15))
    )
    return f"""
[routers.bench]
policy = "omd"
m_draws = 1
journal_sync = "{sync}"
expected_tokens = {{ input = 150, output = 40 }}
{experts}"""


async def phase(
    port: int, path: str, body: bytes, clients: int, requests: int, cap_s: float, pid: int
) -> tuple[list[float], float, int, float]:
    """``requests`` calls by ``clients`` clients: latencies (ms) after the warm-up tenth, the
    measured calls per second, the errors, and the CPU ms process ``pid`` and this process
    spent per measured call."""
    started = 0
    errors = 0
    latencies: list[float] = []
    warmup = requests // 10
    measured_from = 0.0
    stop_at = time.monotonic() + cap_s
    cpu_from = own_from = 0.0

    async def client() -> None:
        nonlocal started, errors, measured_from, cpu_from, own_from
        conn = await Connection.open(port)
        try:
            while started < requests and time.monotonic() < stop_at:
                started += 1
                index = started
                t0 = time.perf_counter()
                status, _ = await conn.request("POST", path, body)
                ms = (time.perf_counter() - t0) * 1000
                if status != 200:
                    errors += 1
                elif index > warmup:
                    if not measured_from:
                        measured_from = time.perf_counter()
                        cpu_from = cpu_seconds(pid)
                        own_from = time.process_time()
                    latencies.append(ms)
        finally:
            conn.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - measured_from if measured_from else float("nan")
    calls = max(1, len(latencies))
    cpu_ms = 1000 * (cpu_seconds(pid) - cpu_from) / calls
    own_ms = 1000 * (time.process_time() - own_from) / calls
    return latencies, len(latencies) / elapsed, errors, cpu_ms, own_ms


def wait_idle(pids: list[int], cap_s: float = 120.0, window_s: float = 0.5) -> None:
    """Wait until the processes ``pids`` spend under a tenth of a core over ``window_s``
    seconds, all of them (a gateway loads its compiled step in the background after it
    starts answering), for ``cap_s`` seconds at most."""
    stop_at = time.monotonic() + cap_s
    while time.monotonic() < stop_at:
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(window_s)
        spent = [cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
        if all(not s >= 0.1 * window_s for s in spent):  # NaN (no /proc): nothing to wait for
            return


@dataclass
class Target:
    """One server the clients call, and what its phases measured."""

    port: int
    body: bytes
    pid: int
    latencies: list[list[float]] = field(default_factory=list)  # per round
    rates: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    client_ms: list[float] = field(default_factory=list)  # the load generator's CPU per call
    errors: int = 0


def start_gateways(
    tmp: Path, stub: StubUpstream, args: argparse.Namespace, servers: dict[str, ServerProcess]
) -> None:
    """One gateway per sync level, and as many of the ``--baseline`` source tree's, put in
    ``servers`` as each starts (so that the caller kills those started if a later one fails)."""
    trees = (
        {"gateway": None} if args.baseline is None else {"gateway": None, "baseline": args.baseline}
    )
    for label, src in trees.items():
        env = None if src is None else {"PYTHONPATH": str(Path(src).resolve())}
        for sync in args.sync:
            path = tmp / f"{label}-{sync}.toml"
            path.write_text(config(stub.base_url, args.latency_ms, sync))
            name = f"{label} ({sync})"
            servers[name] = ServerProcess(
                path, tmp / f"data-{label}-{sync}", token=TOKEN, command="gateway", env=env
            ).start()


def report(targets: dict[str, Target], args: argparse.Namespace, load_before: float) -> None:
    print(
        f"{args.clients} clients, {args.rounds} x {args.requests} calls per target, stub answers "
        f"in {args.latency_ms:g} ms; {platform.python_version()}, {os.cpu_count()} CPUs shared "
        f"by the load generator, the stub and the gateways; load average {load_before:.1f} "
        f"before, {os.getloadavg()[0]:.1f} after\n"
    )
    print(
        "| target | p50 ms | p95 ms | p99 ms | calls/s | server CPU ms per call "
        "| client CPU ms per call | errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    pooled, rounds = {}, {}
    for name, t in targets.items():
        every = [ms for lat in t.latencies for ms in lat]
        pooled[name] = np.percentile(every, [50, 95, 99]) if every else np.full(3, np.nan)
        rounds[name] = np.array(
            [np.percentile(lat, [50, 99]) if lat else np.full(2, np.nan) for lat in t.latencies]
        )
        q = pooled[name]
        print(
            f"| {name} | {q[0]:.2f} | {q[1]:.2f} | {q[2]:.2f} | {np.mean(t.rates):.0f} "
            f"| {np.mean(t.cpu_ms):.2f} | {np.mean(t.client_ms):.2f} | {t.errors} |"
        )
    print("\n| overhead over direct | p50 ms | p99 ms | median of rounds: p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for name in targets:
        if name != "direct":
            q, base = pooled[name], pooled["direct"]
            by_round = np.median(rounds[name] - rounds["direct"], axis=0)
            print(
                f"| {name} | {q[0] - base[0]:+.2f} | {q[2] - base[2]:+.2f} "
                f"| {by_round[0]:+.2f} | {by_round[1]:+.2f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=2000, help="calls per phase")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the stub's answer time")
    parser.add_argument("--sync", nargs="+", default=["full", "normal"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--time-cap", type=float, default=120.0, help="seconds per phase, at most")
    parser.add_argument(
        "--baseline", help="the src directory of another msroute tree: its gateways join the run"
    )
    parser.add_argument(
        "--bare",
        action="store_true",
        help="add a pass-through proxy on the gateway's HTTP stack (benchmarks/_bare_proxy.py): "
        "the floor any gateway on it pays",
    )
    args = parser.parse_args()
    messages = [{"role": "user", "content": "Summarize the following text. " * 20}]
    direct = json.dumps(
        {
            "model": f"stub?latency_ms={args.latency_ms:g}&prompt=200&completion=50",
            "messages": messages,
        }
    ).encode()
    routed = json.dumps({"model": "msroute/bench", "messages": messages}).encode()
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        stub = stack.enter_context(StubUpstream(free_port()))
        assert stub.proc is not None  # started
        targets = {"direct": Target(stub.port, direct, stub.proc.pid)}
        if args.bare:
            port = free_port()
            bare = [sys.executable, str(ROOT / "benchmarks" / "_bare_proxy.py"), str(port)]
            proxy = stack.enter_context(ChildServer([*bare, stub.base_url], port))
            assert proxy.proc is not None
            targets["bare proxy"] = Target(port, direct, proxy.proc.pid)
        servers: dict[str, ServerProcess] = {}
        try:
            start_gateways(Path(tmp), stub, args, servers)
            for name, server in servers.items():
                targets[name] = Target(server.port, routed, server.pid)
            order = list(targets.values())
            wait_idle([t.pid for t in order])
            for t in order:  # a warm-up phase each, not measured
                asyncio.run(
                    phase(
                        t.port,
                        "/v1/chat/completions",
                        t.body,
                        args.clients,
                        args.requests // 2,
                        args.time_cap,
                        t.pid,
                    )
                )
            for r in range(args.rounds):
                # Each round starts one target later: no target always follows the same one.
                for t in order[r % len(order) :] + order[: r % len(order)]:
                    lat, rate, errors, cpu_ms, client_ms = asyncio.run(
                        phase(
                            t.port,
                            "/v1/chat/completions",
                            t.body,
                            args.clients,
                            args.requests,
                            args.time_cap,
                            t.pid,
                        )
                    )
                    t.latencies.append(lat)
                    t.rates.append(rate)
                    t.cpu_ms.append(cpu_ms)
                    t.client_ms.append(client_ms)
                    t.errors += errors
        finally:
            for server in servers.values():
                server.kill()
    report(targets, args, load_before)


if __name__ == "__main__":
    main()
