"""Fill numba's on-disk cache before the test workers start: ``python tests/_numba_warmup.py PART``.

On a fresh clone no compiled loop is cached. Each test worker then compiles every loop it
meets, the sweeps' forked processes compile them again, and the servers and command lines the
tests start compile the live step in a background thread that dies with them. ``conftest.py``
runs this script's two parts side by side while the workers collect, so each loop is compiled
once and loaded from the cache everywhere after. The script only fills the cache: no test
depends on it, and a loop it misses is compiled where it is first called, as before.

PART is ``live`` (the live router's compiled step and the projection's compiled rows, the
longest single compile) or ``sim`` (the simulations' loops: every registered policy on a
short sweep).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from msroute.policies import set_debug_checks


def live() -> None:
    """The live router's step and the cut rows (what ``live_step.start`` loads in a thread),
    then a few decisions and feedbacks through them."""
    import numpy as np

    from msroute.core.qp.projection_cuts import project_cuts
    from msroute.policies import live_step
    from msroute.router import Router

    live_step.start()
    assert live_step.settled() and live_step.kernels() is not None, "the live step did not load"
    # one row through the compiled rows from read-only views, as project_cuts passes them
    project_cuts(np.array([0.7, 0.3]), 0.1, np.array([[1.0, 0.0]]), [0.5])
    config = {
        "policy": "omd",
        "m_draws": 1,
        "cost_names": ["usd"],
        "seed": 0,
        "experts": {"a": [0.1], "b": [0.5], "c": [1.0]},
        "constraints": {"upper": {"usd": 0.6}},
    }
    router = Router.from_config(config)
    for _ in range(40):
        decision = router.route()
        router.feedback(decision.decision_id, 1.0)
    router.close()


def sim(out: Path) -> None:
    """Every registered policy on a short Figure 2 sweep and a short benchmark sweep (the
    oracle included), in this process."""
    from msroute.experiments.bench import BenchConfig, run_bench
    from msroute.experiments.fig2 import Fig2Config, run_fig2
    from msroute.policies.registry import POLICIES

    run_fig2(Fig2Config(seeds=1, horizon=30), out / "fig2", jobs=1, plot=False, quiet=True)
    bench = BenchConfig(
        scenario="llm-sim", seeds=1, horizon=30, n_budgets=2, policies=tuple(POLICIES)
    )
    run_bench(bench, out / "bench", plot=False, quiet=True)


if __name__ == "__main__":
    set_debug_checks(True)  # as conftest.py: the tests' policies run their state checks
    if sys.argv[1:] == ["live"]:
        live()
    elif sys.argv[1:] == ["sim"]:
        with tempfile.TemporaryDirectory() as tmp:
            sim(Path(tmp))
    else:
        sys.exit(f"usage: {sys.argv[0]} live|sim")
