"""The network backend of an MCP server's HTTP client when its entry does not allow private
addresses: a name is resolved here and only its public addresses are connected to, so a
DNS answer that changes between the policy's check and the connection cannot reach an
internal address (what ``runtime.resources.PublicOnlyResolver`` does for aiohttp)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from typing import Any

from httpcore2 import AnyIOBackend, AsyncNetworkBackend, AsyncNetworkStream

from dynagent.runtime.outbound import is_literal_ip
from dynagent.runtime.resources import is_public_address


class PublicOnlyBackend(AsyncNetworkBackend):
    """Connects to public addresses only; ``PermissionError`` (a refusal by policy) for a
    host that is, or resolves only to, a loopback, private or reserved address."""

    def __init__(self) -> None:
        self._inner = AnyIOBackend()  # what httpcore2 picks under asyncio

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        addresses = await _public_addresses(host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except Exception as exc:  # the next address, as a resolver's caller would
                last = exc
        assert last is not None
        raise last

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _public_addresses(host: str, port: int) -> list[str]:
    if is_literal_ip(host):
        if not is_public_address(host):
            raise PermissionError(f"address {host} is private or loopback")
        return [host]
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    public = [address for address in addresses if is_public_address(address)]
    if not public:
        raise PermissionError(f"{host} resolves only to private or loopback addresses")
    return public
