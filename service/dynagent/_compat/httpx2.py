"""httpx2's internals: the stream a response wraps, and the network backend of a client.

A response's ``stream`` is httpx2's ``BoundAsyncStream``, which keeps the transport's own
stream in ``_stream``; the model client reads a body straight from the transport under
it (``dynagent._compat.openai``).

A client's default transport (``AsyncClient._transport``, an ``AsyncHTTPTransport``)
keeps its httpcore2 connection pool in ``_pool``, which opens every connection through
its ``_network_backend``: the MCP client's is replaced by one that refuses private
addresses when a name resolves to them (``dynagent.mcp._network``). httpx2 takes no
backend of its own; httpcore2's pool does, and keeps it there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynagent._compat.versions import Tested

if TYPE_CHECKING:
    import httpx2

TESTED = Tested("httpx2", "2.16.2", "2.17")
PRIVATE_PARTS = ("httpx2._client:BoundAsyncStream",)
"""What this module reaches, as ``module:attribute``; ``_stream``, which each stream sets
for itself, is checked on a response by ``tests/runtime/test_compat.py``."""


def check() -> None:
    TESTED.check()


def use_network_backend(client: httpx2.AsyncClient, backend: Any) -> None:
    """Open the connections of ``client``'s default transport through ``backend`` (an
    ``httpcore2.AsyncNetworkBackend``); ``RuntimeError`` when httpx2 no longer keeps them
    where this reaches, rather than a client that silently skips the backend."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if pool is None or not hasattr(pool, "_network_backend"):
        raise RuntimeError("httpx2 keeps no connection pool where dynagent._compat expects it")
    pool._network_backend = backend


def transport_stream(response: httpx2.Response) -> Any:
    """The transport's stream under ``response``, or None when httpx2 keeps none there."""
    return getattr(response.stream, "_stream", None)
