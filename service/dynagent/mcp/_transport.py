"""How a session to an MCP server is opened: stdio, SSE or streamable HTTP, with the
``traceparent`` of the call under way on every HTTP request, and every HTTP request held
to the entry's ``OutboundPolicy``: its hosts, its addresses (checked again when a name is
resolved, ``_network.PublicOnlyBackend``) and its credentials, sent to the URL's origin
only."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from dynagent._compat import httpx2 as httpx2_compat
from dynagent._compat import mcp as mcp_compat
from dynagent.mcp._network import PublicOnlyBackend
from dynagent.runtime._tracing import outgoing_headers
from dynagent.runtime.outbound import OutboundPolicy

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
    policy: OutboundPolicy = field(default_factory=OutboundPolicy)
    """Where its HTTP requests may go (stdio: unused). Part of the key: an entry allowed
    private addresses never shares a session with one that is not."""


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
    target.policy.check(target.url)
    factory = functools.partial(_traced_client, target=target)
    if target.transport == "sse":
        return sse_client(
            target.url, headers=dict(target.headers) or None, httpx_client_factory=factory
        )
    return _streamable(target, factory)


@contextlib.asynccontextmanager
async def _streamable(target: McpTarget, factory: Any) -> AsyncIterator[Any]:
    async with (
        factory(headers=dict(target.headers) or None) as http,
        streamable_http_client(target.url, http_client=http) as streams,
    ):
        yield streams


def _traced_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
    *,
    target: McpTarget,
) -> httpx2.AsyncClient:
    """The SDK's HTTP client, with the ``traceparent`` of the call under way on each request
    and each request checked against the target's policy.

    One client serves every run on the server, so the header is read per request: the SDK
    sends a message in the context of the task that sent it, the tool call's."""
    http = mcp_compat.http_client(headers=headers, timeout=timeout, auth=auth)
    if not target.policy.allow_private:
        httpx2_compat.use_network_backend(http, PublicOnlyBackend())
    http.event_hooks = {"request": [_Checked(target), _add_trace_headers], "response": []}
    return http


class _Checked:
    """The policy applied to every request the SDK sends (redirects it follows included):
    allowed hosts and addresses, and the entry's headers to the URL's origin only."""

    def __init__(self, target: McpTarget) -> None:
        self._target = target

    async def __call__(self, request: httpx2.Request) -> None:
        url = str(request.url)
        self._target.policy.check(url)
        if self._target.headers:
            self._target.policy.check_credentials(url, self._target.url)


async def _add_trace_headers(request: httpx2.Request) -> None:
    request.headers.update(outgoing_headers())
