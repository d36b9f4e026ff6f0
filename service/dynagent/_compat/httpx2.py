"""httpx2's internals: the network backend of a client.

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
PRIVATE_PARTS: tuple[str, ...] = ()
"""What this module reaches, as ``module:attribute``: the attributes it reaches are set
by each client for itself, so ``use_network_backend`` checks them on the client."""


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
