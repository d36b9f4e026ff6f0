"""What an MCP tool result costs is bounded by what the model reads, not by what the
server sends: past ``MAX_MESSAGE_BYTES`` reading stops, the call is a tool error naming
the bound, and the session goes on serving. Real servers (the official SDK) answer over
streamable HTTP as SSE streams and as plain JSON, and over stdio."""

from __future__ import annotations

import contextlib
import sys
import tracemalloc
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import ByteReceiveStream

from dynagent.mcp._connection import McpToolError
from dynagent.mcp._stdio import BoundedLines
from dynagent.mcp._transport import MAX_MESSAGE_BYTES, McpTarget
from dynagent.mcp.tools import MAX_RESULT_CHARS, McpServers
from dynagent.runtime.outbound import OutboundPolicy
from tests.mcp.conftest import ROOT, mcp_process


@pytest.fixture(params=["streamable_http", "streamable_http_json", "stdio"])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[McpTarget]:
    if request.param == "stdio":
        args = ("-m", "tests.mcp.server", "--transport", "stdio")
        yield McpTarget("stdio", "stdio:local", command=sys.executable, args=args, cwd=str(ROOT))
        return
    async with mcp_process(request.param) as server:
        loopback = OutboundPolicy(allow_private=True)  # the test server listens on loopback
        yield McpTarget("streamable_http", server.url, url=server.url, policy=loopback)


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


class _Chunks(ByteReceiveStream):
    """Bytes as a pipe delivers them: in the chunks given, then the end."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            raise anyio.EndOfStream
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        self._chunks = []


async def _read(chunks: list[bytes], limit: int) -> list[bytes]:
    stream, out = BoundedLines(_Chunks(chunks), limit), []
    with contextlib.suppress(anyio.EndOfStream):
        while True:
            out.append(await stream.receive())
    return b"".join(out).splitlines(keepends=True)


LINES = {
    "lines split across chunks": (
        [b'{"id": 1}\n{"i', b'd": 2}\n'],
        [b'{"id": 1}\n', b'{"id": 2}\n'],
    ),
    "a line at the bound": ([b"x" * 16 + b"\n"], [b"x" * 16 + b"\n"]),
    "a line past the bound, in pieces": (
        [b'{"jsonrpc": "2.0", "id": 7, "result": "', b"y" * 40, b'"}\n{"id": 8}\n'],
        [
            b'{"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": "the MCP '
            b"server's answer exceeded the 16 byte limit\"}}\n",
            b'{"id": 8}\n',
        ],
    ),
    "a string id": (
        [b'{"id": "a\\"b", "result": "' + b"z" * 40 + b'"}\n'],
        [
            b'{"jsonrpc": "2.0", "id": "a\\"b", "error": {"code": -32000, "message": "the MCP '
            b"server's answer exceeded the 16 byte limit\"}}\n"
        ],
    ),
    "a long notification, no id": ([b'{"method": "' + b"n" * 40 + b'"}\n'], []),
    "a last line without its newline": ([b'{"id": 3}'], [b'{"id": 3}']),
}


@pytest.mark.parametrize("case", LINES)
async def test_stdio_lines_pass_whole_up_to_the_bound_and_answer_an_error_past_it(
    case: str,
) -> None:
    chunks, expected = LINES[case]
    assert await _read(list(chunks), 16) == expected
