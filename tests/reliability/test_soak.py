"""The soak (``bench.soak``) in short: two minutes of mixed load on a real ``dynagent serve``
(session turns, tool calls, streamed answers, hot reloads, a canary) with no growth of
memory or open descriptors over the second half beyond noise; and the same detector
catching a service whose tool leaks on purpose."""

from __future__ import annotations

from typing import Any

import pytest

from bench import soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def failures_and_leaks(data: dict[str, Any]) -> tuple[int, list[str]]:
    return data["report"]["failures"], data["report"]["leak"]


async def test_two_minutes_of_mixed_load_grow_neither_memory_nor_descriptors() -> None:
    data = await soak.run(2, interval=2)
    print("\n" + soak.table(data))
    kinds = data["report"]["by_kind"]
    assert set(kinds) == {"turn", "stream", "chat-stream", "tool"}, kinds
    assert data["report"]["edits"] >= 10
    assert failures_and_leaks(data) == (0, [])


async def test_the_soak_catches_a_tool_that_leaks_memory_and_descriptors() -> None:
    data = await soak.run(0.5, interval=0.5, serve_module="tests.support.leaky_serve")
    print("\n" + soak.table(data))
    failures, leaks = failures_and_leaks(data)
    assert failures == 0
    assert [leak.split(" grew")[0] for leak in leaks] == ["rss", "open fds"], leaks
