"""One owner per router: serialized calls and group commit.

A ``RouterOwner`` is the only code that touches its Router, one call at a time (no lost
updates), and it commits in groups: the calls that arrive while the previous group is being
committed are applied together inside one ``router.group()`` — one journal transaction, one
fsync at ``synchronous=FULL`` — and every caller is answered only after that transaction has
committed. A call that raises inside the group changed no state and gets its own error; the
others proceed. If the COMMIT itself fails (a full disk, an I/O error), or a write inside the
group did, every call of the group fails with the Router's ``JournalError``
and none is acknowledged; the Router has rolled the group back in memory too and goes on, so the
next group tries the disk again. ``RouterOwner.writable`` is False from a failed write until a
group commits: a service reports it as unhealthy. A Router that could not even read its journal
back (``Router.failure`` says why) is reopened in place before the next group, so it recovers
by itself once the disk does; a reopen rebuilds the state from the journal, so attempts are
spaced by ``REOPEN_INTERVAL_S`` seconds, or twice the last attempt's duration if longer (a
router spends at most a third of its time rebuilding however large its journal).

A health check asks the owner to check its journal now (``recover``): the checks that arrive
while one runs share it, and for ``PROBE_INTERVAL_S`` seconds after one the next are answered
from it, so a flood of health checks costs one check per interval, and a reopen no more often
than the traffic's own.

The calls run on the event loop's thread and the COMMIT on the owner's own thread, which waits
for the disk without the GIL while the event loop serves HTTP and the next group fills up: under
load the group size grows by itself with the number of concurrent requests, and with a single
client it is one call per commit (no added latency waiting for company). The Router and its
SQLite connection thus see two threads, never at once: the event loop hands the transaction to
the owner thread and touches the Router again only once the COMMIT has returned. Running the
calls on the event loop rather than the owner thread takes the GIL away from the HTTP work once
per group instead of at every statement the journal executes, which costs less CPU per request.
A commit that waits for no disk (``Router.quick_commit``: at ``journal_sync = "normal"`` one
``write`` of a frame to the journal's tail, no fold or snapshot due) is made on the event loop's
thread at once: handing it to the owner thread cost more than the write, and under load the
answer waited for the event loop to take the thread's result back behind the other requests'
work (milliseconds at the 99th percentile, for a write of microseconds). And a call that finds
nothing queued and no group under way is a group of one applied at once in its caller's task,
rather than queued for the owner's task to pick up and answer: each of those two hand-overs
waited behind whatever else the event loop had ready. Such a group whose commit turns out not to
be quick commits on the owner thread like any other, in a task of its own that holds the group's
lock until the COMMIT has returned, even if its caller is cancelled meanwhile. A fold of the
journal's tail into SQLite holds the next groups up the same way, so the owner has its router
fold in batches of ``SERVED_FOLD`` events rather than ``TAIL_FOLD`` (``Router.set_fold_every``):
pauses of about a millisecond instead of several.

``submit`` queues a call and returns its future at once: the owner's task, woken by the first
call queued, applies the calls queued meanwhile as one group when the event loop runs it, which
is before anything the caller scheduled after submitting (the loop runs what is ready in the
order it became ready). A caller that goes on in a task of its own, or hands its result to a
task that awaits it, thus finds its call committed when it resumes, without waiting a turn of
the event loop, and concurrent requests share one transaction and one journal write per turn
(the gateway's decisions and bookings).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from msroute.errors import MSRouteError
from msroute.router import Router
from msroute.router.journal import SERVED_FOLD

__all__ = ["RouterOwner"]

T = TypeVar("T")
_log = logging.getLogger("msroute.service")

#: Calls applied in one group at most (bounds the latency of the first call of a group).
MAX_GROUP = 256

#: Seconds between two attempts to reopen a router that cannot read its journal (at least).
REOPEN_INTERVAL_S = 1.0

#: Seconds during which the last check ``recover`` made answers the next ones.
PROBE_INTERVAL_S = 1.0


@dataclass(slots=True)
class _Call:
    fn: Callable[[Router], Any]
    future: asyncio.Future[Any]


class RouterOwner:
    """Owns one Router: opens it, applies its calls one at a time, commits them in groups.

    Parameters
    ----------
    name : str
        The router's name in the service (used in the thread name and logs).
    opener : callable
        Returns the Router; it runs on the owner thread (the journal's connection is created there).
    """

    def __init__(self, name: str, opener: Callable[[], Router]) -> None:
        self.name = name
        self._opener = opener
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"msroute-{name}")
        #: The calls waiting for the owner's task (None: stop), and its task's wake-up while
        #: it waits for one (a deque and a future: cheaper than an ``asyncio.Queue``).
        self._queue: collections.deque[_Call | None] = collections.deque()
        self._wake: asyncio.Future[None] | None = None
        self._router: Router | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        #: Groups committed and calls applied so far (the mean group size is calls / groups).
        self.groups = 0
        self.calls = 0
        self._next_reopen = 0.0
        self._next_probe = 0.0
        self._probing: asyncio.Task[bool] | None = None  # the check ``recover`` runs, shared
        self._lock = asyncio.Lock()  # held while a group is applied and committed

    @property
    def writable(self) -> bool:
        """Whether the router's journal took its last write (False before start, after stop,
        and from a failed write or commit until a group commits again)."""
        return self._router is not None and self._router.writable

    @property
    def failure(self) -> str | None:
        """Why the router is not writable, or None."""
        if self._router is None:
            return "not started" if self._task is None else "stopped"
        return self._router.failure

    async def recover(self) -> bool:
        """Check the router's journal between two groups (``Router.probe``: one small write,
        or a reopen where the router needs one and its reopen interval has passed), and return
        ``writable``: what a health check calls so that a router whose disk recovered is healthy
        again without waiting for traffic. Callers during a check share it; within
        ``PROBE_INTERVAL_S`` of one, ``writable`` is answered without a new check."""
        if self._router is None:
            return False
        if self._probing is None:
            if time.monotonic() < self._next_probe:
                return self.writable
            self._probing = asyncio.get_running_loop().create_task(self._probe())
        return await asyncio.shield(self._probing)

    async def _probe(self) -> bool:
        try:
            async with self._lock:
                router = self._router
                if router is None:
                    return False
                if _needs_reopen(router):
                    if time.monotonic() >= self._next_reopen:
                        await self._reopen(router)
                    return self.writable
                loop = asyncio.get_running_loop()
                return bool(await loop.run_in_executor(self._executor, router.probe))
        finally:
            self._next_probe = time.monotonic() + PROBE_INTERVAL_S
            self._probing = None

    async def start(self) -> Router:
        """Open the router on the owner thread and start serving calls."""
        loop = asyncio.get_running_loop()
        self._router = await loop.run_in_executor(self._executor, self._opener)
        if isinstance(self._router, Router):  # not a test's stand-in
            self._router.set_fold_every(SERVED_FOLD, background=True)
        self._task = loop.create_task(self._serve(), name=f"msroute-owner-{self.name}")
        return self._router

    async def call(self, fn: Callable[[Router], T]) -> T:
        """Apply ``fn(router)`` in the next group; return its result once the group committed."""
        if self._closing or self._task is None or self._task.done():
            raise MSRouteError(f"router {self.name!r} is shutting down")
        router = self._router
        if (
            router is not None
            and not self._queue
            and not self._lock.locked()
            and not _needs_reopen(router)
        ):
            ok, value = await self._now(router, fn)
            if ok:
                return cast(T, value)
            raise value
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._put(_Call(fn, future))
        return await future

    def submit(self, fn: Callable[[Router], T]) -> asyncio.Future[T]:
        """Queue ``fn(router)`` for the next group and return at once: the future of its
        result, set once that group has committed (or its error: the call's own, or the
        group's ``JournalError``, or ``MSRouteError`` if the owner is shutting down).

        Nothing about the call may be acknowledged before the future is done. The owner's task
        applies the group when the event loop next runs it, and the loop runs what is ready
        in the order it became ready: a caller that submits and then schedules its next step
        (a task, or a future another task awaits) finds the future done when that step runs,
        so it waits no turn of the event loop for it, and the calls submitted in one turn
        share one transaction and one journal write."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if self._closing or self._task is None or self._task.done():
            future.set_exception(MSRouteError(f"router {self.name!r} is shutting down"))
        else:
            self._put(_Call(fn, future))
        return future

    def _put(self, item: _Call | None) -> None:
        """Queue a call (or the stop) and wake the owner's task if it waits for one."""
        self._queue.append(item)
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _now(self, router: Router, fn: Callable[[Router], Any]) -> tuple[bool, Any]:
        """``fn`` as a group of one, applied at once (nothing waits, no group is under way)."""
        await self._lock.acquire()  # free: taken without waiting
        handed_on = False
        try:
            transaction, outcomes = self._run(router, [fn])
            if transaction is None:
                return outcomes[0]
            if _quick(router):
                return (await self._commit(router, transaction, outcomes, quick=True))[0]
            # A COMMIT that waits for the disk: its task releases the lock once it returned.
            task = asyncio.get_running_loop().create_task(
                self._commit_and_release(router, transaction, outcomes)
            )
            handed_on = True
            return (await asyncio.shield(task))[0]
        finally:
            if not handed_on:
                self._lock.release()

    async def _commit_and_release(
        self, router: Router, transaction: Any, outcomes: list[tuple[bool, Any]]
    ) -> list[tuple[bool, Any]]:
        try:
            return await self._commit(router, transaction, outcomes)
        finally:
            self._lock.release()

    async def stop(self) -> None:
        """Finish the queued calls, then close the router's journal and the owner thread."""
        self._closing = True
        if self._task is not None:
            self._put(None)
            await self._task
            self._task = None
        async with self._lock:  # a group of one may still be committing
            if self._router is not None:
                router = self._router
                self._router = None
                await asyncio.get_running_loop().run_in_executor(self._executor, router.close)
        self._executor.shutdown(wait=True)

    async def _serve(self) -> None:
        stopping = False
        queue = self._queue
        while not stopping:
            if not queue:
                self._wake = asyncio.get_running_loop().create_future()
                await self._wake
                continue
            first = queue.popleft()
            if first is None:
                break
            group = [first]
            while len(group) < MAX_GROUP and queue:
                item = queue.popleft()
                if item is None:
                    stopping = True
                    break
                group.append(item)
            async with self._lock:
                outcomes = await self._apply(group)
            for call, (ok, value) in zip(group, outcomes, strict=True):
                if call.future.done():  # the client went away; the call was still applied
                    continue
                if ok:
                    call.future.set_result(value)
                else:
                    call.future.set_exception(value)

    async def _apply(self, group: list[_Call]) -> list[tuple[bool, Any]]:
        """One journal transaction: the calls on this thread, the COMMIT on the owner thread
        (or on this one if it is quick)."""
        router = self._router
        assert router is not None  # started before any call is queued
        if _needs_reopen(router) and time.monotonic() >= self._next_reopen:
            await self._reopen(router)
        transaction, outcomes = self._run(router, [call.fn for call in group])
        if transaction is None:
            return outcomes
        return await self._commit(router, transaction, outcomes)

    @staticmethod
    def _run(
        router: Router, fns: list[Callable[[Router], Any]]
    ) -> tuple[Any, list[tuple[bool, Any]]]:
        """BEGIN, then each call: the open transaction (None if none could begin: nothing is
        applied) and each call's outcome, (True, result) or (False, its error)."""
        try:
            transaction = router.group()
            transaction.__enter__()  # BEGIN
        except Exception as exc:  # no transaction: nothing of the group is applied
            return None, [(False, exc)] * len(fns)
        outcomes: list[tuple[bool, Any]] = []
        for fn in fns:
            try:
                outcomes.append((True, fn(router)))
            except Exception as exc:  # the call changed nothing; others proceed
                outcomes.append((False, exc))
        return transaction, outcomes

    async def _commit(
        self,
        router: Router,
        transaction: Any,
        outcomes: list[tuple[bool, Any]],
        *,
        quick: bool | None = None,
    ) -> list[tuple[bool, Any]]:
        """COMMIT the group: the outcomes if it committed, else its error for every call
        (``quick``: whether the commit is quick, when the caller has just asked)."""
        try:
            if _quick(router) if quick is None else quick:
                transaction.__exit__(None, None, None)
            else:
                await asyncio.get_running_loop().run_in_executor(
                    self._executor, transaction.__exit__, None, None, None
                )
        except Exception as exc:  # the COMMIT failed: nothing of the group is acknowledged
            _log.error("router %s: group commit failed: %s", self.name, exc)
            return [(False, exc)] * len(outcomes)
        finally:
            self.groups += 1
            self.calls += len(outcomes)
        return outcomes

    async def _reopen(self, router: Router) -> None:
        """Reopen a router that cannot read its journal (not one that merely failed its last
        write: its state is the journal's, and the next group tries the disk)."""
        started = time.monotonic()
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, router.reopen)
        except Exception as exc:
            _log.error("router %s: cannot reopen the journal: %s", self.name, exc)
        else:
            _log.warning("router %s: journal reopened after a failure", self.name)
        finally:
            ended = time.monotonic()
            self._next_reopen = ended + max(REOPEN_INTERVAL_S, 2 * (ended - started))


def _quick(router: Router) -> bool:
    """Whether the open group's commit is quick (``Router.quick_commit``); never for an object
    without the property (a test's stand-in)."""
    return bool(getattr(router, "quick_commit", False))


def _needs_reopen(router: Router) -> bool:
    """Whether calls are refused until the router is reopened (its state is unknown); an
    object without the property (a test's stand-in) never is."""
    return bool(getattr(router, "needs_reopen", False))
