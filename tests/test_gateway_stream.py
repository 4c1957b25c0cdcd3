"""An upstream's server-sent events as the gateway reads them (``msroute.gateway.upstream.Stream``):
each event is a chat completion chunk, or the call failed (502), as a whole answer that is not a
chat completion is; nothing an upstream sends reaches the merging of a team's streams unchecked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from msroute.gateway.http1 import Response
from msroute.gateway.upstream import Stream, UpstreamFailure


class _Body:
    """What ``Stream`` reads of an upstream's answer: its body in chunks."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self.body

    def release(self) -> None:
        pass


def events(body: bytes) -> list[dict[str, Any] | None]:
    stream = Stream("x", cast(Response, _Body(body)), timeout_s=5.0)

    async def read() -> list[dict[str, Any] | None]:
        return [event async for event in stream.events()]

    return asyncio.run(read())


def test_chunks_and_the_usage_chunk_are_read() -> None:
    body = (
        b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\n'
        b"data: [DONE]\n\n"
    )
    got = events(body)
    assert got[0] == {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    assert got[-1] is None and len(got) == 3


@pytest.mark.parametrize(
    "event",
    [
        b'{"choices": [], "x": NaN}',  # not JSON (RFC 8259 has no NaN), as in a whole answer
        b'{"choices": [{"index": 0, "delta": {"content": Infinity}}]}',
        b'{"choices": 5}',  # a team's merge iterated it: TypeError mid-stream
        b'{"choices": [{"index": "abc", "delta": {}}]}',  # int("abc"): ValueError mid-stream
        b'{"choices": [{"index": 1.5, "delta": {}}]}',  # read as choice 1, silently
        b'{"choices": [{"index": true, "delta": {}}]}',
        b'{"choices": [{"index": -1, "delta": {}}]}',
        b'{"choices": ["x"]}',
    ],
)
def test_an_event_that_is_not_a_chunk_fails_the_call(event: bytes) -> None:
    body = b"data: " + event + b"\n\ndata: [DONE]\n\n"
    with pytest.raises(UpstreamFailure, match="upstream x: an event is not") as failure:
        events(body)
    assert failure.value.status == 502
