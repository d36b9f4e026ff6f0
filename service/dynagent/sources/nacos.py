"""Agent documents in one Nacos namespace and group.

Changes arrive two ways: the SDK's gRPC push (fast: tens of milliseconds) and
our own reconciliation, which lists the group's md5s every ``poll_seconds``.
Reconciliation discovers new dataIds (the SDK cannot list), notices deletions,
and catches up after a Nacos restart without waiting for the SDK's 5-minute
full sync. Listener callbacks only queue the change: nothing blocks the SDK.

Every document applied is also written to a local snapshot, so that a
restart while Nacos is down serves the last good definitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from pathlib import Path

from loguru import logger

from ..agent import SourceInfo
from ..logs import state_changed
from ..spec import format_of
from ._nacos_client import NacosClient, NacosError
from .base import Document, OnChange

FETCH_CONCURRENCY = 16
"""Configs read from Nacos at once while reconciling (a first load reads every dataId)."""

HealthCallback = Callable[[str | None], None]
"""Told the reason the source is degraded, or None when it is healthy again."""


def content_md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


class Snapshot:
    """Dynagent's own last-good copy of a group's documents, one file per dataId."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def save(self, data_id: str, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.directory / f".{data_id}.tmp"
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(self.directory / data_id)

    def delete(self, data_id: str) -> None:
        (self.directory / data_id).unlink(missing_ok=True)

    def load(self) -> tuple[dict[str, str], dict[str, str]]:
        """(the documents by dataId, the files that could not be read and why).

        One unreadable file (truncated mid-character, unreadable) is skipped, never the
        reason the others are not served: the snapshot exists for the bad day."""
        documents: dict[str, str] = {}
        unreadable: dict[str, str] = {}
        if not self.directory.is_dir():
            return documents, unreadable
        for path in sorted(self.directory.iterdir()):
            if path.name.startswith(".") or not path.is_file():
                continue
            try:
                documents[path.name] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                unreadable[path.name] = f"not valid UTF-8 at byte {exc.start}"
            except OSError as exc:
                unreadable[path.name] = exc.strerror or type(exc).__name__
        return documents, unreadable


class NacosSource:
    def __init__(
        self,
        client: NacosClient,
        group: str,
        *,
        accepts: Callable[[str], bool],
        snapshot: Snapshot,
        poll_seconds: float = 2.0,
        on_health: HealthCallback = lambda reason: None,
    ) -> None:
        self.client = client
        self.group = group
        self.accepts = accepts
        self.snapshot = snapshot
        self.poll_seconds = poll_seconds
        self.on_health = on_health
        self._md5: dict[str, str] = {}
        """md5 of what was last handed on, per dataId."""
        self._listening: set[str] = set()
        self._pushes: dict[str, int] = {}
        """Pushes received per dataId: a read older than the latest push is dropped."""
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._on_change: OnChange | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.degraded: str | None = None

    @property
    def location(self) -> str:
        return f"{self.client.namespace or 'public'}/{self.group}"

    async def start(self, on_change: OnChange) -> None:
        self._on_change = on_change
        try:
            await self.client.connect()
            await self.reconcile()
        except NacosError as exc:
            await self._serve_snapshot(str(exc))
        self._tasks = [
            asyncio.create_task(self._pump(), name=f"nacos-listen {self.location}"),
            asyncio.create_task(self._poll(), name=f"nacos-reconcile {self.location}"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for data_id in list(self._listening):
            await self.client.unlisten(data_id, self.group, self._listener)
        await self.client.close()

    async def _listener(self, tenant: str, group: str, data_id: str, content: str) -> None:
        # Runs inside the SDK's listen task: hand over and return at once.
        self._pushes[data_id] = self._pushes.get(data_id, 0) + 1
        self._queue.put_nowait((data_id, content))

    async def _pump(self) -> None:
        while True:
            data_id, content = await self._queue.get()
            if content:
                await self._deliver(data_id, content)
            else:
                # An empty push means deleted; confirm, since a read error looks the same.
                with contextlib.suppress(NacosError):
                    await self._deliver(data_id, await self.client.get(data_id, self.group))

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.client.connect()
                await self.reconcile()
            except NacosError as exc:
                self._set_degraded(f"Nacos unreachable, serving last known definitions: {exc}")
            except Exception:  # keep polling whatever happens
                logger.exception("reconciling {} failed", self.location)

    async def reconcile(self) -> None:
        """Bring every accepted dataId in line with the server (md5 comparison)."""
        listing = {
            k: v for k, v in (await self.client.list_group(self.group)).items() if self.accepts(k)
        }
        stale = {
            data_id: md5
            for data_id, md5 in sorted(listing.items())
            if self._md5.get(data_id) != md5 or data_id not in self._listening
        }
        try:
            await self._fetch_and_deliver(stale)
        finally:
            if stale:
                self.client.announce_listeners()
        for data_id in sorted(set(self._md5) - set(listing)):
            await self._deliver(data_id, None)
        self._set_degraded(None)

    async def _fetch_and_deliver(self, listed: dict[str, str]) -> None:
        """Read the ``listed`` dataIds concurrently (``FETCH_CONCURRENCY`` at once: a first
        load of 1,000 agents waits on 1,000 round trips) and deliver them in order, each as
        soon as it and those before it are read. A read that a push overtook is dropped,
        and so is one whose content is not what the listing's md5 says (reads lag writes by
        ~0.1 s, so it may be older than a push already applied); the next reconcile reads it
        again. One dataId never goes back in time."""
        data_ids = list(listed)
        gate = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def read(data_id: str) -> tuple[int, str | None]:
            async with gate:
                pushes = self._pushes.get(data_id, 0)
                return pushes, await self.client.get(data_id, self.group)

        reads = [asyncio.ensure_future(read(data_id)) for data_id in data_ids]
        try:
            for data_id, pending in zip(data_ids, reads, strict=True):
                pushes, text = await pending
                # None for a dataId the listing holds is a read that trails a re-creation
                # (reads lag writes by ~0.1 s), not a deletion: the listing decides those.
                current = text is not None and content_md5(text) == listed[data_id]
                if current and self._pushes.get(data_id, 0) == pushes:
                    await self._deliver(data_id, text, announce=False)
        finally:
            for pending in reads:
                pending.cancel()
            await asyncio.gather(*reads, return_exceptions=True)

    async def _deliver(self, data_id: str, text: str | None, *, announce: bool = True) -> None:
        async with self._lock:
            if text is None:
                if self._md5.pop(data_id, None) is None:
                    return
                self.snapshot.delete(data_id)
                self._listening.discard(data_id)
                await self.client.unlisten(data_id, self.group, self._listener)
            else:
                if data_id not in self._listening:
                    await self.client.listen(data_id, self.group, self._listener, announce=announce)
                    self._listening.add(data_id)
                if self._md5.get(data_id) == content_md5(text):
                    return
                self._md5[data_id] = content_md5(text)
                self.snapshot.save(data_id, text)
            assert self._on_change is not None
            await self._on_change(self._document(data_id, text))

    def _document(self, data_id: str, text: str | None, *, from_snapshot: bool = False) -> Document:
        details = {
            "namespace": self.client.namespace or "public",
            "group": self.group,
            "data_id": data_id,
        }
        if text is not None:
            details["md5"] = content_md5(text)
        if from_snapshot:
            details["from"] = "snapshot"
        info = SourceInfo("nacos", f"{self.location}/{data_id}", details)
        return Document(data_id, text, format_of(data_id), info)

    async def _serve_snapshot(self, reason: str) -> None:
        documents, unreadable = self.snapshot.load()
        saved = {k: v for k, v in documents.items() if self.accepts(k)}
        logger.error(
            "Nacos source {} unavailable at start ({}); serving {} definitions from the "
            "snapshot in {}",
            self.location,
            reason,
            len(saved),
            self.snapshot.directory,
        )
        skipped = "; ".join(f"{name} ({why})" for name, why in unreadable.items())
        if skipped:
            logger.error(
                "Nacos source {}: unreadable snapshot files skipped: {}", self.location, skipped
            )
            reason += f"; unreadable snapshot files skipped: {skipped}"
        self._set_degraded(f"Nacos unreachable at start, serving snapshot: {reason}")
        assert self._on_change is not None
        for data_id, text in saved.items():
            # Marked, not the real md5: the first reconcile with Nacos re-delivers even
            # unchanged content, so the status stops saying "from snapshot".
            self._md5[data_id] = f"snapshot:{content_md5(text)}"
            await self._on_change(self._document(data_id, text, from_snapshot=True))

    def _set_degraded(self, reason: str | None) -> None:
        if reason == self.degraded:
            return
        state_changed()  # the SDK's repeated connection errors may show once for this state
        if reason is None:
            logger.info("Nacos source {} is reachable again", self.location)
        elif self.degraded is None:
            logger.warning("Nacos source {}: {}", self.location, reason)
        self.degraded = reason
        self.on_health(reason)
