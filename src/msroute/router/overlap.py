"""Run a call's in-memory work on a helper thread while the caller waits for the disk.

At ``synchronous=FULL`` a commit waits for the disk's flush (about 160 us on an idle 2-core
machine, as long as the policy's whole learning step). Python's ``sqlite3`` releases the GIL
while SQLite commits, so a helper thread can learn the feedback meanwhile: the caller hands the
work over, commits, then waits for the work before it returns. The caller keeps the journal
(the connection is used by one thread only) and the helper touches only in-memory state that
the caller leaves alone until ``Overlap.finish`` returns, so the two never race. The order
of events and every value computed are those of doing the work before the commit.

Why the caller commits and the helper computes (and not the other way round): the caller holds
the GIL when it hands the work over, and a thread that asks for the GIL gets it only when the
holder releases it; the commit releases it at once, so the helper starts as the flush starts.

On a busy machine the helper may not get a core before the commit is done; then the caller
takes the work back and runs it itself, so handing it over never costs more than a few
microseconds.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable

__all__ = ["Overlap"]


class _Job:
    """One piece of work; ``taken`` goes to whichever thread starts it first."""

    __slots__ = ("done", "error", "taken", "work")

    def __init__(self, work: Callable[[], None]) -> None:
        self.work = work
        self.taken = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()  # released by the helper when the work has run
        self.error: BaseException | None = None


class Overlap:
    """One helper thread (started on first use) running one piece of work at a time.

    The thread holds only the queue of work, so an ``Overlap`` that is dropped without
    ``close`` is still collected, and its thread then ends.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._job: _Job | None = None
        self._thread: threading.Thread | None = None
        self._stop: Callable[[], object] | None = None

    def start(self, work: Callable[[], None]) -> None:
        """Hand ``work`` to the helper; the caller must ``finish`` before touching its state."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=_serve, args=(self._jobs,), name="msroute-overlap", daemon=True
            )
            self._thread.start()
            self._stop = weakref.finalize(self, self._jobs.put, None)
        self._job = _Job(work)
        self._jobs.put(self._job)

    def finish(self) -> bool:
        """Wait for the work handed over: True once the helper has run it (what it raised is
        raised here); False if the helper had not started it, which it now never will (the
        caller runs it itself, or not at all).

        An interrupt (Ctrl-C) while waiting is raised only once the work is done, so that the
        caller never sees state that is half changed.
        """
        job, self._job = self._job, None
        assert job is not None, "finish() without start()"
        if job.taken.acquire(blocking=False):
            return False
        interrupt: BaseException | None = None
        while True:
            try:
                job.done.acquire()
                break
            except BaseException as exc:  # KeyboardInterrupt: wait all the same, then raise
                interrupt = exc
        if interrupt is not None:
            raise interrupt
        if job.error is not None:
            raise job.error
        return True

    def close(self) -> None:
        """Stop the helper thread (idempotent; no work may be pending)."""
        if self._thread is not None and self._stop is not None:
            self._stop()  # puts the end-of-work marker, once
            self._thread.join()
            self._thread = None


def _serve(jobs: queue.SimpleQueue[_Job | None]) -> None:
    """The helper thread: run each job it gets first, until the end-of-work marker."""
    while True:
        job = jobs.get()
        if job is None:
            return
        if job.taken.acquire(blocking=False):  # else the caller took it back
            try:
                job.work()
            except BaseException as exc:  # handed to the caller by finish()
                job.error = exc
            finally:
                job.done.release()
        del job  # while waiting for the next one, hold nothing of this one
