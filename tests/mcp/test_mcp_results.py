"""What an MCP tool result costs is bounded by what the model reads, not by what the
server sends: past ``MAX_MESSAGE_BYTES`` reading stops, the call is a tool error naming
the bound, and the session goes on serving. Real servers (the official SDK) answer over
streamable HTTP as SSE streams and as plain JSON."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator

import pytest

from dynagent.mcp._connection import McpToolError
from dynagent.mcp._transport import MAX_MESSAGE_BYTES, McpTarget
from dynagent.mcp.tools import MAX_RESULT_CHARS, McpServers
from tests.mcp.conftest import mcp_process


@pytest.fixture(params=["streamable_http", "streamable_http_json"])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[McpTarget]:
    async with mcp_process(request.param) as server:
        yield McpTarget("streamable_http", server.url, url=server.url)


@pytest.fixture
async def servers() -> AsyncIterator[McpServers]:
    found = McpServers()
    yield found
    await found.aclose()


async def test_a_result_past_the_bound_is_a_tool_error_and_costs_at_most_the_bound(
    target: McpTarget, servers: McpServers
) -> None:
    await servers.prepare("bot", [target])
    tracemalloc.start()
    try:
        with pytest.raises(McpToolError) as refused:
            await servers.call(target, "big", {"chars": 8 * MAX_MESSAGE_BYTES}, 60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"larger than {MAX_MESSAGE_BYTES} bytes" in refused.value.message
    assert peak < 4 * MAX_MESSAGE_BYTES, peak  # what was read, not the 8 MB sent
    # The session goes on: a result within the bound is read, then cut for the model.
    # (The server sends a text result twice: as text and as structured content.)
    answer = await servers.call(target, "big", {"chars": MAX_MESSAGE_BYTES // 4}, 60)
    assert (len(answer), await servers.call(target, "echo", {"text": "hi"}, 10)) == (
        MAX_RESULT_CHARS,
        "echo: hi",
    )
