"""How a stream's events are encoded: every value an event may carry leaves as valid
compact JSON that reads back as the value, whichever encoder took it."""

from __future__ import annotations

import json

import pytest

from dynagent.events import ModelResponseEvent, RunFinished, Usage
from dynagent.http.sse import encoded, event

VALUES = [
    {"text": "pong", "step": 1, "at": 1733450000.123456, "ok": True, "none": None},
    {"text": 'naïve 日本 \u2028 \x00 "quoted" \\ back'},
    {"tokens": [1, 2.5, 1e-05, 1e16, -0.0]},
    {"nested": {"list": [{"deep": ["x"]}], "tuple": ("a", "b")}},
    {"huge": 12345678901234567890123456789},  # past 64 bits: not orjson's
    {"keys": {1: "an int key", "s": 2}},  # a key that is not a string: not orjson's
    {"deep": json.loads("[" * 300 + "]" * 300)},  # past orjson's depth
]


@pytest.mark.parametrize("value", VALUES)
def test_every_value_reads_back_as_itself(value: object) -> None:
    data = encoded(value)
    assert b"\n" not in data  # one SSE data line
    assert json.loads(data) == json.loads(json.dumps(value))


def test_non_ascii_leaves_as_utf8_not_escaped() -> None:
    assert encoded({"text": "日本"}) == '{"text":"日本"}'.encode()


def test_a_lone_surrogate_leaves_escaped_as_valid_json() -> None:
    data = encoded({"text": "a\ud800b", "more": "日本"})
    data.decode("utf-8")  # valid UTF-8, so the whole stream stays readable
    assert json.loads(data) == {"text": "a\ud800b", "more": "日本"}


def test_a_value_json_cannot_hold_is_its_text() -> None:
    assert json.loads(encoded({"set": {3}})) == {"set": "{3}"}


def test_an_event_is_one_named_sse_event() -> None:
    finished = RunFinished(
        trace_id="t1", step=1, status="ok", usage=Usage(3, 4), duration_ms=1.5, cost_usd=None
    )
    data = event(finished.type, finished.as_dict())
    assert data.startswith(b"event: run_finished\ndata: ") and data.endswith(b"\n\n")
    body = json.loads(data.removeprefix(b"event: run_finished\ndata: "))
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    assert body["trace_id"] == "t1" and body["status"] == "ok"


def test_an_events_dict_holds_every_field_and_its_usage_as_a_dict() -> None:
    response = ModelResponseEvent(
        trace_id="t1",
        step=2,
        model="m",
        content="pong",
        tool_calls=[],
        usage=Usage(1, 2, 1),
        duration_ms=3.0,
    )
    data = response.as_dict()
    assert data == {
        "trace_id": "t1",
        "step": 2,
        "at": response.at,
        "type": "model_response",
        "model": "m",
        "content": "pong",
        "tool_calls": [],
        "usage": {
            "input_tokens": 1,
            "output_tokens": 2,
            "total_tokens": 3,
            "cached_input_tokens": 1,
        },
        "duration_ms": 3.0,
        "cost_usd": None,
    }
