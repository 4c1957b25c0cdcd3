"""``Router.quick_commit`` and the router owner's use of it: what waits for the disk never runs on
the event loop, and what does not wait for it never leaves it.

A group's commit is quick when it appends one frame to the journal's tail and nothing else: at
``journal_sync = "normal"``, with no fold into SQLite and no snapshot due (or with folds in the
background, as a served router's: any frame). The owner (the service's and the gateway's) then
commits on the event loop's thread; every fold, sync and SQLite COMMIT must still happen off it,
on the owner's thread or the journal's folder thread.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from msroute.router import Router, folder, recovery
from msroute.router import journal as journal_module
from msroute.router.journal import Journal
from msroute.service.owner import RouterOwner

pytestmark = pytest.mark.timeout(120)

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 1,
    "cost_names": ["usd"],
    "seed": 5,
    "snapshot_every": 50,
    "experts": {"a": [0.03], "b": [0.002], "c": [0.01]},
    "constraints": {"upper": {"usd": 0.02}},
}


@pytest.fixture
def small_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "TAIL_FOLD", 32)


def _pair(router: Router, i: int) -> None:
    """A gateway's two calls: a decision, then its cost."""
    decision = router.route(decision_id=f"q{i}")
    router.report_cost(decision.decision_id, {"usd": 0.001 * (1 + i % 5)})


@pytest.mark.usefixtures("small_folds")
def test_a_quick_commit_is_one_tail_frame_and_nothing_else(tmp_path: Path) -> None:
    router = Router({**CONFIG, "journal_sync": "normal"}, journal=tmp_path / "j.db")
    journal = router._journal
    assert isinstance(journal, Journal)
    seen = {"quick": 0, "fold": 0, "snapshot": 0}
    for i in range(400):
        with router.group():
            _pair(router, i)
            quick = router.quick_commit
            folded, snapped = journal._folded_seq, router._snap_seq
        fold, snapshot = journal._folded_seq != folded, router._snap_seq != snapped
        assert not (quick and (fold or snapshot)), i
        assert quick or fold or snapshot, i  # not quick only when the disk is waited for
        seen["quick"] += quick
        seen["fold"] += fold
        seen["snapshot"] += snapshot
    # Folds every 32 events, snapshots every 50: both happened, the rest were quick.
    assert seen["fold"] >= 10 and seen["snapshot"] >= 10 and seen["quick"] >= 300
    router.close()


def test_no_commit_is_quick_at_full_sync_and_every_one_without_a_journal(
    tmp_path: Path,
) -> None:
    full = Router({**CONFIG, "journal_sync": "full"}, journal=tmp_path / "j.db")
    memory = Router(CONFIG)
    for router in (full, memory):
        for i in range(5):
            with router.group():
                _pair(router, i)
                quick = router.quick_commit
            assert quick is (router is memory)
    full.close()


@pytest.mark.usefixtures("small_folds")
@pytest.mark.parametrize("sync", ["normal", "full"])
def test_the_owner_waits_for_the_disk_only_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: str
) -> None:
    """Nothing that waits for the disk runs on the event loop's thread: at ``"full"`` every
    snapshot and SQLite COMMIT runs on the owner's; at ``"normal"`` every fold, sync and
    snapshot's transaction on the folder thread (a served router folds in the background), and
    the quick commits (tail frames) on the event loop's, one call after another and many at
    once alike; every answer comes after its events are in the journal."""
    where: dict[str, list[int]] = {"fold": [], "snapshot": [], "sqlite": [], "tail": [], "job": []}

    def spy(name: str, real: Any) -> Any:
        def spied(*args: Any, **kwargs: Any) -> Any:
            where[name].append(threading.get_ident())
            return real(*args, **kwargs)

        return spied

    monkeypatch.setattr(Journal, "_fold", spy("fold", Journal._fold))
    monkeypatch.setattr(Journal, "_commit_sqlite", spy("sqlite", Journal._commit_sqlite))
    monkeypatch.setattr(recovery, "take_snapshot", spy("snapshot", recovery.take_snapshot))
    monkeypatch.setattr(folder, "run_job", spy("job", folder.run_job))
    path = tmp_path / "j.db"

    async def main() -> int:
        owner = RouterOwner("t", lambda: Router({**CONFIG, "journal_sync": sync}, journal=path))
        await owner.start()
        router = owner._router
        assert router is not None
        journal = router._journal
        assert isinstance(journal, Journal)
        monkeypatch.setattr(journal._tail, "append", spy("tail", journal._tail.append))
        try:
            for i in range(150):  # one at a time: each a group of one
                await owner.call(lambda r, i=i: _pair(r, i))
            await asyncio.gather(  # many at once: groups
                *(owner.call(lambda r, i=i: _pair(r, i)) for i in range(150, 300))
            )
            return threading.get_ident()
        finally:
            await owner.stop()

    loop_thread = asyncio.run(main())
    for name in ("fold", "sqlite", "job"):
        assert loop_thread not in where[name], name
    assert where["snapshot"]  # due every 50 events: taken
    if sync == "normal":
        # A served router folds in the background: every fold, sync of the tail and
        # snapshot's transaction is a job of the folder thread, and every group's commit is
        # quick, one frame written on the event loop's thread.
        assert where["job"] and not where["fold"]
        assert set(where["tail"]) == {loop_thread}
    else:
        assert loop_thread not in where["snapshot"]  # taken on the owner's thread
        assert where["sqlite"] and not where["tail"]
    reopened = Router.open(path)
    assert reopened.state()["decisions"] == 300
    reopened.close()
