"""One ``send`` per response: uvicorn's httptools protocol over a transport that gathers writes.

uvicorn writes a response's status line and headers as soon as the app sends
``http.response.start``, and its body on ``http.response.body``: two ``send`` system calls and two
TCP segments per response, and on loopback two wake-ups of the client. On the service's small
JSON answers those system calls cost more CPU than anything else the event loop does per request.
``CoalescingHttpTools`` is uvicorn's own httptools protocol (same parser, same rules) whose
connections write through ``GatheringTransport``: the bytes written during one turn of the
event loop leave together, in one ``write`` of the real transport, at the start of the next turn.
Bytes and their order are unchanged; closing a connection first writes what is gathered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CoalescingHttpTools", "GatheringTransport"]


class GatheringTransport:
    """A transport whose writes of one event-loop turn reach the real transport as one write.

    Everything but ``write``, ``close`` and ``abort`` is the real transport's (flow control,
    ``is_closing``, ``get_extra_info``).
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        """Queue ``data``; the first write of a turn schedules the flush."""
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        """Hand what is queued to the real transport (nothing if it is closing: the peer left)."""
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        """Write what is queued, then close (the real transport sends its buffer first)."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is queued."""
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a ``GatheringTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        gathering: Any = GatheringTransport(transport, self.loop)
        self.transport = gathering
