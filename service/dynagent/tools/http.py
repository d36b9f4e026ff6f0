"""Declarative HTTP tools: a URL template, an argument schema and a host allow-list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

from .. import _regex
from ..models.base import ToolDefinition
from ..resources import Resources, is_public_address
from ..spec import HttpToolSpec
from .base import Tool

_PLACEHOLDER = _regex.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_RESPONSE_CHARS = 16_000


def host_allowed(host: str, allow_hosts: list[str]) -> bool:
    host = host.lower().rstrip(".")
    for allowed in allow_hosts:
        pattern = allowed.lower()
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


def fill_url(template: str, arguments: Mapping[str, Any]) -> tuple[str, set[str]]:
    used: set[str] = set()

    def replace(match: _regex.Match) -> str:
        name = match.group(1) or ""
        if name not in arguments:
            raise ValueError(f"missing argument {name!r} for the URL")
        used.add(name)
        return quote(str(arguments[name]), safe="")

    return _PLACEHOLDER.sub(replace, template), used


def http_tool(spec: HttpToolSpec, headers: Mapping[str, str], resources: Resources) -> Tool:
    """Build the tool; ``headers`` are the spec's headers with ``${VAR}`` already resolved."""

    async def call(arguments: dict[str, Any]) -> str:
        url, used = fill_url(spec.url, arguments)
        parts = urlsplit(url)
        host = parts.hostname or ""
        if not host_allowed(host, spec.allow_hosts):
            raise PermissionError(f"host {host!r} is not in this tool's allow_hosts")
        if not spec.allow_private and _is_literal_ip(host) and not is_public_address(host):
            raise PermissionError(f"address {host} is private or loopback")
        rest = {k: v for k, v in arguments.items() if k not in used}
        options: dict[str, Any] = {
            "headers": dict(headers),
            "timeout": aiohttp.ClientTimeout(total=spec.timeout),
            "allow_redirects": False,
        }
        if spec.method in {"GET", "DELETE"}:
            options["params"] = {k: str(v) for k, v in rest.items()}
        else:
            options["json"] = rest
        session = resources.http_session(allow_private=spec.allow_private)
        async with session.request(spec.method, url, **options) as response:
            text = await response.text(errors="replace")
            if response.status >= 400:
                raise RuntimeError(f"HTTP {response.status}: {text[:200]}")
            return text[:MAX_RESPONSE_CHARS]

    definition = ToolDefinition(spec.name, spec.description, spec.parameters)
    return Tool(definition, call, timeout=spec.timeout, on_error=spec.on_error)


def _is_literal_ip(host: str) -> bool:
    # The test aiohttp uses to connect without asking the resolver (which filters
    # private addresses), so every such host is checked here; a regex of hex digits
    # and colons missed forms such as ::ffff:127.0.0.1 and fe80::1%eth0.
    return ":" in host or host.replace(".", "").isdigit()
