"""The model stream's SSE parser (``models/_sse.py``): the same events however the bytes
are split into network blocks, every line ending SSE allows, and bounded memory; its chunk
decoder gives what orjson gives."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynagent.events import Usage
from dynagent.exceptions import ModelError
from dynagent.models._sse import MAX_EVENT, ChunkDecoder, SSEParser
from dynagent.models.openai import _StreamAccumulator

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


# -- ChunkDecoder: a chunk like the last plain text one is read without JSON -----------------


def _payload(
    text: str, *, created: int, usage: bool, role: bool, ascii: bool, compact: bool
) -> bytes:
    delta: dict[str, Any] = {"content": text}
    if role:
        delta["role"] = "assistant"
    chunk: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": created,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    if usage:
        chunk["usage"] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    separators = (",", ":") if compact else (", ", ": ")
    return json.dumps(chunk, ensure_ascii=ascii, separators=separators).encode()


def _folded(chunks: Iterable[Any]) -> tuple[list[str], int, int, str, Usage]:
    builder = _StreamAccumulator("start")
    for chunk in chunks:
        builder.add(chunk)
    return builder.text, builder.chunks, builder.choices, builder.model, builder.usage


TEXTS = st.one_of(st.text(max_size=12), st.sampled_from(["c1", "m", "chunk", '"', "\\", "\n"]))


@given(
    st.lists(st.tuples(TEXTS, st.sampled_from([1, 2]), st.booleans(), st.booleans()), max_size=30),
    st.booleans(),
    st.booleans(),
)
def test_the_decoder_folds_to_what_orjson_folds_to(
    chunks: list[tuple[str, int, bool, bool]], ascii: bool, compact: bool
) -> None:
    payloads = [
        _payload(text, created=created, usage=usage, role=role, ascii=ascii, compact=compact)
        for text, created, usage, role in chunks
    ]
    decoded = list(ChunkDecoder().decode(payloads))
    assert _folded(decoded) == _folded(map(orjson.loads, payloads))
    for payload, chunk in zip(payloads, decoded, strict=True):
        if type(chunk) is not tuple:
            assert chunk == orjson.loads(payload)


def test_plain_text_chunks_after_the_first_are_not_parsed() -> None:
    payloads = [
        _payload(w, created=1, usage=False, role=False, ascii=False, compact=True) for w in "abcé€"
    ]
    decoded = list(ChunkDecoder().decode(payloads))
    assert isinstance(decoded[0], dict)
    assert decoded[1:] == [("b",), ("c",), ("é",), ("€",)]


def test_bytes_that_would_change_the_chunk_are_parsed() -> None:
    decoder = ChunkDecoder()
    first = _payload("a", created=1, usage=False, role=False, ascii=False, compact=True)
    before, after = first.split(b'"a"')
    smuggled = before + b'"x","role":"tool"' + after  # a quote ends the text early
    [_, parsed] = list(decoder.decode([first, smuggled]))
    assert isinstance(parsed, dict)
    assert parsed["choices"][0]["delta"] == {"content": "x", "role": "tool"}
    with pytest.raises(orjson.JSONDecodeError):  # not UTF-8: orjson says so, as before
        list(decoder.decode([before + b'"\xff"' + after]))
    with pytest.raises(orjson.JSONDecodeError):  # a raw control character
        list(decoder.decode([before + b'"a\x01"' + after]))


def test_a_text_found_elsewhere_in_the_chunk_is_not_taken_for_its_place() -> None:
    # An endpoint that escapes "/" in the text but not in the model's name: the text as
    # orjson writes it ("a/b") is found once, in the model field, not in the text's place.
    first = b'{"model":"a/b","choices":[{"index":0,"delta":{"content":"a\\/b"}}]}'
    other = b'{"model":"x/y","choices":[{"index":0,"delta":{"content":"a\\/b"}}]}'
    decoded = list(ChunkDecoder().decode([first, other]))
    assert decoded == [orjson.loads(first), orjson.loads(other)]
