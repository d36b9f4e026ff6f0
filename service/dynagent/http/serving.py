"""Serve the app on its port until told to stop, and stop without dropping a request.

On SIGTERM the service is a lame duck for ``listen.lame_duck_seconds``: ``/readyz``
answers 503 and every response closes its connection, but the port stays open and every
request is served. A balancer that learns only from probes or refused connections (nginx
without active health checks) goes on sending meanwhile, and the kept-alive connections it
holds get used up instead of being closed under a request it has just sent (it does not
send a POST twice). Then the port closes. The connections already waiting in the kernel's
accept queue are accepted and served first: closing the port would reset them, after the
balancer had sent its request on them. A connection after that is refused, which a
balancer safely retries on another replica since nothing was sent. A connection that
may still get a request — one that has read none since SIGTERM: just accepted, with its
request on its way; kept idle by the balancer all through the lame duck; or kept after an
answer that began before SIGTERM, without ``Connection: close`` — is served for up to
``listen.lame_duck_seconds`` more, until it has a request whose answer closes it, or is
closed: closing it would drop a request sent on it at that moment, which a balancer does
not retry. Running requests get ``listen.drain_seconds`` (``dynagent.core.drain``), then
the process exits.

SIGINT (Ctrl-C at a terminal), or a second signal, skips the lame-duck time.

The loop is asyncio's, or uvloop's with ``listen.event_loop: uvloop`` (3-8 % less CPU per
served request; why it is not the default is said there).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web
from loguru import logger

from dynagent._compat import aiohttp as aiohttp_compat
from dynagent.exceptions import StartupError
from dynagent.http.middleware.errors import error_response
from dynagent.http.state import SERVICE

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
KEEPALIVE_SECONDS = 75.0
"""An idle kept-alive connection is closed after this long (aiohttp's ``run_app`` default;
a balancer keeping connections closes its idle ones sooner, see ``scripts/fleet.sh``)."""
STOPPING_POLL_SECONDS = 0.01
"""How often a stopping service looks again at the connections that may still get a
request (aiohttp has no event for a request's arrival)."""


def run(app: web.Application, listening: socket.socket, on_started: Callable[[], None]) -> None:
    """Serve ``app`` on the bound socket until SIGINT/SIGTERM, then stop as above."""
    factory = loop_factory(app[SERVICE].config.listen.event_loop)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(app, listening, on_started))


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the serving loop for ``listen.event_loop`` (None: asyncio's default)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        raise StartupError(
            "listen.event_loop is uvloop, which is not installed here (it is not built for "
            "Windows): pip install uvloop, or set listen.event_loop to asyncio"
        ) from None
    return uvloop.new_event_loop


async def _serve(
    app: web.Application, listening: socket.socket, on_started: Callable[[], None]
) -> None:
    loop = asyncio.get_running_loop()
    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, signals.put_nowait, signum)
    listen = app[SERVICE].config.listen
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        shutdown_timeout=listen.drain_seconds,
        keepalive_timeout=KEEPALIVE_SECONDS,
    )
    try:
        if not await _unless_signalled(runner.setup(), signals):
            return  # stopped while the sources were loading
        assert runner.server is not None
        aiohttp_compat.answer_protocol_errors(runner.server, protocol_error)
        site = web.SockSite(runner, listening)
        await site.start()
        on_started()
        lame_duck = listen.lame_duck_seconds if await signals.get() == signal.SIGTERM else 0.0
        at_stop = _AtStop(runner.server)
        if lame_duck:
            await app[SERVICE].begin_stopping()
            if not await _unless_signalled(asyncio.sleep(lame_duck), signals):
                lame_duck = 0.0  # a second signal: stop now
        await _close_port(listening, site, runner.server)
        if lame_duck:
            waited = _until_requests_arrive(runner.server, at_stop, lame_duck)
            await _unless_signalled(waited, signals)
    finally:
        await runner.cleanup()  # closes idle connections, drains, runs the cleanup contexts
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


_UNREADABLE = {
    "LineTooLong": "a line of the request (its first line or a header) is longer than the "
    "server reads (8190 bytes)",
    "BadHttpMethod": "this is not an HTTP request (its method is not one)",
    "BadStatusLine": "the first line of the request is malformed",
    "InvalidHeader": "a header of the request is malformed",
    "InvalidURLError": "the URL of the request is malformed",
    "ContentLengthError": "the body's length is malformed (Content-Length)",
    "TransferEncodingError": "the body's framing is malformed (Transfer-Encoding)",
}


def protocol_error(status: int, exc: BaseException | None) -> web.Response:
    """The JSON error for a request aiohttp could not read (a 400), or for what escaped
    every handler (a 500, which the error middleware leaves no way to)."""
    if status >= 500:
        return error_response("internal", "internal error", status)
    name = type(exc).__name__ if exc is not None else ""
    message = _UNREADABLE.get(name, "the request is not valid HTTP/1.1")
    return error_response("bad_request", message, status)


async def _unless_signalled(step: Awaitable[None], signals: asyncio.Queue[signal.Signals]) -> bool:
    """Run ``step`` to its end (True), or cancel it when a stop signal comes first (False)."""
    running = asyncio.ensure_future(step)
    signalled = asyncio.ensure_future(signals.get())
    try:
        await asyncio.wait((running, signalled), return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
    if running.done():
        if signalled.done() and not signalled.cancelled():
            signals.put_nowait(signalled.result())  # both at once: the signal still counts
        running.result()  # a failed start raises here
        return True
    running.cancel()
    try:
        await running
    except asyncio.CancelledError:
        if (task := asyncio.current_task()) is not None and task.cancelling():
            raise
    return False


async def _close_port(
    listening: socket.socket, site: web.BaseSite, server: web.Server | None
) -> None:
    """Accept the connections waiting on ``listening``, close it, then serve them."""
    waiting = _accept_waiting(listening)
    await site.stop()  # closes the socket before any other callback runs: none slips in
    if server is None:
        return
    loop = asyncio.get_running_loop()
    for connection in waiting:
        await loop.connect_accepted_socket(server, connection)
    # Their requests, already in the socket buffers, are read in the loop's next turn:
    # before the shutdown closes the connections that have none.
    await asyncio.sleep(0)


class _AtStop:
    """The connections open when the service was told to stop, and how many requests each
    had read then."""

    def __init__(self, server: web.Server | None) -> None:
        self._read = {
            c: aiohttp_compat.requests_read(c)
            for c in (server.connections if server is not None else ())
        }

    def may_get_a_request(self, connection: web.RequestHandler) -> bool:
        """Whether closing ``connection`` now could drop a request its client is sending:
        whether it has read none since the stop. One opened since, whose first request is
        on its way; one the client kept idle all along (a balancer sends on its kept
        connections at any moment, the oldest last); one kept after an answer that began
        before the stop (without ``Connection: close``). Not one that read a request since:
        that request's answer closes it."""
        read = self._read.get(connection)
        if read is None:
            return aiohttp_compat.carries_no_request(connection)
        return aiohttp_compat.requests_read(connection) == read


async def _until_requests_arrive(
    server: web.Server | None, at_stop: _AtStop, within: float
) -> None:
    """Wait, at most ``within`` s, until no open connection may still get a request
    (each has one whose answer closes it, or is closed)."""
    if server is None:
        return
    waiting = sum(map(at_stop.may_get_a_request, server.connections))
    if not waiting:
        return
    logger.info(
        "stopping: the port is closed; {} open connection(s) may still get a request, "
        "served for up to {:g} s",
        waiting,
        within,
    )
    with contextlib.suppress(TimeoutError):  # past the time: closed with the rest
        async with asyncio.timeout(within):
            # aiohttp has no event for a connection's request nor for its closing
            while any(map(at_stop.may_get_a_request, server.connections)):  # noqa: ASYNC110
                await asyncio.sleep(STOPPING_POLL_SECONDS)


def _accept_waiting(listening: socket.socket) -> list[socket.socket]:
    accepted: list[socket.socket] = []
    while True:
        try:
            connection, _ = listening.accept()
        except OSError:  # BlockingIOError: no more waiting
            return accepted
        connection.setblocking(False)
        accepted.append(connection)
