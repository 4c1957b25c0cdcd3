"""msroute's Router against contextual-bandit peers: route + feedback pairs per second, in process.

One simulated stream for every router: K models, each with a Bernoulli reward whose mean is
drawn from Beta(2, 2) per context (3 contexts, or one), a cost per query drawn uniformly from
[0.1, 1.0], and a budget on the average cost of 0.7 M times the models' mean cost (it binds:
the best models are not the cheapest). A team's reward is the max of its members' draws (the
sum-max reward with one task). The outcomes are drawn before the clock starts, so every router
pays the same for the stream; each router routes a query and receives its feedback at once.
The routers of a cell run through the stream side by side, in alternating blocks of 500
queries (who goes first rotates), and each one's time is the sum over its blocks: a burst of
load on a noisy machine then hits all of them alike, and the ratios compare like with like.

* ``msroute omd``: the Router's default policy (``DEFAULT_OMD_PARAMS``), in memory;
* ``msroute cbwk``: the Router with the CBwK baseline, in memory;
* ``own``: the Router with the ``uniform`` policy (it learns nothing: a draw from a fixed
  distribution and no update), in memory, unpaced: what the router itself costs a pair (the
  checks, the decision id, the pending decision, the feedback's bookkeeping);
* ``floor``: the same under a budget it never reaches (M times the dearest model's cost: paced,
  but the pacer never narrows a decision): the router's own work and the pacer's, the least any
  of its paced policies can take (a policy without the compiled step keeps its pacer's booking
  and settling in Python);
* ``VW``: Vowpal Wabbit's ``--cb_explore_adf --epsilon 0.05`` (with ``-q sa`` under contexts:
  one value per context and model), action-dependent features ``|a m<i>``, the context as a
  shared feature, the loss ``-reward``; M = 1 only (VW's slates and CCB reductions rank
  distinct slots with a reward per slot, not one draw-with-replacement team with one reward,
  so they are not the same problem). VW sees no costs and no budget: it does strictly less.
* ``MABWiser``: epsilon-greedy (no contexts) or LinUCB on a one-hot context, M = 1, one
  ``predict`` + ``partial_fit`` per query (on ``--mabwiser-queries`` queries: it is slow).
* ``journal normal / memory``: the default OMD router with a journal at
  ``journal_sync = "normal"`` (two frames of the journal's tail a pair, folded into SQLite in
  batches: ``msroute.router.tail``), as a ratio to the same router in memory.

The timing starts once the live router's compiled step (``msroute.policies.live_step``) has
loaded in its background thread: a router's steady state (it decides the same before).

Usage: ``python benchmarks/bench_peers.py [--queries 20000] [--mabwiser-queries 2000]
[--journal-only]``. The
peers are optional, benchmark-only dependencies (``pip install -e ".[peers]"``); a peer that is
not installed is skipped with a message.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from msroute.router import Router

CONTEXTS = ["c0", "c1", "c2"]


class Stream:
    """The simulated stream of one cell: means (X, K), costs (K,), outcomes (T, K), contexts."""

    def __init__(self, k: int, m: int, n_contexts: int, queries: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.k, self.m, self.queries = k, m, queries
        self.means = rng.beta(2.0, 2.0, size=(n_contexts, k))
        self.costs = rng.uniform(0.1, 1.0, size=k)
        self.budget = 0.7 * m * float(self.costs.mean())
        self.ctx = rng.integers(0, n_contexts, size=queries)
        self.contexts = CONTEXTS[:n_contexts] if n_contexts > 1 else None
        self.outcomes = (rng.random((queries, k)) < self.means[self.ctx]).astype(float)
        self.names = [self.contexts[c] if self.contexts else None for c in self.ctx]

    def config(
        self, policy: str, budget: float | None = None, pacing: bool = True
    ) -> dict[str, Any]:
        """The Router's configuration for ``policy`` on this stream (``budget``: another
        budget than the stream's; ``pacing``: the router's key)."""
        cfg: dict[str, Any] = {
            "policy": policy,
            "pacing": pacing,
            "m_draws": self.m,
            "cost_names": ["usd"],
            "seed": 0,
            "experts": {f"m{i}": [float(c)] for i, c in enumerate(self.costs)},
            "constraints": {"upper": {"usd": self.budget if budget is None else budget}},
        }
        if self.contexts:
            cfg["contexts"] = list(self.contexts)
        return cfg


def compiled_step_loaded(timeout: float = 120.0) -> bool:
    """Wait (at most ``timeout`` seconds) until the live router's compiled step has loaded in
    its background thread (``msroute.policies.live_step``), so that the timed queries measure
    a router in its steady state; before it loads a router decides the same, in Python."""
    from msroute.policies import live_step

    live_step.start()
    stop = time.monotonic() + timeout
    while live_step.kernels() is None and time.monotonic() < stop:
        time.sleep(0.05)
    return live_step.kernels() is not None


def timed(run: Callable[[int, int], float], queries: int, warm: int = 200) -> tuple[float, float]:
    """(pairs per second, mean reward) of ``run(start, stop)`` over the queries after a
    warm-up (the first ``warm`` queries, not timed)."""
    run(0, warm)
    tic = time.perf_counter()
    total = run(warm, queries)
    return (queries - warm) / (time.perf_counter() - tic), total / (queries - warm)


def interleaved(
    runs: dict[str, Callable[[int, int], float]], queries: int, warm: int = 200, block: int = 500
) -> dict[str, tuple[float, float]]:
    """(pairs per second, mean reward) of each run over the same queries after a warm-up,
    timed in alternating blocks of ``block`` queries (who goes first rotates), so that a burst
    of load on a noisy machine hits every run alike and the ratios compare like with like."""
    for run in runs.values():
        run(0, warm)
    names = list(runs)
    spent = dict.fromkeys(names, 0.0)
    total = dict.fromkeys(names, 0.0)
    for i, start in enumerate(range(warm, queries, block)):
        stop = min(start + block, queries)
        first = i % len(names)
        for name in names[first:] + names[:first]:
            tic = time.perf_counter()
            total[name] += runs[name](start, stop)
            spent[name] += time.perf_counter() - tic
    n = queries - warm
    return {name: (n / spent[name], total[name] / n) for name in names}


def router_run(router: Router, s: Stream) -> Callable[[int, int], float]:
    col = {f"m{i}": i for i in range(s.k)}
    outcomes, names = s.outcomes, s.names

    def run(start: int, stop: int) -> float:
        total = 0.0
        for t in range(start, stop):
            d = router.route(context=names[t])
            row = outcomes[t]
            r = max(row[col[e]] for e in d.team)
            router.feedback(d.decision_id, r)
            total += r
        return total

    return run


def vw_run(s: Stream) -> Callable[[int, int], float] | None:
    try:
        import vowpalwabbit
    except ImportError:
        return None
    args = "--cb_explore_adf --epsilon 0.05 --quiet" + (" -q sa" if s.contexts else "")
    vw = vowpalwabbit.Workspace(args)
    actions = [f"|a m{i}" for i in range(s.k)]
    shared = [[f"shared |s {c}"] for c in (s.contexts or [])]
    rng = np.random.default_rng(1)
    uniforms = rng.random(s.queries)

    def run(start: int, stop: int) -> float:
        total = 0.0
        for t in range(start, stop):
            head = shared[s.ctx[t]] if s.contexts else []
            pmf = vw.predict(head + actions)
            a = min(int(np.searchsorted(np.cumsum(pmf), uniforms[t] * sum(pmf))), s.k - 1)
            r = float(s.outcomes[t, a])
            ex = head + actions
            ex[len(head) + a] = f"0:{-r}:{pmf[a]} |a m{a}"
            vw.learn(ex)
            total += r
        return total

    return run


def mabwiser_run(s: Stream) -> Callable[[int, int], float] | None:
    try:
        from mabwiser.mab import MAB, LearningPolicy
    except ImportError:
        return None
    arms = list(range(s.k))
    onehot = np.eye(len(s.contexts or [None]))
    if s.contexts:
        mab = MAB(arms, LearningPolicy.LinUCB(alpha=1.0), seed=1)
        mab.fit(arms, [0.5] * s.k, contexts=onehot[np.zeros(s.k, dtype=int)])
    else:
        mab = MAB(arms, LearningPolicy.EpsilonGreedy(epsilon=0.05), seed=1)
        mab.fit(arms, [0.5] * s.k)

    def run(start: int, stop: int) -> float:
        total = 0.0
        for t in range(start, stop):
            if s.contexts:
                x = onehot[s.ctx[t] : s.ctx[t] + 1]
                a = int(mab.predict(x))
                r = float(s.outcomes[t, a])
                mab.partial_fit([a], [r], contexts=x)
            else:
                a = int(mab.predict())
                r = float(s.outcomes[t, a])
                mab.partial_fit([a], [r])
            total += r
        return total

    return run


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--mabwiser-queries", type=int, default=2_000)
    ap.add_argument("--k", type=int, nargs="*", default=[5, 50])
    ap.add_argument("--journal-only", action="store_true", help="only the journal's ratio")
    args = ap.parse_args()
    if not args.journal_only:
        peers(args)
    journal(args)


def peers(args: argparse.Namespace) -> None:
    """The routers against the peers, in memory."""
    vw_v, mab_v = version("vowpalwabbit"), version("mabwiser")
    print(f"Vowpal Wabbit: {vw_v or 'not installed, skipped (pip install -e .[peers])'}")
    print(f"MABWiser: {mab_v or 'not installed, skipped (pip install -e .[peers])'}")
    print(f"route + feedback pairs per second, {args.queries} queries, in process, no journal")
    print(f"the live router's compiled step loaded: {compiled_step_loaded()}")
    names = ("omd", "cbwk", "floor", "own", "VW", "MABW")
    head = f"{'K':>3} {'M':>2} {'ctx':>3}  " + " ".join(f"{n:>7}" for n in names)
    print(head + "  omd/VW  cbwk/VW  floor/VW  own/VW  omd reward  VW reward")
    for k in args.k:
        for m in (1, 2):
            for x in (1, 3):
                s = Stream(k, m, x, args.queries)
                runs = {
                    "omd": router_run(Router(s.config("omd")), s),
                    "cbwk": router_run(Router(s.config("cbwk")), s),
                    "floor": router_run(Router(s.config("uniform", s.m * max(s.costs))), s),
                    "own": router_run(Router(s.config("uniform", pacing=False)), s),
                }
                peer = vw_run(s) if m == 1 else None
                if peer is not None:
                    runs["vw"] = peer
                got = interleaved(runs, s.queries)
                (omd, r_omd), (cbwk, _) = got["omd"], got["cbwk"]
                floor, own = got["floor"][0], got["own"][0]
                vw, r_vw = got.get("vw", (None, None))
                mab = None
                run = mabwiser_run(s) if m == 1 else None
                if run is not None:
                    mab, _ = timed(run, min(s.queries, args.mabwiser_queries), warm=50)
                cells = [
                    f"{v:>7.0f}" if v else f"{'-':>7}" for v in (omd, cbwk, floor, own, vw, mab)
                ]
                ratio = (
                    f"{omd / vw:>6.2f}x  {cbwk / vw:>6.2f}x  {floor / vw:>7.2f}x  {own / vw:>5.2f}x"
                    if vw
                    else f"{'':>6}   {'':>6}   {'':>7}   {'':>5} "
                )
                rvw = f"{r_vw:>9.3f}" if r_vw is not None else f"{'-':>9}"
                print(
                    f"{k:>3} {m:>2} {x:>3}  " + " ".join(cells) + f"  {ratio}  "
                    f"{r_omd:>10.3f}  {rvw}",
                    flush=True,
                )


def journal(args: argparse.Namespace) -> None:
    """The default router with a journal at "normal" against the same router in memory."""
    print("the default OMD router with a journal at journal_sync = 'normal' against in memory")
    print(f"the live router's compiled step loaded: {compiled_step_loaded()}")
    for k in args.k:
        s = Stream(k, 1, 3, args.queries)
        with tempfile.TemporaryDirectory() as tmp:
            cfg = {**s.config("omd"), "journal_sync": "normal"}
            router = Router(cfg, journal=Path(tmp) / "j.db")
            got = interleaved(
                {"memory": router_run(Router(s.config("omd")), s), "normal": router_run(router, s)},
                s.queries,
            )
            router.close()
        mem, normal = got["memory"][0], got["normal"][0]
        print(
            f"K = {k:>2}, M = 1, 3 contexts: memory {mem:.0f}/s, normal {normal:.0f}/s, "
            f"memory / normal {mem / normal:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
