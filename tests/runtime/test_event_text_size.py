"""How much text an event carries (what decides whether it is masked inline or on a
worker thread, and what a trace is counted as): every string in its text fields, however
deeply nested in lists, tuples and dicts, str subclasses included; numbers, None and
other values count nothing; counting stops a little past the limit."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from dynagent.events import ModelResponseEvent, RunStarted, Usage, text_size
from dynagent.runtime._redaction import INLINE_CHARS, event_text_size


class Word(enum.StrEnum):
    HELLO = "hello"


def reference(value: Any) -> int:
    """Every character of every string, counted without a limit."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(reference(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(reference(item) for item in value)
    return 0


VALUES: list[Any] = [
    "",
    "hi",
    Word.HELLO,
    [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": None}],
    {"a": [1, 2.5, None, True, ["deep", ("er", {"x": "est"})]], "b": Word.HELLO},
    ("x" * 10, ["y" * 20]),
    {"keys": "are not counted", 5: "values are"},
    [[[[["nested"]]]]],
    12345,
    None,
]


@pytest.mark.parametrize("value", VALUES)
def test_every_string_in_a_json_value_is_counted(value: Any) -> None:
    assert text_size(value) == reference(value)


def test_counting_stops_a_little_past_the_limit() -> None:
    many = ["x" * 100] * 10_000
    assert INLINE_CHARS < text_size(many, INLINE_CHARS) <= INLINE_CHARS + 100
    assert text_size(many) == 1_000_000


def test_an_events_text_is_its_text_fields() -> None:
    messages = [{"role": "user", "content": "Hello"}]
    started = RunStarted(
        trace_id="t",
        step=0,
        agent="a",
        revision="r",
        variant="stable",
        session_id=None,
        input=messages,
    )
    assert event_text_size(started) == len("user") + len("Hello")
    answer = ModelResponseEvent(
        trace_id="t", step=1, model="m", usage=Usage(), duration_ms=1, content="four", tool_calls=[]
    )
    assert event_text_size(answer) == 4
