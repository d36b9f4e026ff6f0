"""aiohttp's internals, reached in three places.

- A stream's headers sent with its first event (``http/sse.py``): aiohttp sends them on
  their own at ``prepare`` unless a response class says otherwise
  (``_send_headers_immediately``).
- Whether a served connection carries a request, and how many it has read
  (``http/serving.py``, when it stops): aiohttp's server closes every connection without
  a running handler, including one whose request has arrived but whose handler has not
  started yet.
- A request aiohttp's server could not read (a header line too long, a line that is not
  HTTP): it answers that itself, before any handler or middleware, in plain text; the
  service answers it in its JSON error shape instead (``http/serving.py``).
- A client connection paused under its feet, below.
- The model calls' connections (``models/_http.py``): aiohttp's client protocol with two
  of its per-read costs taken out (``model_connection``).

Pacing the reads of a model's flood (``models/_sse.py``) stops the socket of an aiohttp
response from being read for a moment: the kernel gathers what arrives, and one read
takes it all. aiohttp offers no API for that; its client protocol pauses and resumes the
same transport for its own flow control (when its buffer fills), so this relies on how
the two interleave: nothing is paused when aiohttp has paused reading itself, and reading
resumes before aiohttp's buffer is read again.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from dynagent._compat.versions import Tested

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.client_proto import ResponseHandler

TESTED = Tested("aiohttp", "3.14.5", "3.15")
PRIVATE_PARTS = (
    "aiohttp.client_reqrep:ClientResponse.connection",
    "aiohttp.connector:Connection.transport",
    "aiohttp.web_response:StreamResponse._send_headers_immediately",
    "aiohttp.web_protocol:RequestHandler._request_in_progress",
    "aiohttp.web_protocol:RequestHandler._messages",
    "aiohttp.web_protocol:RequestHandler._request_count",
    "aiohttp.web_protocol:RequestHandler.handle_error",
    "aiohttp.base_protocol:BaseProtocol._loop",
    "aiohttp.base_protocol:BaseProtocol._reading_paused",
    "aiohttp.client_proto:ResponseHandler._reschedule_timeout",
    "aiohttp.client_proto:ResponseHandler._drop_timeout",
    "aiohttp.client_proto:ResponseHandler._on_read_timeout",
)
"""What this module reaches, as ``module:attribute``; and two attributes a
``ResponseHandler`` sets on itself, ``_read_timeout`` and ``_read_timeout_handle``
(``tests/runtime/test_compat.py`` looks for them on one)."""


def check() -> None:
    TESTED.check()


def stream_sending_headers_late(headers: Mapping[str, str]) -> web.StreamResponse:
    """A stream whose headers leave with the first write after ``prepare``, in one send."""
    return _late_headers_class()(headers=headers)


@functools.cache
def _late_headers_class() -> type[web.StreamResponse]:
    from aiohttp import web

    class StreamSendingHeadersLate(web.StreamResponse):
        _send_headers_immediately = False

    return StreamSendingHeadersLate


ProtocolErrorAnswer = Callable[[int, "BaseException | None"], "web.Response"]
"""The answer to a request aiohttp's server could not read (status, what it raised)."""


def answer_protocol_errors(server: web.Server, answer: ProtocolErrorAnswer) -> None:
    """Make the connections ``server`` makes from now on answer with ``answer`` a request
    they cannot read (aiohttp: ``handle_error``), one line logged, no traceback."""
    server.__class__ = _answering_server(type(server), answer)


def _answering_server(base: type[web.Server], answer: ProtocolErrorAnswer) -> type[web.Server]:
    from aiohttp import web
    from loguru import logger

    class AnsweringHandler(web.RequestHandler):
        __slots__ = ()  # the layout of aiohttp's, whose instances take this class

        def handle_error(
            self,
            request: web.BaseRequest,
            status: int = 500,
            exc: BaseException | None = None,
            message: str | None = None,
        ) -> web.StreamResponse:
            if request.writer.output_size > 0:  # an answer is on its way: nothing to add
                raise ConnectionError("an answer was sent already; the connection is broken")
            logger.info(
                "an unreadable request from {} answered {}: {}",
                request.remote,
                status,
                type(exc).__name__ if exc else "error",
            )
            response = answer(status, exc)
            response.force_close()
            return response

    class AnsweringServer(base):  # type: ignore[misc, valid-type]
        def __call__(self) -> web.RequestHandler:
            handler: web.RequestHandler = super().__call__()
            handler.__class__ = AnsweringHandler
            return handler

    return AnsweringServer


def carries_no_request(connection: web.RequestHandler) -> bool:
    """Whether a served connection has no request on it: none running, none read and
    waiting for its handler."""
    return not connection._request_in_progress and not connection._messages


def requests_read(connection: web.RequestHandler) -> int:
    """How many requests a served connection has read."""
    count: int = connection._request_count
    return count


class ReadResponse(Protocol):
    """What ``leave_unread`` reads of a model's answer (aiohttp's ``ClientResponse`` or a
    model connection's): the connection, whose ``transport`` it pauses."""

    @property
    def connection(self) -> Any: ...


async def leave_unread(response: ReadResponse, seconds: float) -> None:
    """Leave the socket of ``response`` unread for ``seconds``. Nothing is held (nor
    waited for) when aiohttp paused reading itself or the connection is gone."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    if transport is None or not transport.is_reading():
        return
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()


def model_connection(loop: asyncio.AbstractEventLoop) -> ResponseHandler:
    """A new connection protocol for model calls (``models/_http.py``)."""
    return _model_connection_class()(loop)


@functools.cache
def _model_connection_class() -> type[ResponseHandler]:
    from aiohttp.client_proto import ResponseHandler

    class _Connection(ResponseHandler):
        """aiohttp's client protocol, with two of its per-read costs taken out.

        - Its ``StreamReader`` asks the protocol to resume reading after every read that
          leaves its buffer low, paused or not; each ask fed the parser an empty block and
          asked the transport to resume: a dozen calls per read of a stream. Only a paused
          protocol resumes now.
        - Its per-read timeout moved a timer on every block that arrived (a cancelled timer
          and a new one). One timer now runs per wait: when it fires it looks at the time of
          the last read, and waits again from there if a block came since.
        """

        _read_at = 0.0

        def resume_reading(self, resume_parser: bool = True) -> None:
            if self._reading_paused:
                super().resume_reading(resume_parser)

        def _reschedule_timeout(self) -> None:
            timeout = self._read_timeout
            if not timeout:
                self._drop_timeout()
                return
            self._read_at = self._loop.time()
            if self._read_timeout_handle is None:
                self._read_timeout_handle = self._loop.call_at(
                    self._read_at + timeout, self._look_at_reads
                )

        def _look_at_reads(self) -> None:
            self._read_timeout_handle = None
            timeout = self._read_timeout
            if not timeout:
                return
            due = self._read_at + timeout
            if self._loop.time() < due:
                self._read_timeout_handle = self._loop.call_at(due, self._look_at_reads)
            else:
                self._on_read_timeout()

    return _Connection
