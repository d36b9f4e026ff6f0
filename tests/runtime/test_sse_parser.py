"""The model stream's SSE parser (``models/_sse.py``): the same events however the bytes
are split into network blocks, every line ending SSE allows, and bounded memory."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynagent.exceptions import ModelError
from dynagent.models._sse import MAX_EVENT, SSEParser

STREAM = (
    b": a comment the server sends to keep the connection open\n\n"
    b'data: {"choices": [{"delta": {"content": "Hello"}}]}\n\n'
    b"event: error\n"
    b'data: {"error": {"message": "x"}}\n\n'
    b"data: first line\n"
    b"data: second line\n"
    b"id: 7\n\n"
    b"data:no space\n\n"
    b"data: \xc3\xa9\xe2\x82\xac\n\n"
    b"data: [DONE]\n\n"
)
EVENTS = [
    (b"", b'{"choices": [{"delta": {"content": "Hello"}}]}'),
    (b"error", b'{"error": {"message": "x"}}'),
    (b"", b"first line\nsecond line"),
    (b"", b"no space"),
    (b"", "é€".encode()),
    (b"", b"[DONE]"),
]


def parsed(blocks: list[bytes]) -> list[tuple[bytes, bytes]]:
    """(event name, data) of every event the blocks complete, in order."""
    parser = SSEParser()
    found: list[tuple[bytes, bytes]] = []
    for block in blocks:
        events = parser.feed_data(block)
        found += zip(events.names or [b""] * len(events.data), events.data, strict=True)
    return found


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(points)]


def test_a_stream_in_one_block() -> None:
    assert parsed([STREAM]) == EVENTS


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"])
def test_every_line_ending_gives_the_same_events(ending: bytes) -> None:
    assert parsed([STREAM.replace(b"\n", ending)]) == EVENTS


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=40), st.booleans())
def test_the_events_do_not_depend_on_where_blocks_split(cuts: list[int], crlf: bool) -> None:
    stream = STREAM.replace(b"\n", b"\r\n") if crlf else STREAM
    assert parsed(split(stream, cuts)) == EVENTS


def test_one_byte_at_a_time() -> None:
    assert parsed([STREAM[i : i + 1] for i in range(len(STREAM))]) == EVENTS


def test_an_event_that_never_ends_is_refused_not_buffered_forever() -> None:
    parser = SSEParser()
    block = b"data: " + b"a" * (1 << 20)
    with pytest.raises(ModelError, match="longer than"):
        for _ in range(MAX_EVENT // len(block) + 2):
            parser.feed_data(block)


def test_an_unfinished_event_is_not_handed_out() -> None:
    assert parsed([b'data: {"a": 1}\n', b"data: more"]) == []
