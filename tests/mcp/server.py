"""A real MCP server built with the official SDK, run as its own process by the tests.

    python -m tests.mcp.server --transport streamable_http --port 8123
    python -m tests.mcp.server --transport stdio
    python -m tests.mcp.server --transport streamable_http_json --port 8123  # JSON answers

Tools: ``echo`` (text), ``add`` (structured), ``fail`` (an ``isError`` answer), ``slow``
(waits, for timeouts and cancellation; the only one marked ``readOnlyHint``), ``picture``
(an image), ``resources`` (embedded and linked resources), ``grow`` (adds the tool ``late``
and sends ``notifications/tools/list_changed``), ``flake`` (the same, but from then on every
``tools/list`` fails, until the process gets SIGUSR1: a flaky server), ``cancelled`` (how
many calls of ``slow`` the server saw cancelled), ``wait_running`` and ``wait_cancelled``
(answer once a call of ``slow`` runs / was cancelled: tests wait on them instead of sleeping),
``flood`` (adds tools ``v0`` … one by one, with a ``list_changed`` after each), ``big``
(a text result of the size asked for),
``authorization`` (a SHA-256 of the call's ``Authorization`` header), ``stats`` (how many
MCP sessions have called it, how many ``tools/list`` requests were answered; HTTP transports),
``structured`` (structured content without a text block) and ``trace_context`` (the W3C
``traceparent`` the call arrived with: its HTTP request header and ``params._meta``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import signal
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


class FlakyListing:
    """``tools/list`` of ``server`` that fails while ``broken``."""

    def __init__(self, server: MCPServer[Any]) -> None:
        self.broken = False
        self.count = 0
        """``tools/list`` requests answered."""
        self._list = server.list_tools
        server.list_tools = self.list_tools  # type: ignore[method-assign]

    async def list_tools(self) -> list[types.Tool]:
        self.count += 1
        if self.broken:
            raise RuntimeError("the tool listing is broken for now")
        return await self._list()

    def heal(self) -> None:
        self.broken = False


def _add_late(server: MCPServer[Any]) -> None:
    def late(x: int) -> str:
        """Arrived later."""
        return f"late {x}"

    server.add_tool(late, name="late", description="Arrived later.")


def _add_big(server: MCPServer[Any]) -> None:
    @server.tool(description="A text result of `chars` characters, built in the server.")
    def big(chars: int) -> str:
        return ("0123456789" * (chars // 10 + 1))[:chars]


def _add_flood(server: MCPServer[Any]) -> None:
    @server.tool(description="Add tools v0, v1 … one at a time, telling the client each time.")
    async def flood(times: int, ctx: Context) -> str:
        for index in range(times):
            server.add_tool(_versioned(index), name=f"v{index}", description="A new version.")
            await ctx.session.send_tool_list_changed()
        return f"flooded {times}"


def _versioned(index: int) -> Any:
    def version() -> str:
        return f"v{index}"

    return version


async def _trace_context(ctx: Context) -> dict[str, Any]:
    headers = ctx.headers or {}
    meta = ctx.request_context.meta or {}
    return {"header": headers.get("traceparent"), "meta": meta.get("traceparent")}


def build(name: str = "test-mcp") -> tuple[MCPServer[Any], FlakyListing]:
    server: MCPServer[Any] = MCPServer(name)
    listing = FlakyListing(server)
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

    @server.tool(
        description="Wait some seconds, then answer.",
        annotations=types.ToolAnnotations(
            read_only_hint=True
        ),  # the retry interceptor may repeat it
    )
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
        _add_late(server)
        await ctx.session.send_tool_list_changed()
        return "grown"

    @server.tool(description="Add 'late', tell the client, then fail tools/list until SIGUSR1.")
    async def flake(ctx: Context) -> str:
        _add_late(server)
        listing.broken = True
        await ctx.session.send_tool_list_changed()
        return "flaked"

    _add_flood(server)
    _add_big(server)
    _add_introspection(server, listing)
    return server, listing


def _add_introspection(server: MCPServer[Any], listing: FlakyListing) -> None:
    sessions: set[str] = set()
    """The MCP session ids (streamable HTTP header, SSE query) that called ``stats``."""

    @server.tool(description="A SHA-256 of the Authorization header this call came with.")
    def authorization(ctx: Context) -> str:
        request: Any = ctx.request_context.request
        header = request.headers.get("authorization")
        return "none" if header is None else hashlib.sha256(header.encode()).hexdigest()

    @server.tool(description="Sessions that called this tool; tools/list requests answered.")
    def stats(ctx: Context) -> str:
        request: Any = ctx.request_context.request
        found = request.headers.get("mcp-session-id") or request.query_params.get("session_id")
        sessions.add(str(found))
        return json.dumps({"sessions": len(sessions), "listings": listing.count})

    @server.tool(description="Structured content only, no text block.", structured_output=False)
    def structured() -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content={"total": 3})


async def _serve(server: MCPServer[Any], listing: FlakyListing, transport: str, port: int) -> None:
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, listing.heal)
    if transport == "stdio":
        await server.run_stdio_async()
    elif transport == "sse":
        await server.run_sse_async(host="127.0.0.1", port=port)
    else:  # streamable HTTP, answering each request in an SSE stream or as plain JSON
        json_response = transport == "streamable_http_json"
        await server.run_streamable_http_async(
            host="127.0.0.1", port=port, json_response=json_response
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    transports = ["streamable_http", "streamable_http_json", "sse", "stdio"]
    parser.add_argument("--transport", choices=transports, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="test-mcp")
    args = parser.parse_args()
    server, listing = build(args.name)
    asyncio.run(_serve(server, listing, args.transport, args.port))


if __name__ == "__main__":
    main()
