"""Declarative HTTP tools (``type: http``): a URL template, an argument schema and a
host allow-list."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import quote, unquote, urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator
from yarl import URL

from dynagent import _regex
from dynagent.exceptions import ConfigError, FieldIssue, ToolCallError
from dynagent.models.base import ToolDefinition
from dynagent.runtime._tracing import outgoing_headers
from dynagent.runtime.outbound import OutboundPolicy
from dynagent.runtime.resources import Resources
from dynagent.spec._schemas import check_json_schema
from dynagent.spec.agent import AgentSpec
from dynagent.spec.tools import TOOL_NAME_PATTERN, ErrorPolicy
from dynagent.tools.base import Tool
from dynagent.tools.kinds import KindContext, ToolKind


class HttpToolSpec(BaseModel):
    """A declarative HTTP tool. Only hosts in ``allow_hosts`` are ever called."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["http"]
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = ""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    url: str = Field(pattern=r"^https?://")
    """URL template: ``{arg}`` is filled (URL-quoted) from the arguments."""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    """JSON Schema of the arguments; those not in the URL go to the query (GET) or JSON body."""
    headers: dict[str, str] = {}
    """Header values may use ``${VAR}``; they are never logged."""
    allow_hosts: list[str] = Field(min_length=1)
    """Exact host names, or ``*.example.com``."""
    allow_private: bool = False
    """Allow loopback and private addresses (off: protects against SSRF)."""
    timeout: float = Field(default=10, gt=0, le=120)
    on_error: ErrorPolicy = "report"
    shadow_safe: bool = False
    """Call it in shadow traffic too (only for calls without side effects, e.g. a GET)."""
    idempotent: bool | None = None
    """Whether sending the same call twice does what sending it once does, so that the
    ``retry`` interceptor may send again a call that failed on the way (connection
    refused or broken, timeout, HTTP 408, 429 or 5xx; never another 4xx). Default: by
    the method — GET, PUT and DELETE are idempotent (HTTP semantics), POST and PATCH are
    not, and are never repeated unless this says ``true`` (e.g. the endpoint dedupes on
    a request id in the arguments)."""

    @field_validator("parameters")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_json_schema(value)
        return value


_PLACEHOLDER = _regex.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_RESPONSE_CHARS = 16_000
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
"""Methods whose repeat has no effect beyond the first call's (RFC 9110, 9.2.2)."""


STRUCTURE = (
    "would change the URL's structure: a placeholder fills one path segment "
    "(never '.', '..' or nothing) or one query value"
)
FIXED_PATH = (
    "the URL's fixed path changes once normalised ('.', '..' or an encoded dot in it): "
    "write the path it means"
)
OUTSIDE = (
    "a {placeholder} may fill only a path segment or a query value, "
    "never the scheme, host, port, user, query name or fragment"
)


@dataclass(frozen=True, slots=True)
class UrlTemplate:
    """A tool's URL, split once at build time so that a value can only ever fill one
    path segment or one query value (percent-encoded), never add or remove either."""

    origin: str
    """``scheme://host:port``: no placeholder may reach it."""
    segments: tuple[str, ...]
    """The path's segments after its leading ``/``, placeholders unfilled."""
    query: tuple[str, ...]
    """``name=value`` items, placeholders (values only) unfilled."""

    @classmethod
    def parse(cls, template: str) -> UrlTemplate:
        """Raises ``ValueError`` for a placeholder outside the path and query values."""
        parts = urlsplit(template)
        names = [item.partition("=")[0] for item in parts.query.split("&")]
        outside = f"{parts.scheme}://{parts.netloc}#{parts.fragment}{''.join(names)}"
        if _PLACEHOLDER.search(outside):
            raise ValueError(OUTSIDE)
        segments = tuple(parts.path[1:].split("/")) if parts.path else ()
        query = tuple(parts.query.split("&")) if parts.query else ()
        parsed = cls(f"{parts.scheme}://{parts.netloc}", segments, query)
        sample = {match.group(1) or "": "x" for match in _PLACEHOLDER.finditer(template)}
        try:
            parsed.fill(sample)
        except ValueError:
            raise ValueError(FIXED_PATH) from None
        return parsed

    def fill(self, arguments: Mapping[str, Any]) -> tuple[URL, set[str]]:
        """The URL with ``arguments`` filled in, and the names used; raises ``ValueError``
        for a missing argument or a value that would change the URL's structure."""
        used: set[str] = set()
        segments = [self._segment(segment, arguments, used) for segment in self.segments]
        query = [self._filled(item, arguments, used)[0] for item in self.query]
        text = self.origin + "".join(f"/{segment}" for segment in segments)
        url = URL(text + (f"?{'&'.join(query)}" if query else ""))
        # The same parse aiohttp applies: dot segments it would remove, or anything
        # decoded into structure, shows up as a difference here.
        origin = URL(self.origin)
        expected = ("/", *(unquote(segment) for segment in segments)) if segments else ("/",)
        if (url.scheme, url.host, url.port) != (origin.scheme, origin.host, origin.port) or (
            url.parts != expected
        ):
            raise ValueError(f"the filled URL {STRUCTURE}")
        return url, used

    def _segment(self, segment: str, arguments: Mapping[str, Any], used: set[str]) -> str:
        filled, first = self._filled(segment, arguments, used)
        if first is not None and unquote(filled) in ("", ".", ".."):
            raise ValueError(f"argument {first!r} = {_shown(arguments[first])} {STRUCTURE}")
        return filled

    @staticmethod
    def _filled(text: str, arguments: Mapping[str, Any], used: set[str]) -> tuple[str, str | None]:
        names: list[str] = []

        def replace(match: _regex.Match) -> str:
            name = match.group(1) or ""
            if name not in arguments:
                raise ValueError(f"missing argument {name!r} for the URL")
            names.append(name)
            return quote(str(arguments[name]), safe="")

        filled = _PLACEHOLDER.sub(replace, text)
        used.update(names)
        return filled, names[0] if names else None


def _shown(value: Any) -> str:
    text = repr(str(value))
    return text if len(text) <= 40 else text[:37] + "..."


def http_tool(spec: HttpToolSpec, headers: Mapping[str, str], resources: Resources) -> Tool:
    """Build the tool; ``headers`` are the spec's headers with ``${VAR}`` already resolved.

    Raises ``ValueError`` for a URL template whose placeholders reach past values."""

    template = UrlTemplate.parse(spec.url)
    host = urlsplit(template.origin).hostname or ""  # no argument can change it
    policy = OutboundPolicy(tuple(spec.allow_hosts), spec.allow_private)

    async def call(arguments: dict[str, Any]) -> str:
        url, used = template.fill(arguments)
        policy.check(template.origin)
        rest = {k: v for k, v in arguments.items() if k not in used}
        options: dict[str, Any] = {
            "headers": {**headers, **outgoing_headers()},
            "timeout": aiohttp.ClientTimeout(total=spec.timeout),
            "allow_redirects": False,
        }
        if spec.method in {"GET", "DELETE"}:
            options["params"] = {k: str(v) for k, v in rest.items()}
        else:
            options["json"] = rest
        session = resources.http_session(allow_private=spec.allow_private)
        try:
            async with session.request(spec.method, url, **options) as response:
                text = await _bounded_text(response)
                if response.status >= 400:
                    raise ToolCallError.answered(
                        response.status, f"HTTP {response.status}: {text[:200]}"
                    )
                return text[:MAX_RESPONSE_CHARS]
        except (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch) as exc:
            raise ToolCallError(str(exc)) from None  # the same certificate next time
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, PermissionError):  # the resolver's private address
                raise PermissionError(str(exc.os_error)) from None
            raise ToolCallError(str(exc), transient=True) from None  # nothing was sent
        except TimeoutError:
            message = f"no answer from {host} within {spec.timeout} s"
            raise ToolCallError(message, transient=True) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            message = f"the connection to {host} broke: {str(exc) or type(exc).__name__}"
            raise ToolCallError(message, transient=True) from None

    definition = ToolDefinition(spec.name, spec.description, spec.parameters)
    idempotent = spec.idempotent
    if idempotent is None:
        idempotent = spec.method in IDEMPOTENT_METHODS
    return Tool.of(
        definition, call, timeout=spec.timeout, on_error=spec.on_error, idempotent=idempotent
    )


async def _bounded_text(response: aiohttp.ClientResponse) -> str:
    """The start of the body, as text: what the model is given (``MAX_RESPONSE_CHARS``)
    and no more is read, however large the answer (it was read whole, then cut)."""
    limit = 4 * MAX_RESPONSE_CHARS  # bytes: a character is at most four in UTF-8
    body = bytearray()
    async for piece in response.content.iter_chunked(64 * 1024):
        body += piece
        if len(body) >= limit:
            break
    return body[:limit].decode(_charset(response.charset), errors="replace")


def _charset(name: str | None) -> str:
    """The body's charset as Python names it; UTF-8 when none is given or known (aiohttp's
    own fallback needs the whole body read first)."""
    try:
        return codecs.lookup(name).name if name else "utf-8"
    except LookupError:
        return "utf-8"


class HttpKind(ToolKind[HttpToolSpec]):
    type = "http"
    entry = HttpToolSpec

    def build(
        self, ctx: KindContext, spec: AgentSpec, entry: HttpToolSpec, path: str
    ) -> list[Tool]:
        headers = {
            name: ctx.expand_env(value, f"{path}.headers.{name}", secret=True)
            for name, value in entry.headers.items()
        }
        try:
            made = http_tool(entry, headers, ctx.resources)
        except ValueError as exc:
            raise ConfigError(
                "invalid HTTP tool URL", issues=[FieldIssue(f"{path}.url", str(exc))]
            ) from None
        return [replace(made, shadow_safe=entry.shadow_safe)]


KIND = HttpKind()
