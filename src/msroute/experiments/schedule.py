"""The sweep driver: run (or load from the cache) every cell, costliest first, in parallel.

The results do not depend on the order, the backend or the number of workers (each cell's
numbers depend on its specification only, ``msroute.experiments.cells``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from msroute.env_layouts import StackedEnv
from msroute.errors import InvalidValueError
from msroute.experiments.backends import Backend, LocalBackend
from msroute.experiments.cellcache import load_cell, save_cell
from msroute.experiments.cells import (
    CellEnv,
    CellResult,
    CellSpec,
    cached_env,
    check_cell_memory,
    instance_key,
)
from msroute.experiments.output import Progress
from msroute.experiments.sweep import ignores_levels

__all__ = ["compile_ahead", "draw_ahead", "run_cells"]


def run_cells(
    specs: Sequence[CellSpec],
    worker: Callable[[CellSpec], CellResult],
    out_dir: Path,
    *,
    jobs: int = 1,
    backend: Backend | None = None,
    progress: Progress | None = None,
    title: str = "cells",
    drop: tuple[str, ...] = (),
    when_free: Callable[[], None] | None = None,
) -> list[CellResult]:
    """Run (or load from the cache) every cell; results in the order of ``specs``.

    Parameters
    ----------
    specs : sequence of CellSpec
    worker : callable
        A module-level function ``spec -> result`` (picklable, for process parallelism).
    out_dir : Path
        Results directory; finished cells are cached under ``out_dir/cells`` and reused, so
        an interrupted sweep resumes where it stopped.
    jobs : int, default 1
        Worker processes of the default backend; 1 runs serially in this process.
    backend : Backend, optional
        Where the cells run (``msroute.experiments.backends``); default
        ``LocalBackend(jobs)``. Whatever the backend, this process stores each finished cell.
    progress : Progress, optional
        Shows a bar over the cells (none by default).
    title : str
        The bar's label.
    drop : tuple of str, optional
        Outputs to leave out of the returned results (they stay in the cache), so that a
        sweep of many cells holds only what its caller reads.
    when_free : callable, optional
        Called once, in this process, as soon as fewer cells are left running than ``jobs``:
        a core is then free until the last cell ends, and the caller's next step can start
        its fixed costs there (e.g. ``msroute.experiments.output.preload_plotting``)
        instead of after the last cell. It runs in a thread of its own, so that the cells
        still running are stored as they finish meanwhile; its error, if any, is raised here
        once every cell is stored. Not called when no cell runs in parallel.
    """
    bar = progress or Progress(enabled=False)

    def kept(result: CellResult | None) -> CellResult | None:
        return None if result is None else {k: v for k, v in result.items() if k not in drop}

    results: list[CellResult | None] = [kept(load_cell(out_dir, s)) for s in specs]
    todo = [i for i, r in enumerate(results) if r is None]
    for i in todo:  # before any work
        check_cell_memory(specs[i])
    with bar.track(title, len(specs)):
        for i, r in enumerate(results):
            if r is not None:
                bar.advance(_label(specs[i]) + " (cached)")

        running = len(todo)
        freed: list[Future[None]] = []

        def done(i: int, result: CellResult) -> None:
            nonlocal running
            running -= 1
            if not freed and 0 < running < jobs and when_free is not None:
                # Once: the first time a worker has no cell left to start.
                freed.append(helper.submit(when_free))
            save_cell(out_dir, specs[i], result)
            results[i] = kept(result)
            bar.advance(_label(specs[i]))

        with ThreadPoolExecutor(max_workers=1) as helper:  # when_free's thread
            if todo:
                _run_todo(specs, todo, worker, backend or LocalBackend(jobs), done)
        for started in freed:
            started.result()
    return [r for r in results if r is not None]


def _run_todo(
    specs: Sequence[CellSpec],
    todo: list[int],
    worker: Callable[[CellSpec], CellResult],
    runner: Backend,
    done: Callable[[int, CellResult], None],
) -> None:
    """Run the cells ``todo`` (indices into ``specs``), costliest first, and hand each result
    to ``done(i, result)``; workers forked from this process share the first cell's skills
    and the simulator's machine code, loaded here first."""
    order = _costliest_first(specs, todo)
    drawn: list[CellEnv] = []
    if isinstance(runner, LocalBackend) and runner.forks(len(todo)):
        # The environment is built first, alone: it is Python work under the GIL, as loading
        # the machine code is; the draws run without it, and the loading overlaps them.
        _spec_env(specs[order[0]])
        load_draws()
        with ThreadPoolExecutor(max_workers=1) as loader:
            loaded = loader.submit(compile_ahead)
            drawn += draw_ahead(specs[order[0]], runner.jobs)
            loaded.result()
    try:
        runner.run(worker, [specs[i] for i in order], lambda j, res: done(order[j], res))
    finally:
        cached_env.cache_clear()  # the workers are done with what was drawn ahead
        # Its pages are freed by a thread of their own: unmapping hundreds of MB takes tens of
        # ms, which the caller's next step (a figure) need not wait for.
        threading.Thread(target=drawn.clear, daemon=True).start()


def _spec_env(spec: CellSpec) -> CellEnv:
    """A cell's environment(s), from this process's cache (``cached_env``)."""
    return cached_env(spec.env, spec.seeds, instance_key(spec), spec.horizon, spec.env_params)


def draw_ahead(spec: CellSpec, threads: int) -> list[CellEnv]:
    """Draw the skills of a cell's environment(s) into this process's cache, one environment
    per thread (up to ``threads``), before worker processes are forked from it: the workers
    then share these pages instead of each drawing every environment again (the same values:
    the stream is a pure function of the cell's specification). Nothing is drawn when the
    environments would not keep every chunk (a long horizon): each cell then draws its own.
    Returns the environment drawn, in a list (empty when nothing was drawn)."""
    env = _spec_env(spec)
    if env.cache_chunks * env.chunk_size < spec.horizon:
        return []
    if isinstance(env, StackedEnv):
        env.draw_ahead(spec.horizon, threads)
        return [env]
    for start in range(0, spec.horizon, env.chunk_size):
        env.skills(start, min(start + env.chunk_size, spec.horizon))
    return [env]


def load_draws() -> None:
    """Import the environments' compiled draws (``msroute._skill_draws``: numba and their
    machine code) in this thread, before ``compile_ahead`` loads the simulator's beside the
    draws: numba's first import is not safe from two threads at once."""
    importlib.import_module("msroute._skill_draws")


def compile_ahead() -> None:
    """Load the simulator's compiled round (``msroute._outcome``) in this process before
    worker processes are forked from it: they share it instead of each loading it from numba's
    cache (about 0.4 s of CPU) or compiling it (about 2 s) again."""
    from msroute._outcome import blas_pairs_order

    blas_pairs_order()


def _costliest_first(specs: Sequence[CellSpec], todo: list[int]) -> list[int]:
    """The order in which the cells start: grouped by skill stream (environment and block of
    seeds, in order of appearance: a worker's cached skills then serve its next cells instead
    of being drawn again for each), the costliest policy first within each
    (``msroute.experiments.cell_costs.relative_cost``, per level played), so that no long
    cell starts last while the other workers idle. The results do not depend on it."""

    def stream(spec: CellSpec) -> tuple[object, ...]:
        return (spec.env, spec.seeds, spec.horizon, spec.env_params, instance_key(spec))

    envs: dict[tuple[object, ...], int] = {}
    for i in todo:
        envs.setdefault(stream(specs[i]), len(envs))

    def cost(spec: CellSpec) -> float:
        try:
            shared = ignores_levels(spec)
        except InvalidValueError:  # a name the registry does not know (e.g. OPT's cells)
            return 1.0
        from msroute.experiments.cell_costs import relative_cost

        # A policy that ignores the constraints plays one level for all (sweep_worker).
        return relative_cost(spec.policy) / (len(spec.levels) if shared else 1)

    return sorted(todo, key=lambda i: (envs[stream(specs[i])], -cost(specs[i])))


def _label(spec: CellSpec) -> str:
    seeds = f"seed {spec.seeds[0]}" if len(spec.seeds) == 1 else f"{len(spec.seeds)} seeds"
    return f"{spec.env}/{spec.policy} N={spec.n_dims} {seeds}"
