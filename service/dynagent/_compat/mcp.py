"""mcp's internals: the HTTP client its transports make for themselves, and the stream
its stdio transport decodes a server's output with.

The SDK's HTTP transports build their client with ``create_mcp_http_client`` (its
timeouts: 30 s, and 300 s to read a stream), which lives in a private module; Dynagent
builds its clients with it too, so that they stay what the SDK expects, plus the
``traceparent`` of the call under way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dynagent._compat.versions import Tested

if TYPE_CHECKING:
    import httpx2

TESTED = Tested("mcp", "2.3.0", "2.4")
PRIVATE_PARTS = (
    "mcp.shared._httpx_utils:create_mcp_http_client",
    "mcp.client.stdio:TextReceiveStream",
)
"""What this module reaches, as ``module:attribute``."""


def check() -> None:
    TESTED.check()


def http_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """A new HTTP client as the SDK's transports make it."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    return create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)


def replace_stdio_text_stream(factory: Callable[..., Any]) -> None:
    """Have the stdio transport decode a server's output with ``factory(stream, encoding=,
    errors=)`` instead of anyio's ``TextReceiveStream`` (the name its module looks up
    when a session opens); ``dynagent.mcp._stdio`` bounds what it reads so."""
    from mcp.client import stdio

    stdio.TextReceiveStream = factory  # type: ignore[attr-defined,assignment]
