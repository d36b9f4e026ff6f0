"""What the rollout's watchers (``analyses.py``, ``budgets.py``) share: a background loop
that looks at the served canaries every ``TICK`` seconds, and one HTTP session (for
Prometheus) that lives as long as the loop."""

from __future__ import annotations

import asyncio

import aiohttp

TICK = 0.1
"""Seconds between two looks; each canary's own ``interval`` decides when it is checked."""


class Ticking:
    """Started with the service (``start``), stopped with it (``aclose``); a subclass's
    ``_look`` is what happens at each tick."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        if self._task is None:
            self._session = aiohttp.ClientSession()
            self._task = asyncio.get_running_loop().create_task(self._tick())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            await self._look()

    async def _look(self) -> None:
        raise NotImplementedError
