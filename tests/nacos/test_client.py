"""``NacosClient`` against the real server: reads, writes, listing, listeners, outages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynagent.config import NacosConfig
from dynagent.nacos.client import SDK_LOGGER, NacosClient, NacosUnavailable, content_md5
from tests.support.nacos import NacosAdmin, NacosServer

Call = tuple[str, str, str, str]


@pytest.fixture
async def client(nacos_settings: NacosConfig, tmp_path: Path) -> AsyncIterator[NacosClient]:
    """A connected client with an SDK cache of its own."""
    client = NacosClient(nacos_settings, work_dir=tmp_path / "sdk")
    await client.connect()
    yield client
    await client.close()


class Recorder:
    """A listener that keeps every call, in the order the SDK made them."""

    def __init__(self) -> None:
        self.calls: asyncio.Queue[Call] = asyncio.Queue()

    async def __call__(self, tenant: str, group: str, data_id: str, content: str) -> None:
        self.calls.put_nowait((tenant, group, data_id, content))

    async def next_call(self, within: float = 10.0) -> Call:
        async with asyncio.timeout(within):
            return await self.calls.get()


async def test_get_reads_what_was_published_and_none_for_a_missing_config(
    client: NacosClient, nacos: NacosAdmin, nacos_group: str
) -> None:
    assert await client.get("missing.agent.yaml", nacos_group) is None

    await client.publish("a.agent.yaml", nacos_group, "name: a\n", "yaml")
    stored = await nacos.get("a.agent.yaml", nacos_group)
    assert stored is not None
    assert (stored["content"], stored["type"], stored["md5"]) == (
        "name: a\n",
        "yaml",
        content_md5("name: a\n"),
    )
    # The SDK reads the server's dump cache, which trails a write by about 0.1 s.
    async with asyncio.timeout(5):
        while await client.get("a.agent.yaml", nacos_group) != "name: a\n":
            await asyncio.sleep(0.05)

    await client.remove("a.agent.yaml", nacos_group)
    assert await nacos.get("a.agent.yaml", nacos_group) is None


async def test_list_group_pages_through_every_config_of_the_group_only(
    nacos_settings: NacosConfig, nacos: NacosAdmin, nacos_group: str, tmp_path: Path
) -> None:
    texts = {f"agent-{i}.agent.yaml": f"name: agent-{i}\n" for i in range(7)}
    for data_id, text in texts.items():
        await nacos.publish(data_id, nacos_group, text)
    await nacos.publish("elsewhere.agent.yaml", f"{nacos_group}-other", "name: elsewhere\n")

    client = NacosClient(nacos_settings, work_dir=tmp_path / "sdk", page_size=3)
    try:
        listed = await client.list_group(nacos_group)  # pages of 3, 3 and 1
    finally:
        await client.close()
    assert listed == {data_id: content_md5(text) for data_id, text in texts.items()}


async def test_a_listener_is_called_with_tenant_group_data_id_content(
    client: NacosClient, nacos: NacosAdmin, nacos_group: str
) -> None:
    await nacos.publish("bot.agent.yaml", nacos_group, "v: 1\n")
    recorder = Recorder()
    await client.listen("bot.agent.yaml", nacos_group, recorder)

    await nacos.publish("bot.agent.yaml", nacos_group, "v: 2\n")
    # Depending on when the SDK registers the listener, it may first report v: 1.
    call = await recorder.next_call()
    if call[3] == "v: 1\n":
        call = await recorder.next_call()
    assert call == ("", nacos_group, "bot.agent.yaml", "v: 2\n")

    await nacos.delete("bot.agent.yaml", nacos_group)
    assert await recorder.next_call() == ("", nacos_group, "bot.agent.yaml", "")

    await client.unlisten("bot.agent.yaml", nacos_group, recorder)
    await nacos.publish("bot.agent.yaml", nacos_group, "v: 3\n")
    with pytest.raises(TimeoutError):
        await recorder.next_call(within=1.0)


async def test_reads_fail_as_unavailable_while_the_server_is_down_and_recover_after(
    client: NacosClient, nacos: NacosAdmin, nacos_server: NacosServer, nacos_group: str
) -> None:
    await nacos.publish("bot.agent.yaml", nacos_group, "v: 1\n")
    recorder = Recorder()
    await client.listen("bot.agent.yaml", nacos_group, recorder)
    assert await recorder.next_call() == ("", nacos_group, "bot.agent.yaml", "v: 1\n")

    async with nacos_server.stopped():
        with pytest.raises(NacosUnavailable, match=f"reading {nacos_group}/bot.agent.yaml failed"):
            await client.get("bot.agent.yaml", nacos_group)
        with pytest.raises(NacosUnavailable, match="Nacos HTTP API /v3/admin/cs/config/list"):
            await client.list_group(nacos_group)

    # The data survived the restart, and the SDK reconnects on its own: the listener
    # added before the outage hears the next change without being added again.
    await nacos.publish("bot.agent.yaml", nacos_group, "v: 2\n")
    assert await recorder.next_call() == ("", nacos_group, "bot.agent.yaml", "v: 2\n")
    assert await client.get("bot.agent.yaml", nacos_group) == "v: 2\n"
    assert await client.list_group(nacos_group) == {"bot.agent.yaml": content_md5("v: 2\n")}


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


async def test_configs_with_no_local_copy_yet_are_listened_to_and_read_without_a_warning(
    client: NacosClient, nacos: NacosAdmin, nacos_group: str
) -> None:
    """A fresh SDK cache has no snapshot or failover file of any config, and the SDK warned
    ``File not found: …@@GROUP@@`` for each: six lines at every start of the samples."""
    kept = Kept()
    SDK_LOGGER.addHandler(kept)
    try:
        for i in range(6):
            await nacos.publish(f"a{i}.agent.yaml", nacos_group, f"name: a{i}\n")
            await client.listen(f"a{i}.agent.yaml", nacos_group, Recorder())
            await client.get(f"a{i}.agent.yaml", nacos_group)
        await client.get("missing.agent.yaml", nacos_group)
        # Any other warning of the SDK's still shows.
        SDK_LOGGER.warning("File not found: %s", "/etc/other-file")
    finally:
        SDK_LOGGER.removeHandler(kept)
    absent = [line for line in kept.lines if "File not found" in line]
    assert absent == ["WARNING File not found: /etc/other-file"]
