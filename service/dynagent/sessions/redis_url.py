"""Where the shared Redis is: a ``redis://``, ``rediss://`` or ``unix://`` URL names one
server; ``redis+sentinel://[[user]:password@]host:port[,host:port…]/name[/db]`` names the
Sentinels that know which server is the primary of ``name`` now. The user and password
are the primary's (and its replicas'); Sentinels that require a password of their own
(``requirepass`` in sentinel.conf) take it as ``?sentinel_password=…`` (and
``sentinel_username=…`` for an ACL user), percent-encoded like the password.

Parsing lives apart from the client (no ``redis`` import) so the service config checks a
URL whether or not the optional ``redis`` extra is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

SENTINEL_SCHEME = "redis+sentinel"
SCHEMES = ("redis", "rediss", "unix", SENTINEL_SCHEME)
SENTINEL_FORM = (
    "redis+sentinel://[[user]:password@]host:port[,host:port…]/mymaster[/db][?sentinel_password=…]"
)
SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username")


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """A ``redis+sentinel://`` URL, parsed."""

    sentinels: tuple[tuple[str, int], ...]
    """The Sentinels' addresses, asked in turn for the primary."""
    service: str
    """The name the Sentinels monitor the primary by (``sentinel monitor <name> …``)."""
    db: int = 0
    password: str | None = None
    """The password of the primary and its replicas."""
    username: str | None = None
    """The ACL user of the primary and its replicas (None: ``default``)."""
    sentinel_password: str | None = None
    """The Sentinels' own password (None: they are asked without one)."""
    sentinel_username: str | None = None


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
    rest, _, query = url[len(prefix) :].partition("?")
    location, _, path = rest.partition("/")
    username = password = None
    if "@" in location:
        userinfo, _, location = location.rpartition("@")
        user, _, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) or None
    sentinels = tuple(_address(part) for part in location.split(","))
    parts = path.removesuffix("/").split("/") if path else []
    if not parts or not parts[0] or len(parts) > 2:
        raise ValueError(f"a Sentinel URL names the primary's name: {SENTINEL_FORM}")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit() or len(parts[1]) > 5:
            raise ValueError(f"the database of a Sentinel URL is a number: {SENTINEL_FORM}")
        db = int(parts[1])
    options = _options(query)
    return SentinelUrl(
        sentinels,
        unquote(parts[0]),
        db,
        password,
        username,
        options.get("sentinel_password"),
        options.get("sentinel_username"),
    )


def _options(query: str) -> dict[str, str]:
    """The query's options: each known, once (the values are never echoed: secrets)."""
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
    options: dict[str, str] = {}
    for name, value in pairs:
        if name not in SENTINEL_OPTIONS:
            raise ValueError(
                f"a Sentinel URL takes the options {', '.join(SENTINEL_OPTIONS)}, not "
                f"{name[:40]!r}: {SENTINEL_FORM}"
            )
        if name in options:
            raise ValueError(f"a Sentinel URL gives {name} once: {SENTINEL_FORM}")
        options[name] = value
    return {name: value for name, value in options.items() if value}


def secrets_of(url: str) -> list[str]:
    """The passwords ``url`` carries, for masking what is shown of it."""
    if url.startswith(f"{SENTINEL_SCHEME}://"):
        where = parse_sentinel_url(url)
        found = [where.password, where.sentinel_password]
    else:
        found = [urlsplit(url).password]
    return [secret for secret in found if secret]


def _address(part: str) -> tuple[str, int]:
    host, sep, port = part.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 address in brackets
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"each Sentinel of a Sentinel URL is host:port, not {part!r}: {SENTINEL_FORM}"
        )
    return host, int(port)
