"""A dataId is never served backwards: a version older than the one applied, as a cluster
node behind the raft log serves it after the leader is lost, is refused on every path a
version arrives by (a push, the group's reconcile, a deletion's read-back), and so is a
push that a newer version overtook in the queue, while a person's rollback (old content,
published anew) and a re-creation are served.

The node behind is one real Nacos answering, for a while, with a real earlier answer of
its own: the version it served before the later publishes, with the modification time
it reported then (``LaggingNode``). A kill of the raft leader makes that happen only now
and then (tests/nacos/test_cluster.py); this makes it happen every time.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dynagent.config import NacosConfig
from dynagent.nacos._pushes import Deleted, Pushed
from dynagent.nacos.client import ConfigRead, NacosClient, content_md5
from dynagent.nacos.snapshot import Snapshot
from dynagent.nacos.source import NacosSource
from dynagent.sources.base import Document
from tests.support.nacos import NacosAdmin, yaml_text
from tests.support.service import agent_document

pytestmark = pytest.mark.nacos

DATA_ID = "bot.agent.yaml"
WAIT = 10.0


class LaggingNode(NacosClient):
    """The node answers reads and the group listing as of ``behind`` (a read it gave
    earlier) for the dataIds there, as a node that has not applied the later writes."""

    def __init__(self, settings: NacosConfig) -> None:
        super().__init__(settings)
        self.behind: dict[str, ConfigRead] = {}

    async def read(self, data_id: str, group: str) -> ConfigRead | None:
        if data_id in self.behind:
            return self.behind[data_id]
        return await super().read(data_id, group)

    async def list_group(self, group: str, data_id: str = "") -> dict[str, str]:
        listing = await super().list_group(group, data_id)
        for key, read in self.behind.items():
            listing[key] = content_md5(read.content)
        return listing


@dataclasses.dataclass
class Served:
    """Every text the source handed on, in order, with a way to wait for one."""

    texts: list[str | None] = dataclasses.field(default_factory=list)
    changed: asyncio.Condition = dataclasses.field(default_factory=asyncio.Condition)

    async def __call__(self, document: Document) -> bool:
        async with self.changed:
            self.texts.append(document.text)
            self.changed.notify_all()
        return True

    async def until(self, done: Callable[[list[str | None]], bool]) -> None:
        async with asyncio.timeout(WAIT), self.changed:
            await self.changed.wait_for(lambda: done(self.texts))


def text(number: int) -> str:
    return yaml_text(agent_document("bot", system=f"bot version {number}"))


async def settled_read(client: NacosClient, group: str, content: str) -> ConfigRead:
    """The server's read of ``content`` once reads show it (they trail a publish by ~0.1 s)."""
    async with asyncio.timeout(WAIT):
        while (read := await client.read(DATA_ID, group)) is None or read.content != content:
            await asyncio.sleep(0.05)  # polling the server's view, not a reload
    return read


@pytest.fixture
async def lagging(nacos_settings: NacosConfig) -> AsyncIterator[LaggingNode]:
    client = LaggingNode(nacos_settings)
    await client.connect()
    yield client
    await client.close()


async def started(
    client: LaggingNode, tmp_path: Path, served: Served, **options: Any
) -> NacosSource:
    source = NacosSource(
        client,
        client.settings.group,
        accepts=lambda data_id: data_id.endswith(".agent.yaml"),
        snapshot=Snapshot(tmp_path / "snapshot"),
        owns_client=False,
        **options,
    )
    await source.start(served)
    return source


async def test_a_version_older_than_the_one_served_is_refused_by_push_and_by_reconcile(
    nacos: NacosAdmin, lagging: LaggingNode, tmp_path: Path
) -> None:
    group = lagging.settings.group
    await nacos.publish(DATA_ID, group, text(1))
    first = await settled_read(lagging, group, text(1))
    assert first.modified > 0, "Nacos reports when a version was written"
    served, stale = Served(), list[str]()
    source = await started(lagging, tmp_path, served, on_stale=lambda: stale.append(DATA_ID))
    try:
        await served.until(lambda texts: texts == [text(1)])
        await nacos.publish(DATA_ID, group, text(2))
        await served.until(lambda texts: texts[-1] == text(2))

        # The node falls behind: it pushes version 1 again (the SDK's md5 check after a
        # reconnect), lists it, reads it. Neither path serves it.
        lagging.behind[DATA_ID] = first
        await source._apply(Pushed(DATA_ID, text(1)))
        await source.reconcile()
        await source.reconcile()
        assert served.texts == [text(1), text(2)]
        assert source.order.refused == len(stale) >= 3  # counted, for the metrics

        # It catches up: the next version flows as ever.
        lagging.behind.clear()
        await nacos.publish(DATA_ID, group, text(3))
        await served.until(lambda texts: texts[-1] == text(3))

        # A person's rollback to version 1 is a new write with a new time: served.
        await nacos.publish(DATA_ID, group, text(1))
        await served.until(lambda texts: texts[-1] == text(1))
        assert served.texts == [text(1), text(2), text(3), text(1)]
    finally:
        await source.stop()


async def test_a_push_overtaken_by_a_newer_version_is_not_served(
    nacos: NacosAdmin, lagging: LaggingNode, tmp_path: Path
) -> None:
    # A push waits in the queue while the reconcile applies the version after it (a
    # reconnect after a leader loss brings both at once); the server holds the newer one
    # when the push comes up, and the pushed content alone carries no time to order it by.
    group = lagging.settings.group
    await nacos.publish(DATA_ID, group, text(1))
    await settled_read(lagging, group, text(1))
    served = Served()
    source = await started(lagging, tmp_path, served)
    try:
        await served.until(lambda texts: texts == [text(1)])
        await nacos.publish(DATA_ID, group, text(2))
        await served.until(lambda texts: texts[-1] == text(2))
        await source._apply(Pushed(DATA_ID, text(1)))
        assert served.texts == [text(1), text(2)]
    finally:
        await source.stop()


async def test_a_deleted_data_id_is_not_brought_back_by_a_node_that_missed_the_deletion(
    nacos: NacosAdmin, lagging: LaggingNode, tmp_path: Path
) -> None:
    group = lagging.settings.group
    await nacos.publish(DATA_ID, group, text(1))
    first = await settled_read(lagging, group, text(1))
    await nacos.publish(DATA_ID, group, text(2))
    await settled_read(lagging, group, text(2))
    served = Served()
    source = await started(lagging, tmp_path, served, delete_grace_seconds=0.1)
    try:
        await served.until(lambda texts: texts == [text(2)])
        await nacos.delete(DATA_ID, group)
        await served.until(lambda texts: texts[-1] is None)  # after the grace

        lagging.behind[DATA_ID] = first  # still holds version 1, deletion not applied
        await source._apply(Pushed(DATA_ID, text(1)))
        assert served.texts == [text(2), None]

        lagging.behind.clear()
        await nacos.publish(DATA_ID, group, text(3))  # re-created: a new write, served
        await served.until(lambda texts: texts[-1] == text(3))
    finally:
        await source.stop()


async def test_a_node_that_missed_a_deletion_does_not_call_off_its_grace(
    nacos: NacosAdmin, lagging: LaggingNode, tmp_path: Path
) -> None:
    group = lagging.settings.group
    await nacos.publish(DATA_ID, group, text(1))
    first = await settled_read(lagging, group, text(1))
    await nacos.publish(DATA_ID, group, text(2))
    await settled_read(lagging, group, text(2))
    served = Served()
    source = await started(lagging, tmp_path, served, delete_grace_seconds=3600)
    try:
        await served.until(lambda texts: texts == [text(2)])
        await nacos.delete(DATA_ID, group)
        async with asyncio.timeout(WAIT):  # reads trail a deletion by ~0.1 s
            while await lagging.read(DATA_ID, group) is not None:
                await asyncio.sleep(0.05)  # polling the server's view, not a reload
        await source._apply(Deleted(DATA_ID))
        assert DATA_ID in source._grace.tasks  # served until the grace ends

        lagging.behind[DATA_ID] = first
        await source._apply(Pushed(DATA_ID, text(1)))
        assert DATA_ID in source._grace.tasks, "an older version is no re-creation"
        assert served.texts == [text(2)]

        lagging.behind.clear()
        await nacos.publish(DATA_ID, group, text(3))  # re-created: the grace is off
        await served.until(lambda texts: texts[-1] == text(3))
        assert DATA_ID not in source._grace.tasks
    finally:
        await source.stop()
