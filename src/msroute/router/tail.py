"""The journal's tail: the events committed at ``journal_sync = "normal"`` that are not yet in
the SQLite file, appended to a side file ``<journal>-tail``.

At ``"normal"`` an event is acknowledged once it is in the operating system's cache: it
survives the process (a crash, SIGKILL) but not a power loss, which is what SQLite's
``synchronous = NORMAL`` promises too. One ``write`` to an append-only file gives that promise
for a fraction of a SQLite transaction's cost (docs/benchmarks.md, "Against the peers"), so at
``"normal"`` a transaction of events is one frame appended here; ``msroute.router.journal``
folds the tail into SQLite in batches, and whenever a transaction writes anything else
(a snapshot, a meta entry), in one SQLite transaction; the tail is emptied only after a
transaction committed at ``synchronous = FULL`` (so a power loss cannot keep the tail's emptying
and lose a fold: the fsync of SQLite's WAL covers the earlier commits at NORMAL too), and
until then keeps frames whose events SQLite holds, which opening skips.

File layout (format 3): a header, ``MAGIC``, the journal's run id (``<u16 length>`` and its
UTF-8 bytes: a tail names the journal it belongs to, so another journal's is refused) and a
``<u32 crc32>`` of the header's bytes before it; then frames. A frame is one committed
transaction: ``<u32 body length><u32 crc32 of the body><u32 crc32 of those 8 bytes>`` and the
body, its events one after the other, each ``_ROW`` (seq, time, probs_seq or -1, the byte
lengths of kind, ref, payload and probs, -1 for a NULL) followed by those bytes (UTF-8 text, the
distribution's raw float64 bytes).

Every byte is checked, lengths included, so damage is never taken for an unfinished write. The
process that died while appending leaves a prefix of its last frame: fewer bytes than a frame
header, or a frame header that checks whose body the file ends inside. That frame was never
acknowledged and is dropped; so are zero bytes after the last whole frame (a file whose size
reached the disk before its data, what a power loss can leave), and a header the process died
writing (a prefix of this journal's header: no frame yet). Anything else that does not check
(a damaged header, a frame header, a whole frame whose body fails its checksum, the last one
included) is damage and the tail is refused: its frames were acknowledged.

Format 2 (``MAGIC_2``: no header checksum, frames of ``<u32 body length><u32 crc32 of the body>``)
is still read, as it was: a router of an earlier msroute may have left one. Its lengths are not
checked, so a frame cut short or failing its checksum at its end is dropped. The two magics
differ in more than one bit: no flipped bit makes one format read as the other.

The rows themselves are shared with SQLite's ``events``: ``Row`` (its payload as ``encode_json``
writes it), ``insert_rows``, and ``transaction`` for the folds.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, NoReturn

from msroute.errors import InvalidTypeError, JournalError

__all__ = [
    "INSERT_EVENT",
    "MAGIC",
    "MAGIC_2",
    "Row",
    "Tail",
    "encode_json",
    "fold_leftover",
    "header",
    "insert_refs",
    "insert_rows",
    "read_tail",
    "tail_path",
    "transaction",
]

#: The first bytes of a tail file of format 3, the one written.
MAGIC = b"msroute-tail-v3\n"

#: The first bytes of a tail file of format 2 (read only).
MAGIC_2 = b"msroute-tail\x00\x02"

#: One ``events`` row, in the column order of the journal's INSERT: seq, kind, ref, time,
#: payload (JSON text), probs (raw bytes or None), probs_seq (or None).
Row = tuple[int, str, str | None, float, str, bytes | None, int | None]

#: The statement that stores a ``Row`` in the journal's ``events``.
INSERT_EVENT = (
    "INSERT INTO events(seq, kind, ref, time, payload, probs, probs_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)

#: How many rows one INSERT statement of ``insert_rows`` and ``insert_refs`` carries (7 values
#: a row, well under SQLite's 32,766 variables): a fold of 1,024 events is 8 statements, which
#: costs less than one statement executed per row.
_ROWS_PER_INSERT = 128

_log = logging.getLogger("msroute.router")

_ID = struct.Struct("<H")
_CRC = struct.Struct("<I")
_FRAME_2 = struct.Struct("<II")  # body length, crc32 of the body
_FRAME = struct.Struct("<III")  # and the crc32 of those 8 bytes
_ROW = struct.Struct("<qdqiiii")

#: How to move a refused tail out of the way (every refusal says it).
_MOVE = "move it away to open the journal without it"


def _unencodable(value: object) -> NoReturn:
    raise InvalidTypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _payload_encoder() -> Callable[[Any], str]:
    """The encoder of payloads: ``json.dumps(value, separators=(",", ":"))``, with CPython's C
    encoder built once, not for every value as ``JSONEncoder.encode`` does (a third of a
    decision's cost; no circular check: payloads are plain values). Else the stdlib's."""
    if c_make_encoder is None:
        return json.JSONEncoder(separators=(",", ":")).encode
    chunks = c_make_encoder(
        None, _unencodable, encode_basestring_ascii, None, ":", ",", False, False, True
    )
    return lambda value: "".join(chunks(value, 0))


#: A ``Row``'s payload as JSON text, and a snapshot's router state: ``json.dumps(value,
#: separators=(",", ":"))`` (``_payload_encoder``); a value JSON cannot hold is an
#: InvalidTypeError.
encode_json = _payload_encoder()


def tail_path(journal: Path) -> Path:
    """The tail file of the journal at ``journal``."""
    return journal.with_name(journal.name + "-tail")


def _insert_many(
    db: sqlite3.Connection, head: str, width: int, rows: Sequence[tuple[Any, ...]]
) -> None:
    """INSERT ``rows`` (each ``width`` values) with the statement that starts ``head``, in
    statements of ``_ROWS_PER_INSERT`` rows (inside the caller's transaction)."""
    one = "(" + ", ".join("?" * width) + ")"
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        part = rows[start : start + _ROWS_PER_INSERT]
        values = list(itertools.chain.from_iterable(part))
        db.execute(head + ", ".join(itertools.repeat(one, len(part))), values)


def insert_rows(db: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """Store ``rows`` in ``events`` (inside the caller's transaction)."""
    _insert_many(db, INSERT_EVENT.split("VALUES")[0] + "VALUES ", 7, rows)


def insert_refs(db: sqlite3.Connection, refs: Sequence[tuple[str, int]]) -> None:
    """Store ``(ref, seq)`` pairs in ``refs`` (inside the caller's transaction)."""
    _insert_many(db, "INSERT INTO refs(ref, seq) VALUES ", 2, refs)


def header(run_id: str) -> bytes:
    """The first bytes of the tail of the journal whose run id is ``run_id``."""
    ident = run_id.encode()
    head = b"".join((MAGIC, _ID.pack(len(ident)), ident))
    return head + _CRC.pack(zlib.crc32(head))


def _header_2(run_id: str) -> bytes:
    """The header of a format 2 tail of the journal whose run id is ``run_id``."""
    ident = run_id.encode()
    return b"".join((MAGIC_2, _ID.pack(len(ident)), ident))


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
    lengths = _FRAME_2.pack(len(body), zlib.crc32(body))
    return b"".join((lengths, _CRC.pack(zlib.crc32(lengths)), body))


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


def _damaged(path: Path, what: str) -> JournalError:
    return JournalError(
        f"{path}: {what}: the tail is damaged, not cut short by an unfinished write, and its "
        f"frames were acknowledged ({_MOVE})"
    )


def _frames(data: bytes, pos: int, path: Path) -> tuple[list[Row], int]:
    """The rows of the format 3 frames from byte ``pos`` on, and where the last whole one
    ends (module docstring: what is dropped, what is refused)."""
    rows: list[Row] = []
    size = len(data)
    while size - pos >= _FRAME.size:
        length, crc, check = _FRAME.unpack_from(data, pos)
        if zlib.crc32(data[pos : pos + _FRAME_2.size]) != check:
            if not data[pos:].strip(b"\0"):
                break  # a size that reached the disk before its data
            raise _damaged(path, f"the header of the frame at byte {pos} fails its checksum")
        end = pos + _FRAME.size + length
        if end > size:
            break  # the process died writing this frame
        body = data[pos + _FRAME.size : end]
        if zlib.crc32(body) != crc:
            raise _damaged(
                path, f"the frame at byte {pos} fails its checksum ({size - end} bytes follow it)"
            )
        rows.extend(_rows(body, str(path)))
        pos = end
    return rows, pos


def _frames_2(data: bytes, pos: int, path: Path) -> tuple[list[Row], int]:
    """The rows of the format 2 frames from byte ``pos`` on, and where the last whole one
    ends: a last frame cut short or failing its checksum is dropped."""
    rows: list[Row] = []
    while pos + _FRAME_2.size <= len(data):
        length, crc = _FRAME_2.unpack_from(data, pos)
        end = pos + _FRAME_2.size + length
        body = data[pos + _FRAME_2.size : end]
        if len(body) < length:
            break
        if zlib.crc32(body) != crc:
            if end < len(data):
                raise _damaged(
                    path,
                    f"the frame at byte {pos} fails its checksum and {len(data) - end} "
                    "bytes follow it",
                )
            break
        rows.extend(_rows(body, str(path)))
        pos = end
    return rows, pos


def _other_header(data: bytes, path: Path, run_id: str) -> JournalError:
    """Why a tail that does not start with the header of the journal whose run id is
    ``run_id`` is refused."""
    for magic, checked in ((MAGIC, True), (MAGIC_2, False)):
        if not data.startswith(magic):
            continue
        fixed = len(magic) + _ID.size
        end = fixed + (_ID.unpack_from(data, len(magic))[0] if len(data) >= fixed else 0)
        if checked:
            whole = len(data) >= end + _CRC.size
            if not whole or _CRC.unpack_from(data, end)[0] != zlib.crc32(data[:end]):
                return _damaged(path, "its header fails its checksum")
        try:
            owner = data[fixed:end].decode()
        except UnicodeDecodeError:
            return _damaged(path, "its header is not a journal's run id")
        return JournalError(
            f"{path}: the tail of another journal (run {owner}; this journal's run is "
            f"{run_id}): {_MOVE}"
        )
    return JournalError(f"{path}: not a journal tail (remove it if it is not one)")


def read_tail(path: Path, run_id: str) -> tuple[list[Row], int]:
    """The rows of the tail file at ``path`` of the journal whose run id is ``run_id``, and
    how many bytes at its end were an unfinished write (ignored; module docstring). JournalError
    when it is not a tail, is another journal's, is damaged, or its events are out of order."""
    data = path.read_bytes()
    head, head_2 = header(run_id), _header_2(run_id)
    if data.startswith(head):
        rows, pos = _frames(data, len(head), path)
    elif data.startswith(head_2):
        rows, pos = _frames_2(data, len(head_2), path)
    elif head.startswith(data) or head_2.startswith(data) or not data.strip(b"\0"):
        return [], len(data)  # the process died while creating it
    else:
        raise _other_header(data, path, run_id)
    for before, after in itertools.pairwise(rows):
        if after[0] != before[0] + 1:
            raise JournalError(
                f"{path}: the journal's tail holds event {after[0]} after event {before[0]}"
            )
    return rows, len(data) - pos


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One SQLite transaction on ``db`` (in autocommit mode) around the block: committed at
    its end, rolled back if it raises. SQLite may have rolled back already (a full disk does):
    then the block's error is raised, not the ROLLBACK's "no transaction is active"."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            if db.in_transaction:
                db.execute("ROLLBACK")
        raise


def fold_leftover(db: sqlite3.Connection, path: Path, last: int, run_id: str, create: bool) -> int:
    """Fold the tail at ``path`` that a router left (it stopped without closing) into the
    journal open on ``db``, whose last event is ``last`` and whose run id is ``run_id``: the
    tail's events after it, in one transaction committed at ``synchronous = FULL``; then remove
    the tail. Returns the last event now. The tail must name this journal, its events must
    continue the journal's, and those the journal already holds (folded just before the router
    stopped) must be the same, else JournalError (and both files are left as they are); so
    must a tail in the way of a new journal (``create``)."""
    old_path = path.with_name(path.name + "-old")  # folder.old_tail_path: moved aside
    paths = [p for p in (old_path, path) if p.exists()]
    if not paths:
        return last
    if create:
        raise JournalError(
            f"{paths[0]}: the tail of an earlier journal is in the way; remove it or choose a "
            "new file"
        )
    rows: list[Row] = []
    torn = 0
    for each in paths:  # the tail moved aside holds the earlier events
        more, cut = read_tail(each, run_id)
        torn += cut
        if rows and more and more[0][0] != rows[-1][0] + 1:
            raise JournalError(
                f"{each}: the journal's tail starts at event {more[0][0]} but the tail moved "
                f"aside ends at event {rows[-1][0]} ({_MOVE})"
            )
        rows += more
    new = [r for r in rows if r[0] > last]
    if new and new[0][0] != last + 1:
        raise JournalError(
            f"{path}: the journal's tail starts at event {new[0][0]} but the journal ends at "
            f"event {last}: it does not continue this journal ({_MOVE})"
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
                f"{old[0][0]}-{old[-1][0]} ({_MOVE})"
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
        with transaction(db):
            insert_rows(db, new)
        _log.info("%s: folded %d events into the journal", path, len(new))
    for each in paths:
        each.unlink()
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

    @property
    def size(self) -> int:
        """The file's size in bytes (0 before its first frame)."""
        return self._size

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

    def move_to(self, other: Path) -> None:
        """Close the file and rename it ``other`` (its rows still to be synced; the caller
        removes it then); the next frame starts a new file at ``path``."""
        if self._fd is not None:
            os.rename(self.path, other)  # raises before anything changed
            os.close(self._fd)
            self._fd = None
        self._size = 0
        self._torn = False

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
