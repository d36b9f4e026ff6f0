"""A trace's size (what ``traces.max_bytes`` counts) is its events' text, counted once
per event where the run masks it: short and long texts (masked inline or on a worker
thread), events that masking changes and events it leaves alone."""

from __future__ import annotations

import dataclasses
import sys
from types import FrameType
from typing import Any

import pytest

from dynagent.core.traces import TraceStore
from dynagent.masking import SecretValues
from dynagent.runtime._redaction import INLINE_CHARS, event_text_size
from tests.support import AgentFactory, Reply, ScriptedModelServer

SECRET = "sk-live-0123456789abcdef"

REPLIES = {
    "short": "four",
    "long, masked on a worker thread": "word " * (3 * INLINE_CHARS // 5),
    "a secret, masked": f"the key is {SECRET}",
}


def _counting() -> tuple[list[int], Any]:
    calls = [0]
    code = event_text_size.__code__

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            calls[0] += 1

    return calls, profile


@pytest.mark.parametrize("reply", REPLIES.values(), ids=REPLIES.keys())
async def test_each_event_is_sized_once_and_the_trace_counts_its_masked_text(
    make_agent: AgentFactory, model_server: ScriptedModelServer, reply: str
) -> None:
    model_server.script("gpt-main", [Reply(reply)])
    agent = dataclasses.replace(make_agent(), secrets=SecretValues([SECRET]))
    store = TraceStore()
    calls, profile = _counting()
    sys.setprofile(profile)
    try:
        result = await agent.run("go")
        store.record(agent, "stable", result.trace_id, result.events, owner="key:test")
    finally:
        sys.setprofile(None)

    assert store.bytes == sum(200 + event_text_size(e, limit=1 << 62) for e in result.events)
    assert all(SECRET not in str(event.as_dict()) for event in result.events)
    changed = sum("***" in str(event.as_dict()) for event in result.events)
    # Counted where masked; counted again only when masking made it another event.
    assert calls[0] <= len(result.events) + changed
