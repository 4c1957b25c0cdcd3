"""A journal is one file whatever name it is opened by (issue 44).

- After a SIGKILL at ``journal_sync = "normal"`` the journal's events are partly in its tail;
  opened through a symbolic link (to the file, or to its directory) the journal finds the tail
  of the file, not of the link's name: every acknowledged call is there, and no generated
  decision id is handed out twice. Opened by its real name afterwards, it holds the same.
- A journal file with a second name (a hard link) is refused: its tail and SQLite's WAL are
  found by name, so opened by the other name it would miss them.
- A journal path that is not a path (a number, bytes, a NUL inside) is refused naming it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from msroute.errors import InvalidTypeError, InvalidValueError, JournalError
from msroute.router import Router
from msroute.router.tail import tail_path
from test_journal_tail import CALLS, CONFIG, comparable, copy, killed, twin


@pytest.fixture(scope="module")
def dead(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """One killed router's files (at "normal": its events in the tail), copied by each test."""
    return killed(tmp_path_factory.mktemp("dead"))


@pytest.mark.parametrize("link", ["file", "directory"])
def test_a_journal_opened_through_a_symlink_reads_its_tail(
    dead: tuple[Path, list[str]], tmp_path: Path, link: str
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    path = copy(dead, real)
    assert tail_path(path).exists()
    if link == "file":
        linked = tmp_path / "link.db"
        linked.symlink_to(path)
    else:
        (tmp_path / "linked").symlink_to(real, target_is_directory=True)
        linked = tmp_path / "linked" / path.name
    expected = comparable(twin().state())
    router = Router.open(linked)
    assert comparable(router.state()) == expected
    assert not tail_path(path).exists() and not tail_path(tmp_path / "link.db").exists()
    run = router._journal.run_id
    assert router.route(context="x").decision_id == f"{run}-{CALLS}"  # not one already handed out
    router.close()
    again = Router.open(path)  # by its real name: the same journal
    assert again.state()["decisions"] == CALLS + 1
    ids = [e["ref"] for e in again.decisions_since(0, 10**6) if e["kind"] == "decision"]
    assert len(ids) == len(set(ids)) == CALLS + 1
    again.close()


def test_a_journal_with_a_second_name_is_refused(
    dead: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path = copy(dead, tmp_path)
    other = tmp_path / "other.db"
    os.link(path, other)
    for name in (path, other):
        with pytest.raises(JournalError, match="2 names \\(hard links\\)"):
            Router.open(name)
    assert tail_path(path).exists() and not tail_path(other).exists()  # nothing touched
    other.unlink()
    router = Router.open(path)
    assert router.state()["decisions"] == CALLS
    router.close()
    shutil.copy(path, other)  # a copy is another journal, and may be opened
    Router.open(other).close()


@pytest.mark.parametrize("path", [123, None, b"j.db", "", "j\x00.db"])
def test_a_journal_path_that_is_not_one_is_refused(tmp_path: Path, path: object) -> None:
    """Not a path, or one with a NUL: refused naming ``journal`` (raw TypeError and ValueError
    before), by ``Router.open`` and by a new router alike."""
    with pytest.raises((InvalidTypeError, InvalidValueError), match=r"^journal: "):
        Router.open(path)  # type: ignore[arg-type]
    if path is not None:  # a router without a journal
        with pytest.raises((InvalidTypeError, InvalidValueError), match=r"^journal: "):
            Router(CONFIG, journal=path)  # type: ignore[arg-type]
