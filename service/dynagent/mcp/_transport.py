"""How a session to an MCP server is opened: stdio, SSE or streamable HTTP, with the
``traceparent`` of the call under way on every HTTP request, every HTTP request held to
the entry's ``OutboundPolicy`` (its hosts, its addresses, checked again when a name is
resolved by ``_network.PublicOnlyBackend``, and its credentials, sent to the URL's origin
only), and at most ``MAX_MESSAGE_BYTES`` read of any one message the server sends."""

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
from dynagent.mcp._stdio import bound_stdio
from dynagent.runtime._tracing import outgoing_headers
from dynagent.runtime.outbound import OutboundPolicy

MAX_MESSAGE_BYTES = 1024 * 1024
"""The most read of one message from a server (a tool result, a listing): the SDK's own
bound on an SSE event, applied to plain JSON answers too. The model reads 32,000
characters of a result; a 200 MB answer read whole first cost 340 MB and stalled the
loop."""

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
        bound_stdio(MAX_MESSAGE_BYTES)
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
        streamable_http_client(
            target.url, http_client=http, max_sse_event_size=MAX_MESSAGE_BYTES
        ) as streams,
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
    http.event_hooks = {
        "request": [_Checked(target), _add_trace_headers],
        "response": [_bound_body],
    }
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
    # Plain bytes: a compressed body's size says nothing of what it inflates to.
    request.headers["Accept-Encoding"] = "identity"


class MessageTooLarge(httpx2.StreamError):
    """A server's answer went past ``MAX_MESSAGE_BYTES``; reading stopped there. (A
    ``StreamError``: the SDK turns it into an error answer to the request.)"""


async def _bound_body(response: httpx2.Response) -> None:
    """Read at most ``MAX_MESSAGE_BYTES`` of a plain (JSON) answer; SSE streams are
    bounded per event by the SDK (``max_sse_event_size``)."""
    kind = response.headers.get("content-type", "").lower()
    if not kind.startswith("text/event-stream"):
        encoding = response.headers.get("content-encoding", "identity").lower()
        response.stream = _BoundedStream(response.stream, encoding)


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream | httpx2.SyncByteStream, encoding: str):
        self._stream = stream
        self._encoding = encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._encoding != "identity":
            raise MessageTooLarge(
                f"the MCP server answered with Content-Encoding {self._encoding!r}; only "
                "plain answers are read (their size bounds what they cost)"
            )
        assert isinstance(self._stream, httpx2.AsyncByteStream)
        read = 0
        async for chunk in self._stream:
            read += len(chunk)
            if read > MAX_MESSAGE_BYTES:
                raise MessageTooLarge(
                    f"the MCP server's answer is larger than {MAX_MESSAGE_BYTES} bytes, "
                    "the most read of one message; ask the tool for less"
                )
            yield chunk

    async def aclose(self) -> None:
        if isinstance(self._stream, httpx2.AsyncByteStream):
            await self._stream.aclose()
