"""Connections shared by every agent build: model clients and HTTP tool sessions.

Agents are rebuilt on every config change; they borrow connections from here
so a rebuild opens nothing. The service owns one ``Resources`` and closes it
at shutdown.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from dynagent.models.openai import ClientPool


class PublicOnlyResolver(AbstractResolver):
    """Resolves names but drops loopback, private, link-local and reserved addresses.

    Checking at resolution (not before the request) means a DNS answer that
    changes between check and connect cannot reach an internal address.
    """

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        public = [r for r in results if is_public_address(r["host"])]
        if not public:
            # A PermissionError (an OSError, as a resolver must raise): a refusal by policy,
            # which the HTTP tool reports as one, never as a failure worth retrying.
            raise PermissionError(f"{host} resolves only to private or loopback addresses")
        return public

    async def close(self) -> None:
        await self._inner.close()


def is_public_address(host: str) -> bool:
    """Whether ``host`` (an IP literal) is a public unicast address. An IPv6 address that
    carries an IPv4 one (mapped, compatible, translated, 6to4, NAT64, Teredo) is judged
    by the IPv4 inside it: routers and relays deliver to that address."""
    try:
        address = ipaddress.ip_address(host.split("%", maxsplit=1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        embedded = embedded_ipv4(address)
        if embedded:
            return all(_public(inner) for inner in embedded)
    return _public(address)


_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries (both ends of a Teredo address)."""
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_TRANSLATED or any(address in net for net in _NAT64):
        return (low32,)
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # not :: or ::1
        return (low32,)
    return ()


_NOT_GLOBAL = (
    ipaddress.IPv6Network("fec0::/10"),  # site-local, deprecated (RFC 3879): still private
    ipaddress.IPv6Network("3fff::/20"),  # documentation (RFC 9637)
    ipaddress.IPv6Network("2001:db8::/32"),  # documentation (RFC 3849)
)
"""Ranges Python's ``is_global`` calls global (on some versions) where no public host is."""


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and any(address in n for n in _NOT_GLOBAL):
        return False
    return address.is_global and not address.is_multicast


class Resources:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` (monotonic seconds) times the model endpoints' circuit breakers."""
        self.model_clients = ClientPool(clock=clock)
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    def http_session(self, *, allow_private: bool) -> aiohttp.ClientSession:
        """A shared session; unless ``allow_private``, it connects to public addresses only."""
        session = self._sessions.get(allow_private)
        if session is None or session.closed:
            options: dict[str, Any] = {"limit": 100}
            if not allow_private:
                options["resolver"] = PublicOnlyResolver()
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(**options))
            self._sessions[allow_private] = session
        return session

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()
        await self.model_clients.aclose()
