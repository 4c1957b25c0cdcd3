"""The ids a router mints (``Router.route(id_prefix=...)``, ``msroute.router.ids``).

A minted id is new by construction, so the router journals it without looking it up in the
journal (a read of SQLite, which a fold in the background may hold); a client's id is still
looked up, so a retry of any id, minted or not, gives the decision routed under it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from msroute.errors import DecisionConflictError, InvalidFeedbackError
from msroute.router import Router
from msroute.router import journal as journal_module
from msroute.router.ids import ID_BYTES, RandomHex
from msroute.router.journal import Journal

BATCH = 4  # ids written to ``refs`` every few events, so that lookups read the table

CONFIG: dict[str, Any] = {
    "policy": "omd",
    "m_draws": 2,
    "cost_names": ["usd"],
    "seed": 3,
    "experts": {"a": [0.03], "b": [0.002], "c": [0.01]},
    "constraints": {"upper": {"usd": 0.04}},
}


def test_random_hex_never_repeats_a_byte_of_its_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[bytes] = []
    system = os.urandom

    def urandom(n: int) -> bytes:
        drawn.append(system(n))
        return drawn[-1]

    monkeypatch.setattr(os, "urandom", urandom)
    random_hex = RandomHex()
    ids = [random_hex() for _ in range(1000)]  # more than one batch
    assert all(len(i) == 2 * ID_BYTES for i in ids) and len(set(ids)) == len(ids)
    # Each id is the next ID_BYTES bytes of a batch the OS gave (none skipped, none used twice).
    used = b"".join(bytes.fromhex(i) for i in ids)
    whole = b"".join(b[: len(b) // ID_BYTES * ID_BYTES] for b in drawn)
    assert len(drawn) == 4 and used == whole[: len(used)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_never_gives_its_parents_digits() -> None:
    """A batch of random bytes read before a fork: the child reads its own, so the two
    processes' next ids differ (a server that forks workers after opening its routers)."""
    random_hex = RandomHex()
    random_hex()  # a batch read in the parent
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, "".join(random_hex() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 1000).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    parent = "".join(random_hex() for _ in range(5))
    assert len(child) == len(parent) == 10 * ID_BYTES and child != parent


@pytest.mark.parametrize("background", [False, True], ids=["full", "normal-background"])
def test_a_minted_id_is_never_looked_up_and_a_retried_id_always_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, background: bool
) -> None:
    monkeypatch.setattr(journal_module, "REFS_BATCH", BATCH)
    sync = "normal" if background else "full"
    router = Router({**CONFIG, "journal_sync": sync}, tmp_path / "j.db")
    if background:
        router.set_fold_every(2, background=True)
    journal = router._journal
    assert isinstance(journal, Journal)
    statements: list[str] = []
    journal._db.set_trace_callback(statements.append)
    try:
        minted = [router.route(id_prefix="chat:") for _ in range(3 * BATCH)]
        for_client = router.route(decision_id="client-1", eligible=["a", "b"])
        router.route(id_prefix="chat:")
    finally:
        journal._db.set_trace_callback(None)
    lookups = [s for s in statements if "FROM refs" in s]
    # One lookup, the client's id's: none for the 3 * BATCH + 1 minted ids.
    assert len(lookups) == 1, lookups
    ids = [d.decision_id for d in minted]
    assert all(re.fullmatch(f"chat:[0-9a-f]{{{2 * ID_BYTES}}}", i) for i in ids)
    assert len(set(ids)) == len(ids)

    # Retries, of a minted id (its ids written to refs by now) and of the client's: the same
    # decisions, no new event.
    journal.fold_in_background = False  # every fold done: the lookups read refs
    before = journal.last_seq
    refs = journal._db.execute("SELECT COUNT(*) FROM refs WHERE ref = ?", (ids[0],))
    assert refs.fetchone() == (1,)
    again = router.route(decision_id=ids[0])
    assert (again.decision_id, again.draws) == (ids[0], minted[0].draws)
    assert router.route(decision_id="client-1").draws == for_client.draws
    with pytest.raises(DecisionConflictError, match="eligible"):
        router.route(decision_id="client-1", eligible=["c"])
    assert journal.last_seq == before
    router.close()

    reopened = Router.open(tmp_path / "j.db")
    assert reopened.route(decision_id=ids[-1]).draws == minted[-1].draws
    reopened.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"id_prefix": "chat:", "decision_id": "x"}, "not both"),
        ({"id_prefix": 7}, "id_prefix: must be a string"),
        ({"id_prefix": "\ud800"}, "id_prefix: .* is not UTF-8"),
    ],
)
def test_a_bad_id_prefix_is_refused_and_changes_nothing(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    router = Router(CONFIG, tmp_path / "j.db")
    before = router._journal.last_seq
    with pytest.raises(InvalidFeedbackError, match=match):
        router.route(**kwargs)
    assert router._journal.last_seq == before
    router.close()


def test_an_empty_prefix_gives_a_bare_random_id_journaled_as_any_other(tmp_path: Path) -> None:
    router = Router(CONFIG, tmp_path / "j.db")
    did = router.route(id_prefix="").decision_id
    assert re.fullmatch(f"[0-9a-f]{{{2 * ID_BYTES}}}", did)
    assert [e[1] for e in router._journal.events_of(did)] == ["decision"]
    router.close()
