"""The journal's SQLite file: its tables, its version, and opening it (``msroute.router.journal``
describes the layout and why it is so): the path checked first (``file_path``,
``check_one_name``: one name, since the side files are found by it), then ``setup``.

One router owns a journal at a time: the connection runs in ``locking_mode = EXCLUSIVE`` (set
before WAL mode, so the WAL index lives in the process's memory), and another connection waits
at most ``BUSY_TIMEOUT_MS`` for it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
import uuid
from pathlib import Path

from msroute._validation import quoted
from msroute.errors import InvalidTypeError, InvalidValueError, JournalError

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA_VERSION", "check_one_name", "file_path", "setup"]

#: Version of the table layout; a journal of another version is refused (version 1, the same
#: without ``events.probs_seq``, and version 2, with an index on ``events.ref`` instead of
#: ``refs``, are upgraded in place when opened).
SCHEMA_VERSION = 3

#: How long opening a journal waits for another connection's lock, in milliseconds. A live
#: router holds its journal's lock until it closes, so a longer wait would only delay the
#: error; this one covers a router that is just closing.
BUSY_TIMEOUT_MS = 200

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events(
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    ref TEXT,
    time REAL NOT NULL,
    payload TEXT NOT NULL,
    probs BLOB,
    probs_seq INTEGER
);
CREATE TABLE snapshots(seq INTEGER PRIMARY KEY, policy BLOB NOT NULL, router TEXT NOT NULL);
"""

_SCHEMA_REFS = (
    "CREATE TABLE refs(ref TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (ref, seq)) "
    "WITHOUT ROWID"
)


def file_path(path: object) -> Path:
    """A journal's path as given (a str or path-like naming a file), else InvalidTypeError or
    InvalidValueError naming it."""
    try:
        name = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        name = None
    if not isinstance(name, str) or not name:
        raise InvalidTypeError(f"journal: must be a file path, got {path!r:.80}")
    if "\x00" in name:
        raise InvalidValueError(f"journal: {quoted(name)} holds a NUL character: not a file path")
    return Path(name)


def check_one_name(path: Path, label: str) -> None:
    """Refuse a journal file that is missing or has another name (a hard link): its tail and
    SQLite's WAL are found next to the name it is opened by, so opened by the other name it
    would miss the events they hold, and write a WAL of its own beside them."""
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise JournalError(f"{label}: no such journal")
    if st.st_nlink > 1:
        raise JournalError(
            f"{label}: the journal file has {st.st_nlink} names (hard links); its tail and "
            "SQLite's WAL are found by name, so it must have one: remove the other links (a "
            "symbolic link is fine), or copy the journal instead"
        )


def setup(db: sqlite3.Connection, label: str, create: bool) -> None:
    """Lock the file, check (or create) the tables of the journal at ``label`` and switch to
    WAL mode; a journal of version 1 or 2 is upgraded (JournalError for anything else)."""
    db.execute("PRAGMA locking_mode = EXCLUSIVE")  # before the first access (module doc)
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    has_tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
    if create:
        if version != 0 or has_tables:
            raise JournalError(
                f"{label}: already holds a journal or another database; open it with "
                "Router.open() or choose a new file"
            )
    else:
        check = db.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise JournalError(f"{label}: integrity check failed: {check}")
        if version == 1:  # the same tables without events.probs_seq
            version = _upgrade_from_1(db)
        if version == 2:  # an index on events.ref instead of the table refs
            version = _upgrade_from_2(db)
        if version != SCHEMA_VERSION:
            raise JournalError(
                f"{label}: journal schema version {version}, this msroute reads version "
                f"{SCHEMA_VERSION}" + (" (not an msroute journal?)" if version == 0 else "")
            )
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if mode != "wal":
        raise JournalError(f"{label}: cannot switch to WAL mode (got {mode})")
    if create:
        db.execute("BEGIN IMMEDIATE")
        for statement in [*_SCHEMA.split(";"), _SCHEMA_REFS]:
            if statement.strip():
                db.execute(statement)
        db.execute("INSERT INTO meta(key, value) VALUES ('refs_upto', '0')")
        run_id = uuid.uuid4().hex[:12]
        db.execute("INSERT INTO meta(key, value) VALUES ('run_id', ?)", (run_id,))
        key = secrets.token_hex(32)
        db.execute("INSERT INTO meta(key, value) VALUES ('snapshot_key', ?)", (key,))
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")


def _upgrade_from_1(db: sqlite3.Connection) -> int:
    """Add ``events.probs_seq`` to a version 1 journal (every row keeps its own blob):
    version 2."""
    db.execute("BEGIN IMMEDIATE")
    db.execute("ALTER TABLE events ADD COLUMN probs_seq INTEGER")
    db.execute("PRAGMA user_version = 2")
    db.execute("COMMIT")
    return 2


def _upgrade_from_2(db: sqlite3.Connection) -> int:
    """Replace a version 2 journal's index on ``events.ref`` by the table ``refs``, holding
    every event's id: version 3."""
    db.execute("BEGIN IMMEDIATE")
    db.execute(_SCHEMA_REFS)
    db.execute("INSERT INTO refs(ref, seq) SELECT ref, seq FROM events WHERE ref IS NOT NULL")
    db.execute("DROP INDEX IF EXISTS events_ref")
    db.execute(
        "INSERT OR REPLACE INTO meta(key, value) "
        "VALUES ('refs_upto', (SELECT coalesce(max(seq), 0) FROM events))"
    )
    db.execute("PRAGMA user_version = 3")
    db.execute("COMMIT")
    return 3
