"""The journal's tail: the events committed at ``journal_sync = "normal"`` that are not yet in
the SQLite file, appended to a side file ``<journal>-tail``.

At ``"normal"`` an event is acknowledged once it is in the operating system's cache: it
survives the process (a crash, SIGKILL) but not a power loss, which is what SQLite's
``synchronous = NORMAL`` promises too. One ``write`` to an append-only file gives that promise
for a fraction of a SQLite transaction's cost (docs/benchmarks.md, "Against the peers"), so at
``"normal"`` a transaction of events is one frame appended here; ``msroute.router.journal``
folds the tail into SQLite in batches, and whenever a transaction writes anything else
(a snapshot, a meta entry), in one SQLite transaction committed at ``synchronous = FULL``
before the tail is emptied (so a power loss cannot keep the tail's emptying and lose the fold).

File layout: a header, ``MAGIC`` and the journal's run id (``<u16 length>`` and its UTF-8
bytes: a tail names the journal it belongs to, so another journal's is refused), then frames.
A frame is one committed transaction:
``<u32 body length><u32 crc32 of the body>`` and the body, its events one after the other,
each ``_ROW`` (seq, time, probs_seq or -1, the byte lengths of kind, ref, payload and probs,
-1 for a NULL) followed by those bytes (UTF-8 text, the distribution's raw float64 bytes).
A last frame that is cut short or fails its checksum ends the tail: it was being written when
the process died, so its transaction was never acknowledged. A frame that fails its checksum
with bytes after it is damage, not an unfinished write: the tail is refused.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import sqlite3
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

from msroute.errors import JournalError

__all__ = [
    "INSERT_EVENT",
    "MAGIC",
    "Row",
    "Tail",
    "fold_leftover",
    "header",
    "read_tail",
    "tail_path",
]

#: The first bytes of a tail file (its format's version is the last byte).
MAGIC = b"msroute-tail\x00\x02"

#: One ``events`` row, in the column order of the journal's INSERT: seq, kind, ref, time,
#: payload (JSON text), probs (raw bytes or None), probs_seq (or None).
Row = tuple[int, str, str | None, float, str, bytes | None, int | None]

#: The statement that stores a ``Row`` in the journal's ``events``.
INSERT_EVENT = (
    "INSERT INTO events(seq, kind, ref, time, payload, probs, probs_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)

_log = logging.getLogger("msroute.router")

_ID = struct.Struct("<H")
_FRAME = struct.Struct("<II")
_ROW = struct.Struct("<qdqiiii")


def tail_path(journal: Path) -> Path:
    """The tail file of the journal at ``journal``."""
    return journal.with_name(journal.name + "-tail")


def header(run_id: str) -> bytes:
    """The first bytes of the tail of the journal whose run id is ``run_id``."""
    ident = run_id.encode()
    return b"".join((MAGIC, _ID.pack(len(ident)), ident))


def _frame(rows: Sequence[Row]) -> bytes:
    """One frame holding ``rows`` (written out field by field: a frame is built for every
    acknowledged call at ``"normal"``)."""
    parts: list[bytes] = []
    for seq, kind, ref, time, payload, probs, probs_seq in rows:
        k = kind.encode()
        r = b"" if ref is None else ref.encode()
        p = payload.encode()
        parts.append(
            _ROW.pack(
                seq,
                time,
                -1 if probs_seq is None else probs_seq,
                len(k),
                -1 if ref is None else len(r),
                len(p),
                -1 if probs is None else len(probs),
            )
        )
        parts += (k, r, p) if probs is None else (k, r, p, probs)
    body = b"".join(parts)
    return b"".join((_FRAME.pack(len(body), zlib.crc32(body)), body))


def _rows(body: bytes, where: str) -> list[Row]:
    """The rows of one frame's body (JournalError if its checksum held but it is malformed)."""
    rows: list[Row] = []
    pos = 0
    bad = "a malformed frame in the journal's tail:"
    try:
        while pos < len(body):
            seq, time, probs_seq, *lengths = _ROW.unpack_from(body, pos)
            pos += _ROW.size
            fields: list[bytes | None] = []
            for n in lengths:
                if n < -1 or pos + max(n, 0) > len(body):
                    raise JournalError(f"{where}: {bad} a field of {n} bytes at offset {pos}")
                fields.append(None if n == -1 else body[pos : pos + n])
                pos += max(n, 0)
            kind, ref, payload, probs = fields
            if kind is None or payload is None:
                raise JournalError(f"{where}: {bad} event {seq} has no kind or no payload")
            rows.append(
                (
                    int(seq),
                    kind.decode(),
                    None if ref is None else ref.decode(),
                    float(time),
                    payload.decode(),
                    probs,
                    None if probs_seq == -1 else int(probs_seq),
                )
            )
    except (struct.error, UnicodeDecodeError) as exc:
        raise JournalError(f"{where}: {bad} {exc}") from exc
    return rows


def read_tail(path: Path) -> tuple[str | None, list[Row], int]:
    """The run id a tail file names (None if the process died while creating it), its rows,
    and how many bytes at its end were cut short (an unfinished write: ignored). JournalError
    when it is not a tail, is damaged before its end, or its events are out of order."""
    data = path.read_bytes()
    not_a_tail = f"{path}: not a journal tail (remove it if it is not one)"
    fixed = len(MAGIC) + _ID.size
    if not data.startswith(MAGIC):
        if len(data) < len(MAGIC) and MAGIC.startswith(data):  # died while creating it
            return None, [], len(data)
        raise JournalError(not_a_tail)
    pos = fixed + (_ID.unpack_from(data, len(MAGIC))[0] if len(data) >= fixed else 0)
    if len(data) < max(pos, fixed):
        return None, [], len(data)  # died while writing its header
    try:
        run_id = data[fixed:pos].decode()
    except UnicodeDecodeError:
        raise JournalError(not_a_tail) from None
    rows: list[Row] = []
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        body = data[pos + _FRAME.size : end]
        if len(body) < length:
            break
        if zlib.crc32(body) != crc:
            if end < len(data):
                raise JournalError(
                    f"{path}: the frame at byte {pos} of the journal's tail fails its checksum "
                    f"and {len(data) - end} bytes follow it: the tail is damaged (move it away "
                    "to open the journal without it)"
                )
            break
        rows.extend(_rows(body, str(path)))
        pos = end
    for before, after in itertools.pairwise(rows):
        if after[0] != before[0] + 1:
            raise JournalError(
                f"{path}: the journal's tail holds event {after[0]} after event {before[0]}"
            )
    return run_id, rows, len(data) - pos


def fold_leftover(db: sqlite3.Connection, path: Path, last: int, run_id: str, create: bool) -> int:
    """Fold the tail at ``path`` that a router left (it stopped without closing) into the
    journal open on ``db``, whose last event is ``last`` and whose run id is ``run_id``: the
    tail's events after it, in one transaction committed at ``synchronous = FULL``; then remove
    the tail. Returns the last event now. The tail must name this journal, its events must
    continue the journal's, and those the journal already holds (folded just before the router
    stopped) must be the same, else JournalError (and both files are left as they are); so
    must a tail in the way of a new journal (``create``)."""
    if not path.exists():
        return last
    if create:
        raise JournalError(
            f"{path}: the tail of an earlier journal is in the way; remove it or choose a new file"
        )
    owner, rows, torn = read_tail(path)
    if owner is not None and owner != run_id:
        raise JournalError(
            f"{path}: the tail of another journal (run {owner}; this journal's run is "
            f"{run_id}): move it away to open the journal without it"
        )
    new = [r for r in rows if r[0] > last]
    if new and new[0][0] != last + 1:
        raise JournalError(
            f"{path}: the journal's tail starts at event {new[0][0]} but the journal ends at "
            f"event {last}: it does not continue this journal (move it away to open the journal "
            "without it)"
        )
    old = [(r[0], r[1], r[2]) for r in rows if r[0] <= last]
    if old:
        held = db.execute(
            "SELECT seq, kind, ref FROM events WHERE seq BETWEEN ? AND ? ORDER BY seq",
            (old[0][0], old[-1][0]),
        ).fetchall()
        if [tuple(h) for h in held] != old:
            raise JournalError(
                f"{path}: the journal's tail does not match the journal's events "
                f"{old[0][0]}-{old[-1][0]} (move it away to open the journal without it)"
            )
    if torn:
        _log.warning(
            "%s: %d bytes of an unfinished write at the end of the tail were dropped "
            "(a transaction that was never acknowledged)",
            path,
            torn,
        )
    if new:
        db.execute("PRAGMA synchronous = FULL")
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(INSERT_EVENT, new)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        _log.info("%s: folded %d events into the journal", path, len(new))
    path.unlink()
    return new[-1][0] if new else last


class Tail:
    """The tail file of one open journal (``run_id``: its run id, named in the header),
    appended to by its owner only (the SQLite file's exclusive lock is held first). Created at
    its first frame."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self._header = header(run_id)
        self._fd: int | None = None
        self._size = 0
        self._torn = False  # a failed write could not be cut back: refuse to append after it

    @property
    def holds_rows(self) -> bool:
        """Whether frames were appended since the file was created or last emptied."""
        return self._size > len(self._header)

    def append(self, rows: Sequence[Row]) -> None:
        """Append one frame: once this returns, the rows survive the process. On failure
        (OSError: a full disk, a short write) the file is cut back to its previous end, so
        a later frame never follows a broken one."""
        if self._fd is None:
            self._create()
        assert self._fd is not None
        if self._torn and not self._cut():
            raise OSError(errno.EIO, f"{self.path}: cannot cut off an unfinished write")
        frame = _frame(rows)
        try:
            written = os.write(self._fd, frame)
        except OSError:
            self._cut()
            raise
        if written != len(frame):
            self._cut()
            raise OSError(errno.ENOSPC, f"{self.path}: short write ({written} of {len(frame)})")
        self._size += written

    def empty(self) -> None:
        """Drop every frame (their rows are in SQLite now); errors are left for later: the
        journal skips rows it already holds when it reads a tail."""
        if self._fd is not None and self.holds_rows:
            try:
                os.ftruncate(self._fd, len(self._header))
            except OSError:
                return
            self._size = len(self._header)

    def close(self, *, remove: bool) -> None:
        """Close the file; with ``remove``, delete it too (its rows are in SQLite)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove:
            self.path.unlink(missing_ok=True)

    def _create(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            if os.write(fd, self._header) != len(self._header):
                raise OSError(errno.ENOSPC, f"{self.path}: short write")
        except OSError:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        self._fd, self._size = fd, len(self._header)

    def _cut(self) -> bool:
        """Cut the file back to its last whole frame; whether that worked (if not, nothing is
        appended until it does)."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            self._torn = True
            return False
        self._torn = False
        return True
