"""One OpenAI-compatible endpoint and key: the chat completions call on aiohttp's client.

The body is built here as plain JSON and posted on the endpoint's keep-alive connections
(``_http.Connections``: aiohttp's client protocol and parser, without its session's
per-call machinery); a redirect is followed on an ``aiohttp.ClientSession``. Through the
``openai`` client's own request pipeline (options models, httpx2 requests and headers over
its aiohttp transport) the same call cost about 0.55 ms more CPU, half of what a served run
cost on top of the physical floor (docs/benchmarks.md).
What the client did that a run needs is kept: its TLS trust (``SSL_CERT_FILE`` and the
system's store, as httpx2 builds it), its per-read timeouts, redirects, gzip, and its
errors: a failure is raised as the ``openai`` exception the client would raise
(``APIStatusError`` with the status and message, ``APITimeoutError``,
``APIConnectionError`` chained to the transport's cause), which ``_failures`` reads.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import httpx2
import openai
import orjson
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import EofStream

from dynagent.exceptions import ModelError
from dynagent.models._http import REDIRECTS, Connections, ModelAnswer, UnsendableHeader

MAX_ERROR_BODY = 1 << 20
"""Bytes of an error answer read for its message; the rest is dropped unread."""
KEEPALIVE = 5.0
"""Seconds an idle connection to the endpoint is kept (httpx2's default)."""
MAX_CONNECTIONS = 1000
"""Connections open to one endpoint at most (the ``openai`` client's default)."""

_NO_TIMERS = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=None, sock_read=None)
"""For a call its caller bounds whole: aiohttp then schedules no timer for it."""

_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


class ModelEndpoint:
    """``POST {base_url}/chat/completions`` with ``Authorization: Bearer {api_key}``.

    Owns its connection pool, opened on the first call in the running event loop (a
    pool belongs to one loop) and closed by ``aclose``.
    """

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        """The endpoint's base, ending in ``/``."""
        self.url = self.base_url + "chat/completions"
        self.headers = {
            "Authorization": f"Bearer {api_key or 'not-needed'}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self.request = httpx2.Request("POST", self.url)
        """What a raised ``openai`` error names (``_failures`` reads its host and port)."""
        # Built here, as the client did, not in a run: loading the trusted certificates
        # takes milliseconds. Plain http needs none (a redirect to https gets aiohttp's).
        https = self.url.startswith("https:")
        self._ssl: ssl.SSLContext | bool = (
            httpx2.create_ssl_context(trust_env=True) if https else True
        )
        self._connections = Connections(
            self.url,
            self.headers,
            ssl_context=self._ssl if isinstance(self._ssl, ssl.SSLContext) else None,
            keepalive=KEEPALIVE,
            limit=MAX_CONNECTIONS,
        )
        self._session: aiohttp.ClientSession | None = None
        """For the calls the endpoint redirects."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def post(
        self,
        body: Mapping[str, Any],
        read_seconds: float | None,
        headers: Mapping[str, str] | None = None,
    ) -> ModelAnswer:
        """The endpoint's answer to ``body``, its status checked and its body unread.
        ``read_seconds`` bounds connecting and each read; None: the caller bounds the
        whole call itself, and the client sets no timer of its own (a whole answer is
        read under one deadline, so a per-read timer, moved on every read, adds nothing)."""
        data = _dumps(body)
        response: ModelAnswer
        try:
            response = await self._connections.post(data, headers, read_seconds)
            if response.status in REDIRECTS and "Location" in response.headers:
                response.close()  # aiohttp's session follows it, as the client did
                response = await self._session_here().post(
                    self.url,
                    data=data,
                    headers={**self.headers, **headers} if headers else self.headers,
                    timeout=self._timeout(read_seconds),
                )
        except TimeoutError as exc:  # aiohttp's connect and read timeouts
            raise openai.APITimeoutError(request=self.request) from exc
        except UnsendableHeader as exc:  # a key or header of the configuration's
            raise ModelError(f"the call to the model endpoint was not made: {exc}") from None
        except (aiohttp.ClientError, HttpProcessingError, EofStream, OSError) as exc:
            raise openai.APIConnectionError(request=self.request) from exc
        if response.status >= 400:
            raise await self._status_error(response)
        return response

    async def aclose(self) -> None:
        await self._connections.aclose()
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def _session_here(self) -> aiohttp.ClientSession:
        session = self._session
        loop = asyncio.get_running_loop()
        if session is None or session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(
                ssl=self._ssl,
                keepalive_timeout=KEEPALIVE,
                limit=MAX_CONNECTIONS,
            )
            session = self._session = aiohttp.ClientSession(connector=connector)
            self._loop = loop
        return session

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        if seconds is None:
            return _NO_TIMERS
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(
                total=None, connect=seconds, sock_connect=seconds, sock_read=seconds
            )
            self._timeouts[seconds] = timeout
        return timeout

    async def _status_error(self, response: ModelAnswer) -> openai.APIStatusError:
        """What the ``openai`` client raises for this error answer (its body read, up to
        ``MAX_ERROR_BODY``)."""
        try:
            raw = await response.content.read(MAX_ERROR_BODY)
        except (aiohttp.ClientError, TimeoutError):
            raw = b""
        finally:
            response.close()
        answer = httpx2.Response(
            response.status,
            headers=list(response.headers.items()),
            content=raw,
            request=self.request,
        )
        return status_error(answer)


def status_error(response: httpx2.Response) -> openai.APIStatusError:
    """The ``openai`` client's error for an error answer, with its message and body."""
    message = f"Error code: {response.status_code}"
    text = response.text.strip()
    body: object = text
    try:
        body = json.loads(text)
    except ValueError:
        pass
    else:
        error = body.get("error", body) if isinstance(body, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        if isinstance(detail, str) and detail:
            message += f" - {detail}"
    data = body.get("error", body) if isinstance(body, dict) else body
    kind = _STATUS_ERRORS.get(response.status_code)
    if kind is None:
        kind = openai.InternalServerError if response.status_code >= 500 else openai.APIStatusError
    return kind(message, response=response, body=data)


def _dumps(body: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, as the ``openai`` client sends it; what orjson refuses (an
    integer past 64 bits, a string that is not valid Unicode) goes through ``json``. An
    unpaired surrogate (from a tool's output, say) has no UTF-8: the body is then sent
    as ASCII, the surrogate escaped for the endpoint to judge, instead of the call failing
    as if the endpoint had."""
    try:
        return orjson.dumps(body)
    except TypeError:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()
