"""A real MCP server built with the official SDK, run as its own process by the tests.

    python -m tests.mcp.server --transport streamable_http --port 8123
    python -m tests.mcp.server --transport stdio

Tools: ``echo`` (text), ``add`` (structured), ``fail`` (an ``isError`` answer), ``slow``
(waits, for timeouts and cancellation), ``picture`` (an image), ``resources`` (embedded and
linked resources), ``grow`` (adds the tool ``late`` and sends
``notifications/tools/list_changed``), ``cancelled`` (how many calls of ``slow`` the server
saw cancelled), ``wait_running`` and ``wait_cancelled`` (answer once a call of ``slow`` runs /
was cancelled: tests wait on them instead of sleeping), ``trace_context`` (the W3C
``traceparent`` the call arrived with: its HTTP request header and ``params._meta``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Any

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _resources() -> list[types.ContentBlock]:
    blob = base64.b64encode(PNG).decode()
    return [
        types.EmbeddedResource(
            type="resource",
            resource=types.TextResourceContents(uri="file:///notes.txt", text="a note"),
        ),
        types.EmbeddedResource(
            type="resource",
            resource=types.BlobResourceContents(
                uri="file:///logo.png", mime_type="image/png", blob=blob
            ),
        ),
        types.ResourceLink(type="resource_link", uri="file:///big.csv", name="big.csv"),
    ]


async def _trace_context(ctx: Context) -> dict[str, Any]:
    headers = ctx.headers or {}
    meta = ctx.request_context.meta or {}
    return {"header": headers.get("traceparent"), "meta": meta.get("traceparent")}


def build(name: str = "test-mcp") -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(name)
    seen = {"cancelled": 0}
    running = asyncio.Event()
    cancelled = asyncio.Event()

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @server.tool(description="Always fails with the reason given.")
    def fail(reason: str) -> str:
        raise ValueError(reason)

    @server.tool(description="Wait some seconds, then answer.")
    async def slow(seconds: float) -> str:
        running.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            seen["cancelled"] += 1
            cancelled.set()
            raise
        return f"slept {seconds}"

    @server.tool(name="cancelled", description="How many calls of slow were cancelled.")
    def count_cancelled() -> str:
        return str(seen["cancelled"])

    @server.tool(description="Answers once a call of slow is running.")
    async def wait_running() -> str:
        await running.wait()
        return "running"

    @server.tool(description="Answers once a call of slow has been cancelled.")
    async def wait_cancelled() -> str:
        await cancelled.wait()
        return str(seen["cancelled"])

    @server.tool(description="A one-pixel image.")
    def picture() -> Image:
        return Image(data=PNG, format="png")

    server.add_tool(_resources, name="resources", description="Two resources and a link.")
    server.add_tool(
        _trace_context,
        name="trace_context",
        description="The traceparent of this call: HTTP header and params._meta.",
    )

    @server.tool(description="Add the tool 'late' and tell the client.")
    async def grow(ctx: Context) -> str:
        def late(x: int) -> str:
            """Arrived later."""
            return f"late {x}"

        server.add_tool(late, name="late", description="Arrived later.")
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["streamable_http", "sse", "stdio"], required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="test-mcp")
    args = parser.parse_args()
    server = build(args.name)
    if args.transport == "stdio":
        asyncio.run(server.run_stdio_async())
    elif args.transport == "sse":
        asyncio.run(server.run_sse_async(host="127.0.0.1", port=args.port))
    else:
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=args.port))


if __name__ == "__main__":
    main()
