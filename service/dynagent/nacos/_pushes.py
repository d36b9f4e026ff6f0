"""What the Nacos source's pump works through: one typed item per change a push brings,
the turns that keep two reads of one dataId from racing, and the ordered load of a
listing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pushed:
    """The SDK pushed new content of a dataId this source listens to."""

    data_id: str
    content: str


@dataclass(frozen=True, slots=True)
class Deleted:
    """A dataId was deleted (an empty push, or a fuzzy-watch notice); the pump confirms it
    with a read, since a failed read looks the same."""

    data_id: str


@dataclass(frozen=True, slots=True)
class Announced:
    """The fuzzy watch announced a dataId not listened to yet (new or changed): read it."""

    data_id: str


Push = Pushed | Deleted | Announced
"""An item of the source's queue, handed over by a callback that must not block."""


class Turns:
    """One holder at a time per key, with no lock kept for keys nobody holds."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def of(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks.pop(key)
            if users > 1:
                self._locks[key] = (lock, users - 1)


Load = Callable[[str, str, asyncio.Semaphore, "asyncio.Future[None] | None"], Awaitable[None]]
"""Reads one listed ``(dataId, md5)`` under the gate, then delivers it once the load
before it (None for the first) is done."""


async def in_listed_order(listed: dict[str, str], load: Load, concurrency: int) -> None:
    """Read the ``listed`` dataIds concurrently (``concurrency`` at once: a first load of
    1,000 agents waits on 1,000 round trips) and deliver them in order, each as soon as it
    and those before it are read."""
    gate = asyncio.Semaphore(concurrency)
    loads: list[asyncio.Future[None]] = []
    for data_id, md5 in listed.items():
        before = loads[-1] if loads else None
        loads.append(asyncio.ensure_future(load(data_id, md5, gate, before)))
    try:
        for each in loads:
            await each
    finally:
        for each in loads:
            each.cancel()
        await asyncio.gather(*loads, return_exceptions=True)
