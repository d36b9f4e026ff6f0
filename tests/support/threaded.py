"""The service on a real aiohttp server in a thread of its own, for synchronous clients
(schemathesis drives ``requests``) and for raw sockets.

    with served_in_thread(lambda: create_app(config)) as served:
        requests.get(served.url + "/healthz")
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")


@dataclass(frozen=True)
class ServedApp:
    app: web.Application
    host: str
    port: int
    loop: asyncio.AbstractEventLoop

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def call(self, work: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
        """Run ``work()`` on the server's loop and wait for its result."""

        async def run() -> T:
            return await work()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)


@contextmanager
def served_in_thread(
    make_app: Callable[[], web.Application], **handler_options: Any
) -> Iterator[ServedApp]:
    """Serve ``make_app()`` on 127.0.0.1 (a free port) until the block ends.

    ``handler_options`` go to aiohttp's request handler (``keepalive_timeout`` …).
    """
    loop = asyncio.new_event_loop()
    started: Future[tuple[web.AppRunner, ServedApp]] = Future()

    async def start() -> None:
        app = make_app()
        runner = web.AppRunner(app, access_log=None, **handler_options)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        started.set_result((runner, ServedApp(app, host, port, loop)))

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:
            started.set_exception(exc)
            return
        loop.run_forever()

    thread = threading.Thread(target=main, name="served-app", daemon=True)
    thread.start()
    runner, served = started.result(timeout=30)
    try:
        yield served
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


@contextmanager
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own until the block ends: synchronous
    code (a Hypothesis test) hands it work with ``asyncio.run_coroutine_threadsafe``."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop", daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
