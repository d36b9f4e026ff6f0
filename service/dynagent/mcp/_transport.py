"""How a session to an MCP server is opened: stdio, SSE or streamable HTTP, with the
``traceparent`` of the call under way on every HTTP request."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from dynagent._compat import mcp as mcp_compat
from dynagent.runtime._tracing import outgoing_headers

Transport = Literal["streamable_http", "sse", "stdio", "nacos"]
"""``nacos`` names a server of the Nacos MCP registry (a key for its users, not a session)."""


@dataclass(frozen=True, slots=True)
class McpTarget:
    """How to reach one MCP server; equal targets share one session."""

    transport: Transport
    label: str
    """What status and errors show: the URL without query or credentials, or the name."""
    url: str = field(default="", repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    cwd: str = ""


def transport(target: McpTarget) -> Any:
    if target.transport == "stdio":
        return stdio_client(
            StdioServerParameters(
                command=target.command,
                args=list(target.args),
                env=dict(target.env) or None,
                cwd=target.cwd or None,
            )
        )
    if target.transport == "sse":
        return sse_client(
            target.url, headers=dict(target.headers) or None, httpx_client_factory=_traced_client
        )
    return _streamable(target.url, dict(target.headers))


@contextlib.asynccontextmanager
async def _streamable(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    async with (
        _traced_client(headers=headers or None) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def _traced_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """The SDK's HTTP client, with the ``traceparent`` of the call under way on each request.

    One client serves every run on the server, so the header is read per request: the SDK
    sends a message in the context of the task that sent it, the tool call's."""
    http = mcp_compat.http_client(headers=headers, timeout=timeout, auth=auth)
    http.event_hooks = {"request": [_add_trace_headers], "response": []}
    return http


async def _add_trace_headers(request: httpx2.Request) -> None:
    request.headers.update(outgoing_headers())
