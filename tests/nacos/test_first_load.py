"""A Nacos source's first load against the fuzzy watch's first notices.

The watch announces every dataId already in the group while the load reads them. A notice
that landed while the load's read of that dataId was in flight used to make the load drop
its read: the dataId was served only after the source (and ``/readyz``) said ready. Each
test forces that interleaving (``NoticeDuringRead``) on the real server, for a formal
version and for a tag gray this instance is entitled to, and checks what the source has
handed on when ``start`` returns, then that nothing repeats it and the newest version wins.
"""

from __future__ import annotations

import pytest

from dynagent.config import NacosConfig
from dynagent.nacos.factory import is_agent_data_id
from dynagent.nacos.snapshot import Snapshot
from dynagent.nacos.source import NacosSource
from tests.support.first_load import (
    Deliveries,
    NoticeDuringRead,
    Step,
    fuzzy_watch_works,
    until_served,
)
from tests.support.nacos import NacosAdmin, yaml_text
from tests.support.service import agent_document

DATA_ID = "bot.agent.yaml"
TAG = "canary-pods"
VERSIONS = pytest.mark.parametrize("tag", ["", TAG], ids=["formal", "gray"])


def version(system: str) -> str:
    return yaml_text(agent_document("bot", system=system))


class Group:
    """``bot.agent.yaml`` in the test's group, formal or (``tag``) a tag gray that a client
    of ``settings`` is entitled to."""

    def __init__(self, nacos: NacosAdmin, settings: NacosConfig, tag: str) -> None:
        self.nacos = nacos
        self.settings = settings.model_copy(update={"gray_tag": tag})
        self.tag = tag
        self.gray = f"tag:{TAG}" if tag else None

    async def publish(self, text: str) -> None:
        """Publish ``text`` as the version this instance is served, and wait until it is."""
        await self.nacos.publish(DATA_ID, self.settings.group, text, tag=self.tag)
        await until_served(self.settings, self.settings.group, DATA_ID, text)

    async def published(self) -> str:
        await fuzzy_watch_works(self.settings)
        text = version("The formal version.")
        await self.nacos.publish(DATA_ID, self.settings.group, text)
        if self.tag:
            text = version("The tag gray.")
        await self.publish(text)
        return text

    def source(self, *, ahead: Step | None = None, meanwhile: Step | None = None) -> NacosSource:
        client = NoticeDuringRead(
            self.settings, self.settings.group, DATA_ID, ahead=ahead, meanwhile=meanwhile
        )
        return NacosSource(
            client,
            self.settings.group,
            accepts=is_agent_data_id,
            snapshot=Snapshot(self.settings.snapshot_dir),
            poll_seconds=300,  # nothing here may come from the list poll
        )


def handed_over(source: NacosSource) -> int:
    assert isinstance(source.client, NoticeDuringRead)
    return source.client.handed_over


@VERSIONS
async def test_a_notice_landing_while_the_first_load_reads_a_data_id_leaves_it_loaded(
    tag: str, nacos: NacosAdmin, nacos_settings: NacosConfig
) -> None:
    group = Group(nacos, nacos_settings, tag)
    text = await group.published()
    source = group.source()
    deliveries = Deliveries()
    try:
        await source.start(deliveries.record)
        assert handed_over(source) > 0, "the notice must land while the read is in flight"
        assert deliveries.log == [(DATA_ID, text, group.gray)]

        # Neither the notice nor the listener's first push repeats the load: the next
        # thing handed on is the next version.
        newer = version("Version two.")
        await nacos.publish(DATA_ID, group.settings.group, newer, tag=tag)
        await deliveries.wait_for(2)
        assert deliveries.log == [(DATA_ID, text, group.gray), (DATA_ID, newer, group.gray)]
    finally:
        await source.stop()


@VERSIONS
async def test_a_version_the_listing_missed_but_the_first_load_read_is_what_it_serves(
    tag: str, nacos: NacosAdmin, nacos_settings: NacosConfig
) -> None:
    """Published after the load listed the group, before it read the dataId: the read's md5
    is not the listing's, yet it is the newest there is, and nothing else would bring it."""
    group = Group(nacos, nacos_settings, tag)
    await group.published()
    newer = version("Published after the listing.")
    source = group.source(ahead=lambda: group.publish(newer))
    deliveries = Deliveries()
    try:
        await source.start(deliveries.record)
        assert handed_over(source) > 0, "the notice must land while the read is in flight"
        assert deliveries.log == [(DATA_ID, newer, group.gray)]

        last = version("Version three.")
        await nacos.publish(DATA_ID, group.settings.group, last, tag=tag)
        await deliveries.wait_for(2)
        assert deliveries.log == [(DATA_ID, newer, group.gray), (DATA_ID, last, group.gray)]
    finally:
        await source.stop()


@VERSIONS
async def test_a_version_published_while_the_first_load_reads_it_wins_right_after(
    tag: str, nacos: NacosAdmin, nacos_settings: NacosConfig
) -> None:
    """The load's read was answered before the publish: the load serves what it read (the
    dataId is served at ready), and the newer version replaces it without a list poll.

    The publish is awaited until the server serves it (``Group.publish``), before the load
    goes on to announce its listener: the server then compares the listener's md5 (the
    load's read) with the newer one's and pushes it. Reads trail a publish by ~0.1 s; in
    that window the announcement met the old md5, and the newer version could only come
    from the server's change event racing the listener's registration."""
    group = Group(nacos, nacos_settings, tag)
    text = await group.published()
    newer = version("Published during the load.")
    source = group.source(meanwhile=lambda: group.publish(newer))
    deliveries = Deliveries()
    try:
        await source.start(deliveries.record)
        assert handed_over(source) > 0, "the notice must land while the read is in flight"
        assert deliveries.log == [(DATA_ID, text, group.gray)]
        await deliveries.wait_for(2)
        assert deliveries.log == [(DATA_ID, text, group.gray), (DATA_ID, newer, group.gray)]
    finally:
        await source.stop()
