"""Agent documents in one Nacos namespace and group.

Changes arrive three ways: the SDK's gRPC push of a known dataId's content, the Nacos 3
fuzzy watch of the whole group (a new or deleted dataId, pushed in tens of milliseconds;
``_fuzzy``), and our own reconciliation, which lists the group's md5s every
``poll_seconds``: a safety net that also catches up after a Nacos restart, and the only way
to find new dataIds on a server without fuzzy watch (then it runs at least every
``FALLBACK_POLL_SECONDS``). Push callbacks only queue the change: nothing blocks the SDK.

Reads of one dataId never race: a load's read and the read a fuzzy-watch notice asks for
take turns (``_turns``), and the notice's read is skipped once the dataId is served. Its
listener then keeps it current: the SDK's first announcement of a listener compares md5s
with the server and pushes any newer content. So the watch's first notices, which announce
every dataId the load is reading, neither drop nor repeat a read, and ``start`` returns
with every listed dataId handed on.

A dataId never goes back in time: a read modified before the version applied (a cluster
node behind the raft log answers so after the leader is lost) is not served (``_order``);
a push is served as the server reads it now, with its modification time.

Only documents accepted go to the local snapshot, so that a restart while Nacos is down
serves what served before it, and one that finds only a refused edit in Nacos serves the
snapshot's copy with the refusal beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import assert_never

from loguru import logger

from dynagent.deadlines import cancelled
from dynagent.nacos._degraded import Degradation, HealthCallback, Kind
from dynagent.nacos._documents import annotated, config_document, refused
from dynagent.nacos._fuzzy import FuzzyWatch, GroupChange
from dynagent.nacos._grace import DeleteGrace
from dynagent.nacos._order import VersionOrder
from dynagent.nacos._pushes import Announced, Deleted, Push, Pushed, Turns, in_listed_order
from dynagent.nacos.client import ConfigRead, NacosClient, NacosError, content_md5
from dynagent.nacos.snapshot import Snapshot
from dynagent.runtime._health import SourceHealth
from dynagent.sources.base import Document, OnChange

FETCH_CONCURRENCY = 16
"""Configs read from Nacos at once while reconciling (a first load reads every dataId)."""

FALLBACK_POLL_SECONDS = 2.0
"""The longest list period while the server offers no fuzzy watch (new dataIds wait for it)."""

READ_RETRIES = (0.05, 0.1, 0.2, 0.4)
"""Pauses between reads of a dataId the fuzzy watch announced, while reads still lag."""


class NacosSource:
    def __init__(
        self,
        client: NacosClient,
        group: str,
        *,
        accepts: Callable[[str], bool],
        snapshot: Snapshot,
        poll_seconds: float = 30.0,
        on_health: HealthCallback = lambda reason: None,
        on_stale: Callable[[], None] = lambda: None,
        delete_grace_seconds: float = 0.0,
        watch: bool = True,
        owns_client: bool = True,
        verdicts: bool = True,
    ) -> None:
        self.client = client
        self.group = group
        self.accepts = accepts
        self.snapshot = snapshot
        self.poll_seconds = poll_seconds
        self.delete_grace_seconds = delete_grace_seconds
        self.watch = watch
        """Fuzzy-watch the group; False when the owner watches many groups at once and
        hands this source its changes (``group_changed``)."""
        self.owns_client = owns_client
        """Close the client on stop; False when sources share one."""
        self.verdicts = verdicts
        """The snapshot keeps only what the consumer says it accepted; False when it
        decides later (several documents make one agent) and calls ``keep`` itself."""
        self._grace = DeleteGrace(delete_grace_seconds, self.location)
        self.order = VersionOrder(self.location, on_stale)
        """Refuses a read older than the version applied (a cluster node behind the log),
        calling ``on_stale`` for each."""
        self._md5: dict[str, str] = {}
        """md5 of what was last handed on, per dataId."""
        self._listed: set[str] = set()
        """The dataIds the last listing (or the snapshot served at start) held."""
        self._listening: set[str] = set()
        self._kept: set[str] = set()
        """dataIds with a version accepted (or served from the snapshot) in this run."""
        self._unheld: set[str] = set()
        """dataIds the SDK cannot follow (``NacosClient.cannot_hold``): refused, unheard."""
        self._pushes: dict[str, int] = {}
        """Content pushes and deletions received per dataId: a read older than the latest is
        dropped, the pump applies what came. Fuzzy-watch notices carry no content and never
        count: they only ask for a read."""
        self._turns = Turns()
        """Per dataId: the load's read-and-deliver and a notice's read take turns."""
        self._queue: asyncio.Queue[Push] = asyncio.Queue()
        self._fuzzy: FuzzyWatch | None = None
        self._lock = asyncio.Lock()
        self._on_change: OnChange = refused
        self._tasks: list[asyncio.Task[None]] = []
        self.health = SourceHealth()
        """Shared by every document handed out: each agent's ``source.state``."""
        self._degradation = Degradation(self.location, self.health, on_health)

    def keys(self) -> set[str]:
        """The dataIds the group holds as far as this source knows, handed on or not."""
        return self._listed | set(self._md5)

    @property
    def location(self) -> str:
        return f"{self.client.namespace or 'public'}/{self.group}"

    async def start(self, on_change: OnChange) -> None:
        self._on_change = on_change
        try:
            await self._connect()
            await self.reconcile()
        except NacosError as exc:
            await self._serve_snapshot(str(exc))
        self._tasks = [
            asyncio.create_task(self._pump(), name=f"nacos-listen {self.location}"),
            asyncio.create_task(self._poll(), name=f"nacos-reconcile {self.location}"),
        ]

    async def _connect(self) -> None:
        """Connect (a no-op when connected) and, once per connection, watch the group."""
        await self.client.connect()
        if self._fuzzy is None and self.watch:
            self._fuzzy = await self.client.watch_group(self.group, self.group_changed)
            if self._fuzzy is None:
                logger.info(
                    "Nacos at {} offers no fuzzy watch: new dataIds in {} are found by listing",
                    self.client.settings.server_addr,
                    self.location,
                )

    @property
    def fuzzy_watching(self) -> bool:
        return not self.watch or (self._fuzzy is not None and self._fuzzy.active)

    def group_changed(self, change: GroupChange) -> None:
        """A dataId of the group appeared, changed or went (fuzzy watch push). Runs inside
        the SDK's stream reader; content pushes cover the dataIds listened to."""
        if not self.accepts(change.data_id):
            return
        if change.kind == "deleted":
            self._push(Deleted(change.data_id))
        elif change.data_id not in self._listening:
            self._queue.put_nowait(Announced(change.data_id))

    def _push(self, item: Pushed | Deleted) -> None:
        """Queue a content push or a deletion; a read started before it is then dropped."""
        self._pushes[item.data_id] = self._pushes.get(item.data_id, 0) + 1
        self._queue.put_nowait(item)

    async def stop(self) -> None:
        if self._fuzzy is not None:
            await self._fuzzy.stop()
        tasks = [*self._tasks, *self._grace.tasks.values()]
        await cancelled(*tasks)
        for data_id in list(self._listening):
            await self.client.unlisten(data_id, self.group, self._listener)
        if self.owns_client:
            await self.client.close()

    async def _listener(self, tenant: str, group: str, data_id: str, content: str) -> None:
        # Inside the SDK's listen task: hand over, return at once. Empty: deleted.
        self._push(Pushed(data_id, content) if content else Deleted(data_id))

    async def _pump(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._apply(item)
            except NacosError as exc:
                logger.warning("reading {}/{} failed: {}", self.location, item.data_id, exc)

    async def _apply(self, item: Push) -> None:
        match item:
            case Pushed(data_id, content):
                await self._deliver(
                    data_id, await annotated(self.client, self.group, data_id, content)
                )
            case Announced(data_id):
                await self._read_new(data_id)
            case Deleted(data_id):  # confirmed: a failed read looks the same
                await self._deliver(data_id, await self.client.read(data_id, self.group))
            case _:
                assert_never(item)

    async def _read_new(self, data_id: str) -> None:
        """Read a dataId the fuzzy watch announced; reads may trail the push by ~0.1 s.
        Waits for a load reading it; once it is served, its listener keeps it current."""
        async with self._turns.of(data_id):
            for pause in (*READ_RETRIES, None):
                if data_id in self._listening:
                    return
                pushes = self._pushes.get(data_id, 0)
                read = await self.client.read(data_id, self.group)
                if self._pushes.get(data_id, 0) != pushes:
                    return  # a deletion or a push came meanwhile: the pump applies it
                if read is not None:
                    await self._deliver(data_id, read)
                    return
                if pause is not None:
                    await asyncio.sleep(pause)

    async def _poll(self) -> None:
        while True:
            period = self.poll_seconds
            if not self.fuzzy_watching:
                period = min(period, FALLBACK_POLL_SECONDS)
            await asyncio.sleep(period)
            try:
                await self._connect()
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
        self._listed = set(listing)
        stale = {
            data_id: md5
            for data_id, md5 in sorted(listing.items())
            if self._md5.get(data_id) != md5
            or (data_id not in self._listening and data_id not in self._unheld)
        }
        try:
            await in_listed_order(stale, self._load, FETCH_CONCURRENCY)
        finally:
            if stale:
                self.client.announce_listeners()
        for data_id in sorted(set(self._md5) - set(listing)):
            await self._deliver(data_id, None)
        self._set_degraded(None, kind="snapshot")  # every listed dataId is read from Nacos
        self._set_degraded(None)

    async def _load(
        self,
        data_id: str,
        listed_md5: str,
        gate: asyncio.Semaphore,
        before: asyncio.Future[None] | None,
    ) -> None:
        """Read one listed dataId and deliver it once ``before`` (the one listed before it,
        ``in_listed_order``) is, in one turn: a fuzzy-watch notice about it waits instead
        of racing the read.

        A read that a push or deletion overtook is dropped: the pump applies what came. A
        dataId not followed yet (not served, or only from the snapshot) takes what it reads,
        whatever the md5: a gray version (beta, tag) never matches the listing's, which is
        the formal one's; a formal one that differs was published after the listing, or
        trails it — then the listener added now pushes the newer one, as the SDK's first
        announcement of it compares md5s with the server. A dataId followed already takes
        only what matches the listing (reads lag writes by ~0.1 s, so another may be older
        than a push applied); the next reconcile reads it again. So a dataId never goes
        back in time, and the first load serves every dataId it listed."""
        async with self._turns.of(data_id):
            async with gate:
                pushes = self._pushes.get(data_id, 0)
                read = await self.client.read(data_id, self.group)
            if before is not None:
                await before
            # None for a dataId the listing holds is a read that trails a re-creation
            # (reads lag writes by ~0.1 s), not a deletion: the listing decides those.
            if read is None or self._pushes.get(data_id, 0) != pushes:
                return
            if data_id not in self._listening or content_md5(read.content) == listed_md5:
                await self._deliver(data_id, read, announce=False)

    async def _deliver(
        self, data_id: str, read: ConfigRead | None, *, announce: bool = True, final: bool = False
    ) -> None:
        if read is None and self.delete_grace_seconds and not final:
            self._delete_later(data_id)
            return
        async with self._lock:
            if read is None:
                if self._md5.pop(data_id, None) is None:
                    return
                self.order.removed(data_id)
                await asyncio.to_thread(self.snapshot.delete, data_id)
                self._listening.discard(data_id)
                self._unheld.discard(data_id)
                self._listed.discard(data_id)
                await self.client.unlisten(data_id, self.group, self._listener)
                self._kept.discard(data_id)
                await self._on_change(self._document(data_id, read))
                return
            unheld = self.client.cannot_hold(data_id, self.group)
            if data_id not in self._listening and unheld is None:
                await self.client.listen(data_id, self.group, self._listener, announce=announce)
                self._listening.add(data_id)
            md5 = content_md5(read.content)
            if not self.order.admits(data_id, read, md5):
                return  # older than the version applied (``_order``): not even a re-creation
            self._grace.cancel(data_id)  # re-created within the grace period
            if self._md5.get(data_id) == md5:
                return
            self._md5[data_id] = md5
            self.order.applied(data_id, read, md5)
            document = self._document(data_id, read)
            if unheld is not None:
                self._unheld.add(data_id)
                document = replace(document, text=None, error=unheld)
            accepted = await self._on_change(document)
            if not self.verdicts:
                return  # the consumer keeps what it accepts (``keep``)
            if accepted:
                await self.keep(data_id, read.content)
            elif data_id not in self._kept:
                await self._fall_back(document)

    async def keep(self, data_id: str, text: str) -> None:
        """Record ``text`` as the last accepted version of ``data_id`` (the snapshot)."""
        self._kept.add(data_id)
        await asyncio.to_thread(self.snapshot.save, data_id, text)

    async def _fall_back(self, refused: Document) -> None:
        """A dataId whose first version here was refused (a restart finding a broken edit
        in Nacos): serve the copy last accepted, kept in the snapshot, then show the
        refusal beside it."""
        text = await asyncio.to_thread(self.snapshot.read, refused.key)
        if text is None or text == refused.text:
            return
        last_good = self._document(
            refused.key, ConfigRead(text, content_md5(text)), from_snapshot=True
        )
        if await self._on_change(last_good):
            self._kept.add(refused.key)
            await self._on_change(refused)

    def _delete_later(self, data_id: str) -> None:
        """Keep serving a deleted dataId for ``delete_grace_seconds``, then remove it
        unless it came back."""
        if data_id in self._md5:
            self._grace.start(data_id, lambda: self._remove_after_grace(data_id))

    async def _remove_after_grace(self, data_id: str) -> None:
        try:
            back = await self.client.read(data_id, self.group)
        except NacosError:
            back = None  # Nacos said it was deleted; an outage since does not undo that
        await self._deliver(data_id, back, final=True)

    def _document(
        self, data_id: str, read: ConfigRead | None, *, from_snapshot: bool = False
    ) -> Document:
        namespace = self.client.namespace or "public"
        return config_document(
            namespace, self.group, data_id, read, self.health, from_snapshot=from_snapshot
        )

    async def _serve_snapshot(self, reason: str) -> None:
        saved, skipped = await asyncio.to_thread(
            self.snapshot.load_at_start, self.accepts, self.location, reason
        )
        self._set_degraded(f"Nacos unreachable at start, serving snapshot: {reason}")
        if skipped:  # kept until Nacos serves the group again, whatever else comes
            self._set_degraded(f"unreadable snapshot files skipped: {skipped}", kind="snapshot")
        self._listed = set(saved)
        for data_id, text in saved.items():
            # Marked, not the real md5: the first reconcile with Nacos re-delivers even
            # unchanged content, so the status stops saying "from snapshot".
            self._md5[data_id] = f"snapshot:{content_md5(text)}"
            self._kept.add(data_id)
            read = ConfigRead(text, content_md5(text))
            await self._on_change(self._document(data_id, read, from_snapshot=True))

    def _set_degraded(self, reason: str | None, *, kind: Kind = "connection") -> None:
        self._degradation.set(reason, kind)

    @property
    def degraded(self) -> str | None:
        """Every reason the source is degraded now, joined; None when it is healthy."""
        return self._degradation.text
