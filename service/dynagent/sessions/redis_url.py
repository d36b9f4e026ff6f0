"""Where the shared Redis is: a ``redis://``, ``rediss://`` or ``unix://`` URL names one
server; ``redis+sentinel://[:password@]host:port[,host:port…]/name[/db]`` names the
Sentinels that know which server is the primary of ``name`` now.

Parsing lives apart from the client (no ``redis`` import) so the service config checks a
URL whether or not the optional ``redis`` extra is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

SENTINEL_SCHEME = "redis+sentinel"
SCHEMES = ("redis", "rediss", "unix", SENTINEL_SCHEME)
SENTINEL_FORM = "redis+sentinel://[:password@]host:port[,host:port…]/mymaster[/db]"


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """A ``redis+sentinel://`` URL, parsed."""

    sentinels: tuple[tuple[str, int], ...]
    """The Sentinels' addresses, asked in turn for the primary."""
    service: str
    """The name the Sentinels monitor the primary by (``sentinel monitor <name> …``)."""
    db: int = 0
    password: str | None = None
    """The password of the primary and its replicas (Sentinels are asked without one)."""


def check_url(url: str) -> str:
    """``url`` when it names a Redis the session store can use; else ``ValueError`` that
    says which forms are accepted."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(
            "a Redis URL starts with redis://, rediss://, unix:// or redis+sentinel:// "
            f"({SENTINEL_FORM})"
        )
    if scheme == SENTINEL_SCHEME:
        parse_sentinel_url(url)
    return url


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The Sentinels, primary name, database and password of a ``redis+sentinel://`` URL."""
    prefix = f"{SENTINEL_SCHEME}://"
    if not url.startswith(prefix):
        raise ValueError(f"not a Sentinel URL: expected {SENTINEL_FORM}")
    location, _, path = url[len(prefix) :].partition("/")
    password: str | None = None
    if "@" in location:
        userinfo, _, location = location.rpartition("@")
        password = unquote(userinfo.partition(":")[2]) or None
    sentinels = tuple(_address(part) for part in location.split(","))
    parts = path.removesuffix("/").split("/") if path else []
    if not parts or not parts[0] or len(parts) > 2:
        raise ValueError(f"a Sentinel URL names the primary's name: {SENTINEL_FORM}")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit() or len(parts[1]) > 5:
            raise ValueError(f"the database of a Sentinel URL is a number: {SENTINEL_FORM}")
        db = int(parts[1])
    return SentinelUrl(sentinels, unquote(parts[0]), db, password)


def _address(part: str) -> tuple[str, int]:
    host, sep, port = part.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 address in brackets
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"each Sentinel of a Sentinel URL is host:port, not {part!r}: {SENTINEL_FORM}"
        )
    return host, int(port)
