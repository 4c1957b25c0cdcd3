"""The router owner: calls one at a time, group commit, answers only after the COMMIT.

A stand-in router records its transactions: which calls each holds, when it commits (the
COMMIT takes a few milliseconds, as a disk does) and whether a call ever ran while a COMMIT was
under way. Many concurrent callers then check that calls are grouped, that each caller learns its
result only once its group is committed, that a failing call fails alone, and that a failed
COMMIT acknowledges nothing of its group.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msroute.errors import InvalidFeedbackError, JournalError, MSRouteError
from msroute.router import Router
from msroute.router.journal import SERVED_FOLD, TAIL_FOLD, Journal
from msroute.service.owner import RouterOwner

pytestmark = pytest.mark.timeout(60)


class Disk:
    """A stand-in Router: each ``group()`` is a transaction whose COMMIT takes ``commit_s``."""

    def __init__(self, commit_s: float = 0.005, fail_commit: bool = False, quick: bool = False):
        self.commit_s = commit_s
        self.fail_commit = fail_commit
        self.quick_commit = quick  # Router.quick_commit: the owner commits on the event loop
        self.open: list[int] | None = None  # the calls of the open transaction
        self.committed: list[list[int]] = []
        self.committing = False
        self.overlaps = 0  # calls made while a COMMIT was under way
        self.commit_threads: set[int] = set()
        self.closed = False

    @contextlib.contextmanager
    def group(self) -> Iterator[Disk]:
        assert self.open is None, "transactions do not nest here"
        self.open = []
        try:
            yield self
        finally:
            self.committing = True
            self.commit_threads.add(threading.get_ident())
            time.sleep(self.commit_s)
            done, self.open = self.open, None
            self.committing = False
            if self.fail_commit:
                raise JournalError("journal.db: disk I/O error")
            self.committed.append(done)

    def apply(self, value: int) -> int:
        if self.committing:
            self.overlaps += 1
        assert self.open is not None, "a call outside a transaction"
        if value < 0:
            raise InvalidFeedbackError(f"value: {value} is negative")
        self.open.append(value)
        return value

    def close(self) -> None:
        self.closed = True


def serve(disk: Disk, values: list[int]) -> tuple[list[Any], RouterOwner]:
    """Call ``disk.apply(v)`` for every value concurrently; each outcome, checked when it comes."""

    async def main() -> tuple[list[Any], RouterOwner]:
        owner = RouterOwner("test", lambda: disk)  # type: ignore[arg-type, return-value]
        await owner.start()

        async def one(value: int) -> Any:
            try:
                result = await owner.call(lambda r: r.apply(value))  # type: ignore[attr-defined]
            except Exception as exc:
                return exc
            # Answered only once durable: the value is in a committed transaction.
            assert any(value in group for group in disk.committed)
            return result

        try:
            return list(await asyncio.gather(*(one(v) for v in values))), owner
        finally:
            await owner.stop()

    return asyncio.run(main())


def test_calls_are_grouped_and_answered_after_their_commit() -> None:
    disk = Disk()
    outcomes, owner = serve(disk, list(range(200)))
    assert outcomes == list(range(200))
    assert sorted(v for group in disk.committed for v in group) == list(range(200))
    assert owner.calls == 200 and owner.groups == len(disk.committed) < 200
    assert disk.overlaps == 0  # no call ever ran while a COMMIT was under way
    assert threading.get_ident() not in disk.commit_threads  # the COMMIT left the event loop
    assert disk.closed


def test_a_failing_call_fails_alone() -> None:
    disk = Disk()
    outcomes, _ = serve(disk, [1, -2, 3, -4, 5])
    assert [o for o in outcomes if isinstance(o, int)] == [1, 3, 5]
    errors = [o for o in outcomes if not isinstance(o, int)]
    assert [type(e) for e in errors] == [InvalidFeedbackError] * 2
    assert "-2" in str(errors[0]) and "-4" in str(errors[1])
    assert sorted(v for group in disk.committed for v in group) == [1, 3, 5]


def test_a_failed_commit_acknowledges_nothing() -> None:
    disk = Disk(fail_commit=True)

    async def main() -> list[Any]:
        owner = RouterOwner("test", lambda: disk)  # type: ignore[arg-type, return-value]
        await owner.start()
        try:
            return list(
                await asyncio.gather(
                    *(owner.call(lambda r, v=v: r.apply(v)) for v in range(20)),  # type: ignore[misc]
                    return_exceptions=True,
                )
            )
        finally:
            await owner.stop()

    outcomes = asyncio.run(main())
    assert all(isinstance(o, JournalError) for o in outcomes)
    assert disk.committed == []


def test_a_quick_commit_stays_on_the_event_loop() -> None:
    disk = Disk(commit_s=0.0, quick=True)
    outcomes, owner = serve(disk, list(range(50)))
    assert outcomes == list(range(50)) and owner.calls == 50
    assert disk.commit_threads == {threading.get_ident()}  # no hand-over to the owner thread
    assert disk.overlaps == 0


def test_a_cancelled_caller_of_a_call_alone_still_holds_the_router_until_its_commit() -> None:
    """A call that finds the owner idle is applied at once, in its caller's task; cancelled
    while its COMMIT is under way on the owner thread, it is still committed, and the next
    call waits for that COMMIT (no transaction is opened while another commits)."""
    disk = Disk(commit_s=0.3)

    async def main() -> None:
        owner = RouterOwner("test", lambda: disk)  # type: ignore[arg-type, return-value]
        await owner.start()
        try:
            first = asyncio.ensure_future(owner.call(lambda r: r.apply(1)))  # type: ignore[attr-defined]
            await asyncio.sleep(0.1)
            assert disk.committing  # applied at once; its COMMIT under way
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert await owner.call(lambda r: r.apply(2)) == 2  # type: ignore[attr-defined]
            assert disk.committed == [[1], [2]] and disk.overlaps == 0
            assert owner.groups == 2 and owner.calls == 2
        finally:
            await owner.stop()

    asyncio.run(main())


def test_calls_submitted_in_one_turn_share_a_group_done_before_the_next_step() -> None:
    """``submit`` returns at once; the owner commits every call submitted in the turn as one
    group before a task created after them first runs: it finds them done, never before
    their COMMIT."""
    disk = Disk(commit_s=0.0, quick=True)

    async def main() -> None:
        owner = RouterOwner("test", lambda: disk)  # type: ignore[arg-type, return-value]
        await owner.start()
        try:
            values = [1, -2, 3, 4]
            futures = [owner.submit(lambda r, v=v: r.apply(v)) for v in values]  # type: ignore[misc]
            assert not any(f.done() for f in futures) and disk.committed == []

            async def next_step() -> list[Any]:
                assert all(f.done() for f in futures)  # no turn of the event loop waited
                return [f.exception() or f.result() for f in futures]

            outcomes = await asyncio.ensure_future(next_step())
            assert outcomes[0] == 1 and outcomes[2:] == [3, 4]
            assert isinstance(outcomes[1], InvalidFeedbackError)  # fails alone
            assert disk.committed == [[1, 3, 4]] and owner.groups == 1
        finally:
            await owner.stop()

    asyncio.run(main())


def test_a_submitted_call_is_done_only_after_its_commit_and_fails_with_it() -> None:
    """A COMMIT that waits for the disk (on the owner thread) comes first; one that fails
    fails every submitted call of its group; after ``stop``, a submitted call is refused."""
    for fail in (False, True):
        disk = Disk(commit_s=0.05, fail_commit=fail)

        async def main(disk: Disk) -> list[Any]:
            owner = RouterOwner("test", lambda: disk)  # type: ignore[arg-type, return-value]
            await owner.start()
            try:
                futures = [owner.submit(lambda r, v=v: r.apply(v)) for v in range(5)]  # type: ignore[misc]
                await asyncio.sleep(0.01)
                assert disk.committing and not any(f.done() for f in futures)
                return list(await asyncio.gather(*futures, return_exceptions=True))
            finally:
                await owner.stop()
                late = owner.submit(lambda r: r.apply(9))  # type: ignore[attr-defined]
                with pytest.raises(MSRouteError, match="shutting down"):
                    await late

        outcomes = asyncio.run(main(disk))
        if fail:
            assert all(isinstance(o, JournalError) for o in outcomes) and disk.committed == []
        else:
            assert outcomes == list(range(5)) and disk.committed == [list(range(5))]


def test_a_served_router_folds_in_small_batches(tmp_path: Path) -> None:
    """The owner has its router fold ``SERVED_FOLD`` events at a time: each fold holds the
    next calls up for a fraction of a default fold's time."""
    config = {
        "policy": "omd",
        "m_draws": 1,
        "cost_names": ["usd"],
        "journal_sync": "normal",
        "experts": {"a": [0.03], "b": [0.002]},
        "constraints": {"upper": {"usd": 0.02}},
    }

    async def main() -> int:
        owner = RouterOwner("test", lambda: Router(config, journal=tmp_path / "j.db"))
        router = await owner.start()
        try:
            journal = router._journal
            assert isinstance(journal, Journal)
            return journal.fold_every
        finally:
            await owner.stop()

    assert asyncio.run(main()) == SERVED_FOLD < TAIL_FOLD
