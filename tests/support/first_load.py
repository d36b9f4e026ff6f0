"""Forcing the interleavings of a Nacos source's first load, on the real client and server.

Watching a group makes the server announce every dataId already in it (the fuzzy watch's
``FUZZY_WATCH_INIT_NOTIFY``, tens of milliseconds after the watch), and those notices race
the load's own reads: which lands first depends on the machine. ``NoticeDuringRead`` takes
the luck out: it is the real ``NacosClient``, except that it holds back the server's notices
about one dataId until the first read of it, and hands them to the watcher while that read
is in flight. ``ahead`` runs before that read goes to the server, ``meanwhile`` once it has
its answer (a publish there is one the load's listing did not see).

    client = NoticeDuringRead(settings, group, "bot.agent.yaml")
    source = NacosSource(client, group, ...)
    await source.start(deliveries.record)
    assert client.handed_over
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dynagent.config import NacosConfig
from dynagent.nacos._fuzzy import FuzzyWatch, GroupChange, OnGroupChange
from dynagent.nacos.client import ConfigRead, NacosClient
from dynagent.sources.base import Document

Step = Callable[[], Awaitable[None]]


class NoticeDuringRead(NacosClient):
    """The real client, with the fuzzy watch's notices about ``group``/``data_id`` handed
    over only while the first read of that dataId is in flight."""

    def __init__(
        self,
        settings: NacosConfig,
        group: str,
        data_id: str,
        *,
        ahead: Step | None = None,
        meanwhile: Step | None = None,
    ) -> None:
        super().__init__(settings)
        self.target = (group, data_id)
        self.ahead = ahead
        """Run before the held read goes to the server."""
        self.meanwhile = meanwhile
        """Run once the held read has its answer, before the notices are handed over."""
        self.handed_over = 0
        """Notices handed to the watcher while the read was in flight."""
        self._noticed = asyncio.Event()
        self._held: list[tuple[OnGroupChange, GroupChange]] = []
        self._reading = False
        self._handed = False
        self._watch: FuzzyWatch | None = None
        self._seen: list[GroupChange] = []

    async def watch_group(self, group: str, on_change: OnGroupChange) -> FuzzyWatch | None:
        def hold(change: GroupChange) -> None:
            self._seen.append(change)
            if self._handed or (change.group, change.data_id) != self.target:
                on_change(change)
                return
            self._held.append((on_change, change))
            self._noticed.set()

        self._watch = await super().watch_group(group, hold)
        return self._watch

    async def read(self, data_id: str, group: str) -> ConfigRead | None:
        if self._reading or (group, data_id) != self.target:
            return await super().read(data_id, group)
        self._reading = True
        await self._announced()
        await self._before_read()
        if self.ahead is not None:
            await self.ahead()
        read = await super().read(data_id, group)
        if self.meanwhile is not None:
            await self.meanwhile()
        self._handed = True  # from here on notices pass straight through
        for on_change, change in self._held:
            on_change(change)
        self.handed_over = len(self._held)
        return read

    async def _before_read(self) -> None:
        return None

    async def _announced(self) -> None:
        """Until the server has announced the target (its notice held back so far)."""
        try:
            async with asyncio.timeout(10):
                await self._noticed.wait()
        except TimeoutError:
            active = self._watch is not None and self._watch.active
            raise AssertionError(
                f"no notice about {self.target} in 10 s (watch active: {active}; "
                f"notices seen: {self._seen})"
            ) from None


class NoticeDuringGroupLoad(NoticeDuringRead):
    """``NoticeDuringRead`` for a factory that lists groups (Spring AI Alibaba): its
    listing is answered only once the watch has announced the target (which may start the
    group's load on the side), and the held read goes out only once that listing is
    answered, so the group's load cannot be over before the factory has its list."""

    def __init__(
        self,
        settings: NacosConfig,
        group: str,
        data_id: str,
        *,
        ahead: Step | None = None,
        meanwhile: Step | None = None,
    ) -> None:
        super().__init__(settings, group, data_id, ahead=ahead, meanwhile=meanwhile)
        self._listed = asyncio.Event()

    async def list_groups(self, prefix: str) -> dict[str, dict[str, str]]:
        await self._announced()
        found = await super().list_groups(prefix)
        self._listed.set()
        return found

    async def _before_read(self) -> None:
        await self._listed.wait()


async def until_served(settings: NacosConfig, group: str, data_id: str, text: str) -> None:
    """Wait until the server hands ``text`` to a client of ``settings`` (reads trail a
    publish by ~0.1 s): the tests start their sources on a settled server, so that what
    they see comes from the interleaving they force, not from that lag."""
    client = NacosClient(settings)
    try:
        await client.connect()
        async with asyncio.timeout(10):
            while (read := await client.read(data_id, group)) is None or read.content != text:
                await asyncio.sleep(0.05)  # polling the server's view, not a reload
    finally:
        await client.close()


async def fuzzy_watch_works(settings: NacosConfig) -> None:
    """Wait until the server accepts a fuzzy watch. One just (re)started refuses the first
    for a moment ("Param check invalid:null" in its plugin-control.log, within a second of
    the start; a source then finds new dataIds by listing), and the interleavings forced
    here need the watch's notices."""
    client = NacosClient(settings)
    try:
        await client.connect()
        async with asyncio.timeout(10):
            while (watch := await client.watch_group(settings.group, lambda _: None)) is None:
                await asyncio.sleep(0.1)  # the server warming up, not a reload
        await watch.stop()
    finally:
        await client.close()


class Deliveries:
    """What a source handed on, in order: ``(dataId, text, gray)``."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str | None, str | None]] = []
        self._changed = asyncio.Event()

    async def record(self, document: Document) -> bool:
        self.log.append((document.key, document.text, document.info.details.get("gray")))
        self._changed.set()
        return True

    async def wait_for(self, count: int, within: float = 10.0) -> None:
        """Until ``count`` documents were handed on (woken by each, never polled)."""
        async with asyncio.timeout(within):
            while len(self.log) < count:
                self._changed.clear()
                await self._changed.wait()
