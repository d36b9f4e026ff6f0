"""Where a tool may connect: one policy for every connection a tool opens — an HTTP tool's
request, an MCP server's session, a remote A2A agent's card and the endpoint the card names.

A definition is data many people can edit, and a model's arguments or a remote card are
data nobody here wrote; neither may turn the service into a way into the network it sits
in. So every outbound connection of a tool is judged by the same ``OutboundPolicy``: only
the hosts it allows, never a loopback, private, link-local or metadata address unless it
says ``allow_private`` (literal addresses here, resolved names by the connection's own
resolver, ``runtime.resources``), and credentials only to the origin they were configured
for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from dynagent.runtime.resources import is_public_address

__all__ = [
    "OutboundPolicy",
    "host_allowed",
    "is_literal_ip",
    "origin",
    "url_host",
]

PRIVATE_HINT = "set allow_private: true on the tool to reach it"


def host_allowed(host: str, allow_hosts: Sequence[str]) -> bool:
    """Whether ``host`` is one of ``allow_hosts``: exact names, or ``*.example.com`` for
    the names under it (not ``example.com`` itself)."""
    host = host.lower().rstrip(".")
    for allowed in allow_hosts:
        pattern = allowed.lower()
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern.rstrip("."):
            return True
    return False


def is_literal_ip(host: str) -> bool:
    """Whether ``host`` is an address rather than a name.

    The test aiohttp uses to connect without asking the resolver (which filters private
    addresses), so every such host is checked by the policy itself; a regex of hex digits
    and colons missed forms such as ::ffff:127.0.0.1 and fe80::1%eth0."""
    return ":" in host or host.replace(".", "").isdigit()


def url_host(url: str) -> str:
    """The host of ``url`` as connections use it: lower case, without brackets or a
    trailing dot; ``""`` when it has none."""
    try:
        return (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return ""


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, the port always written (credentials are bound
    to one origin; ``https://a`` and ``https://a:443`` are the same one)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ""
    scheme = parts.scheme.lower()
    port = port or {"http": 80, "https": 443}.get(scheme, 0)
    return f"{scheme}://{(parts.hostname or '').rstrip('.')}:{port}"


@dataclass(frozen=True, slots=True)
class OutboundPolicy:
    """Where one tool may connect."""

    allow_hosts: tuple[str, ...] = ()
    """Host names, or ``*.example.com``; empty: any host (one a registry names)."""
    allow_private: bool = False
    """Loopback and private addresses allowed (off: protects against SSRF)."""

    @classmethod
    def of(
        cls, url: str | None, allow_hosts: Sequence[str] | None, allow_private: bool
    ) -> OutboundPolicy:
        """A tool entry's policy: its ``allow_hosts``, or when it gives none the host of
        its ``url`` only (and any host for an entry found through a registry)."""
        if allow_hosts is not None:
            return cls(tuple(allow_hosts), allow_private)
        return cls((url_host(url),) if url else (), allow_private)

    def refusal(self, url: str) -> str | None:
        """Why a connection to ``url`` is refused, or None when it may be made. A name is
        judged by its host here and by its addresses when it is resolved."""
        host = url_host(url)
        if not host:
            return f"{url.split('?', 1)[0]!r} names no host"
        if self.allow_hosts and not host_allowed(host, self.allow_hosts):
            return f"host {host!r} is not in this tool's allow_hosts"
        if not self.allow_private and is_literal_ip(host) and not is_public_address(host):
            return f"address {host} is private or loopback"
        return None

    def check(self, url: str) -> None:
        """Raises ``PermissionError`` (a refusal by policy, never worth retrying) for a
        connection to ``url`` this policy refuses."""
        reason = self.refusal(url)
        if reason is not None:
            raise PermissionError(reason)

    def check_credentials(self, url: str, configured: str) -> None:
        """Credentials configured for the origin of ``configured`` never go to another:
        ``PermissionError`` when ``url`` is elsewhere."""
        if origin(url) != origin(configured):
            raise PermissionError(
                f"the tool's credentials are for {origin(configured)}, not {origin(url)}: "
                "they are never sent to another origin"
            )
