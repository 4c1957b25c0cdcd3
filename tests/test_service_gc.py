"""A server process freezes what exists when it starts serving, and what the live router's
compiled step brings in when its background load ends (``msroute.service.server``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from msroute.policies import live_step

# Run in a child process: freezing the collector's objects is the process's own business.
_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, threading
    from msroute.policies import live_step
    from msroute.service import server

    held = []
    go = threading.Event()

    def load():  # the compiled step's load, standing in: objects that live on, made late
        go.wait(10)
        held.extend([[i] for i in range(30_000)])
        live_step._settled.set()

    live_step._load = load
    live_step.start()
    server.collect_for_serving()  # what the server does once its app is built
    frozen_before = gc.get_freeze_count()

    async def main():
        refreeze = asyncio.ensure_future(server.collect_when_loaded())
        await asyncio.sleep(0.3)
        waiting = not refreeze.done()  # the load has not ended: nothing frozen yet
        go.set()
        await refreeze
        return waiting

    waiting = asyncio.run(main())
    print(waiting, len(gc.get_objects()), gc.get_freeze_count() - frozen_before)
    """
)


def test_what_the_compiled_steps_load_brings_in_is_frozen_once_it_has_loaded() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    waiting, tracked, newly_frozen = out.stdout.split()
    assert waiting == "True"  # it waited for the load, however long it took
    assert int(newly_frozen) > 25_000  # the load's 30,000 lists joined the frozen objects
    assert int(tracked) < 5_000  # a full collection has next to nothing left to traverse


def test_settled_is_true_at_once_when_no_load_was_started(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(live_step, "_started", False)
    assert live_step.settled(0.0)
