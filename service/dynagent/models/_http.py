"""Model calls on keep-alive connections of aiohttp's client protocol, without its session.

A served run's one model call on ``aiohttp.ClientSession`` cost about 110 µs of CPU in a
request of about 290 (measured on the physical floor, the bare handler that forwards the
call: ``bench/_floor.py``): the session builds a ``ClientRequest`` and a
``ClientResponse`` from generic options (cookies, proxies, redirects, tracing signals,
URL joining), acquires the connection through its connector's bookkeeping and writes the
body from a task of its own. None of that is needed to post JSON to one known endpoint.
Here the request's head is built once per endpoint and the request leaves in one send; a
connection is taken from a list of idle ones. Everything that reads what the endpoint
sends stays aiohttp's: its ``ResponseHandler`` protocol (two of its per-read costs taken
out: ``_compat.aiohttp.model_connection``), with the C parser (llhttp), the
same limits on lines, fields and headers, decompression, the per-read timeout and flow
control, and the response body as aiohttp's ``StreamReader``.

A redirect is not followed here: ``ModelEndpoint`` posts that call again on aiohttp's
session, which follows it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Mapping
from contextlib import suppress
from typing import TypeAlias

import aiohttp
from aiohttp import hdrs
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.streams import StreamReader
from multidict import CIMultiDictProxy
from yarl import URL

from dynagent._compat import aiohttp as aiohttp_compat

READ_BUFFER = 1 << 16
"""Bytes aiohttp's protocol reads ahead of its reader (aiohttp's default)."""
MAX_LINE = MAX_FIELD = 8190
"""aiohttp's client's limits on a response's status line and each header line."""
MAX_HEADERS = 128
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_BAD_HEADER = ("\r", "\n", "\x00")


class UnsendableHeader(ValueError):
    """A header holds a line break (or NUL), which would end it and start one of the
    text's own: the call is not made."""


class Answer:
    """An endpoint's answer, its body unread: what the model client reads of aiohttp's
    ``ClientResponse`` (``status``, ``headers``, ``content``, ``content_length``,
    ``connection.transport``, ``release``, ``close``)."""

    __slots__ = ("_pool", "_settled", "connection", "content", "headers", "status")

    def __init__(
        self,
        pool: Connections,
        connection: ResponseHandler,
        status: int,
        headers: CIMultiDictProxy[str],
        content: StreamReader,
    ) -> None:
        self._pool = pool
        self._settled = False
        self.connection = connection
        self.status = status
        self.headers = headers
        self.content = content

    @property
    def content_length(self) -> int | None:
        length = self.headers.get("Content-Length")
        return int(length) if length is not None else None

    def release(self) -> None:
        """The connection back to the idle ones if its answer was read to the end; else
        closed."""
        if not self._settled:
            self._settled = True
            self._pool.give_back(self.connection)

    def close(self) -> None:
        """The connection closed, whatever was left unread."""
        if not self._settled:
            self._settled = True
            self._pool.drop(self.connection)

    def release_at_end(self, within: float) -> None:
        """``release`` once the body's end has arrived, or ``close`` if it has not within
        ``within`` seconds. A stream read to its ``[DONE]`` event often ends a moment
        later (the end of its chunked body comes in a segment of its own): closing its
        connection then cost a new one for a twentieth of the streams."""
        if self._settled or self.content.at_eof():
            self.release()
            return
        timer = asyncio.get_running_loop().call_later(within, self.close)

        def ended() -> None:
            timer.cancel()
            self.release()

        self.content.on_eof(ended)


ModelAnswer: TypeAlias = "Answer | aiohttp.ClientResponse"
"""What a model call reads: an answer on its own connections, or a redirect's on aiohttp's
session."""


class Connections:
    """The connections to one endpoint: at most ``limit`` open at once, an idle one kept
    ``keepalive`` seconds. Bound to the event loop of its first call (a connection belongs
    to one loop); a call in another loop starts afresh."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        ssl_context: ssl.SSLContext | None,
        keepalive: float,
        limit: int,
    ) -> None:
        target = URL(url)
        self._host = target.raw_host or ""
        self._port = target.port or (443 if target.scheme == "https" else 80)
        self._ssl = ssl_context if target.scheme == "https" else None
        self._keepalive = keepalive
        self._limit = limit
        fixed = {
            "Host": target.host_port_subcomponent or self._host,
            "Accept-Encoding": ClientRequest.DEFAULT_HEADERS[hdrs.ACCEPT_ENCODING],
            "User-Agent": SERVER_SOFTWARE,
            **headers,
        }
        self._unsendable = _unsendable(fixed)
        self._head = (f"POST {target.raw_path_qs} HTTP/1.1\r\n" + "".join(_lines(fixed))).encode()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: deque[tuple[ResponseHandler, float]] = deque()
        self._busy: set[ResponseHandler] = set()
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._prune: asyncio.TimerHandle | None = None

    async def post(
        self, body: bytes, headers: Mapping[str, str] | None, read_timeout: float | None
    ) -> Answer:
        """The endpoint's answer to ``body`` (its status and headers read). Raises what
        aiohttp's protocol raises (``aiohttp.ClientError``, ``HttpProcessingError``) and
        ``OSError`` for a connection that could not be made; ``read_timeout`` bounds the
        connecting and each read, None leaves the call to its caller's deadline."""
        if self._unsendable:
            raise UnsendableHeader(self._unsendable)
        request = b"".join(_request(self._head, headers, body))  # refused before a connection
        connection = await self._take(read_timeout)
        try:
            connection.set_response_params(
                read_until_eof=True,
                read_timeout=read_timeout,
                read_bufsize=READ_BUFFER,
                max_line_size=MAX_LINE,
                max_field_size=MAX_FIELD,
                max_headers=MAX_HEADERS,
            )
            transport = connection.transport
            if transport is None:
                raise ConnectionResetError("the connection to the model endpoint closed")
            transport.write(request)
            connection.start_timeout()
            while True:  # an informational answer (100 Continue) is passed over
                message, payload = await connection.read()
                if not 100 <= message.code < 200 or message.code == 101:
                    return Answer(self, connection, message.code, message.headers, payload)
        except BaseException:
            self.drop(connection)
            raise

    def give_back(self, connection: ResponseHandler) -> None:
        self._busy.discard(connection)
        if connection.should_close or not connection.is_connected() or self._loop is None:
            connection.close()
        else:
            self._idle.append((connection, self._loop.time()))
            if self._prune is None:
                self._prune = self._loop.call_later(self._keepalive, self._close_idle)
        self._wake()

    def drop(self, connection: ResponseHandler) -> None:
        self._busy.discard(connection)
        connection.close()
        self._wake()

    async def aclose(self) -> None:
        if self._prune is not None:
            self._prune.cancel()
            self._prune = None
        for connection in (*self._busy, *(idle for idle, _ in self._idle)):
            with suppress(RuntimeError):  # its loop is closed: nothing left to close
                connection.close()
        self._busy.clear()
        self._idle.clear()

    async def _take(self, connect_timeout: float | None) -> ResponseHandler:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            await self.aclose()
            self._loop = loop
        while True:
            while self._idle:
                connection, since = self._idle.pop()  # the most recent: the warmest
                # Not one the endpoint closed, nor one it sent more on while idle (an
                # answer to no request: read as the next call's, it would be a forged one).
                usable = connection.is_connected() and not connection.should_close
                if usable and loop.time() - since < self._keepalive:
                    self._busy.add(connection)
                    return connection
                connection.close()
            if len(self._busy) < self._limit:
                break
            waiter = loop.create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            finally:
                with suppress(ValueError):
                    self._waiting.remove(waiter)
        connection = aiohttp_compat.model_connection(loop)
        self._busy.add(connection)  # counted while it connects
        try:
            async with asyncio.timeout(connect_timeout):
                await loop.create_connection(
                    lambda: connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                )
        except BaseException:
            self.drop(connection)
            raise
        return connection

    def _wake(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _close_idle(self) -> None:
        """Close the connections idle for ``keepalive`` seconds; look again later while
        some are left."""
        self._prune = None
        if self._loop is None:
            return
        oldest = self._loop.time() - self._keepalive
        while self._idle and self._idle[0][1] <= oldest:
            self._idle.popleft()[0].close()
        if self._idle:
            wait = self._idle[0][1] - oldest
            self._prune = self._loop.call_later(wait, self._close_idle)


def _lines(headers: Mapping[str, str]) -> list[str]:
    return [f"{name}: {value}\r\n" for name, value in headers.items()]


def _request(head: bytes, headers: Mapping[str, str] | None, body: bytes) -> list[bytes]:
    """The request's bytes: the endpoint's head, the call's own headers, the body."""
    parts = [head]
    if headers:
        problem = _unsendable(headers)
        if problem:
            raise UnsendableHeader(problem)
        parts.append("".join(_lines(headers)).encode())
    parts += [b"Content-Length: %d\r\n\r\n" % len(body), body]
    return parts


def _unsendable(headers: Mapping[str, str]) -> str | None:
    """Why these headers cannot be sent (a line break would start a header of its own);
    None when they can."""
    for name, value in headers.items():
        if not name or any(bad in name or bad in value for bad in _BAD_HEADER) or ":" in name:
            return f"the header {name!r} holds a line break or is not a header name"
    return None
