"""An aiohttp app served on loopback inside the test's own event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web


@asynccontextmanager
async def served(app: web.Application, **runner_options: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) until the block ends; yields its base URL,
    ``http://127.0.0.1:PORT``. ``runner_options`` go to ``web.AppRunner``."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
