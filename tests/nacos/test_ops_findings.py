"""What confused an ops engineer in the Nacos console, against the
real server: refusals on the document's own entry, tombstones, a delete grace, gray
versions in the status, and the console's own v3 HTTP API driving the service."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
from v2.nacos.utils.net_util import NetUtils

from dynagent.config import NacosConfig
from dynagent.nacos.client import NacosClient
from dynagent.nacos.snapshot import Snapshot
from dynagent.nacos.source import NacosSource
from dynagent.sources.base import Document
from tests.support.nacos import (
    NacosAdmin,
    NacosServer,
    invoke,
    nacos_service_config,
    nacos_source,
    status_of,
    yaml_text,
)
from tests.support.service import RunningService, agent_document, revision_of, running_service

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


async def listed(service: RunningService) -> list[tuple[str, str]]:
    body = await (await service.client.get("/v1/agents")).json()
    return [(agent["name"], agent["state"]) for agent in body["agents"]]


async def test_a_copy_paste_slip_is_refused_on_its_own_entry_and_a_delete_leaves_a_tombstone(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    group = nacos_settings.group
    faq = agent_document("faq-bot", system="Answers questions.")
    await nacos.publish("faq-bot.agent.yaml", group, yaml_text(faq))
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    async with running_service(config) as service:
        await service.wait_serving("faq-bot", revision_of(faq))

        # billing.agent.yaml holding faq-bot's text: refused as billing, faq-bot untouched.
        await nacos.publish("billing.agent.yaml", group, yaml_text(faq))
        await service.wait_error("billing", "already defines")
        assert await listed(service) == [("billing", "refused"), ("faq-bot", "serving")]
        status = await status_of(service, "billing")
        assert status == {
            "name": "billing",
            "state": "refused",
            "revision": None,
            "description": "",
            "source": None,
            "factory": None,
            "last_error": {
                "source": f"public/{group}/billing.agent.yaml",
                "path": "",
                "message": f"agent 'billing' public/{group}/billing.agent.yaml: this document "
                "names agent 'faq-bot', which faq-bot.agent.yaml already defines; rename it "
                "(e.g. name: billing) or delete it",
            },
        }
        assert (await status_of(service, "faq-bot"))["last_error"] is None

        # The slip deleted: its entry goes. (Left in place, it would serve faq-bot once
        # faq-bot.agent.yaml is gone, as a restart would: the name would be free.)
        await nacos.delete("billing.agent.yaml", group)
        await service.registry.wait_for(lambda r: "billing" not in r)

        # Deleted in Nacos: gone, and its 404 says when and where.
        await nacos.delete("faq-bot.agent.yaml", group)
        await service.registry.wait_for(lambda r: "faq-bot" not in r)
        response = await service.client.get("/v1/agents/faq-bot")
        body = await response.json()
        assert response.status == 404
        assert re.fullmatch(
            rf"agent 'faq-bot' was removed at {STAMP}: deleted in Nacos "
            rf"\({re.escape(group)}/faq-bot\.agent\.yaml\); GET /v1/agents lists the agents served",
            body["error"]["message"],
        ), body
        assert body["error"]["type"] == "not_found"


async def test_a_deleted_agent_serves_through_the_grace_period(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    group = nacos_settings.group
    settings = nacos_settings.model_copy(update={"delete_grace_seconds": 1.5})
    bot = agent_document("bot", system="Leaving soon.")
    await nacos.publish("bot.agent.yaml", group, yaml_text(bot))
    async with running_service(nacos_service_config(settings, agents_dir, state_dir)) as service:
        await service.wait_serving("bot", revision_of(bot))
        deleted = time.monotonic()
        await nacos.delete("bot.agent.yaml", group)
        await service.registry.wait_for(lambda r: "bot" not in r)
        # Removed no earlier than the grace (without it: ~0.1 s after the delete).
        assert time.monotonic() - deleted >= 1.5

        # Deleted and re-created within the grace: never stops serving.
        again = agent_document("bot", system="Back again.")
        await nacos.publish("bot.agent.yaml", group, yaml_text(again))
        await service.wait_serving("bot", revision_of(again))
        await nacos.delete("bot.agent.yaml", group)
        await nacos.publish("bot.agent.yaml", group, yaml_text(bot))
        await service.wait_serving("bot", revision_of(bot))
        removed: list[str] = []
        service.registry.listeners.append(lambda event: removed.append(event.kind))
        await nacos.publish("other.agent.yaml", group, yaml_text(agent_document("other")))
        await service.registry.wait_for(lambda r: "other" in r, within=10)
        assert "removed" not in removed


class Console:
    """The Nacos console's own HTTP API (v3 console endpoints), as its pages call it."""

    def __init__(self, session: aiohttp.ClientSession, url: str, group: str) -> None:
        self.session = session
        self.url = url
        self.group = group

    async def call(self, method: str, path: str, **options: Any) -> Any:
        async with self.session.request(method, f"{self.url}/v3/console{path}", **options) as r:
            body = await r.json(content_type=None)
        assert r.status == 200 and body["code"] == 0, body
        return body["data"]

    def key(self, data_id: str) -> dict[str, str]:
        return {"dataId": data_id, "groupName": self.group, "namespaceId": "public"}

    async def publish(self, data_id: str, content: str, beta_ips: str = "") -> None:
        # The console's "beta" tick sends the IPs as a header on the same publish.
        headers = {"betaIps": beta_ips} if beta_ips else {}
        form = {**self.key(data_id), "content": content, "type": "yaml"}
        assert await self.call("POST", "/cs/config", data=form, headers=headers) is True

    async def stop_beta(self, data_id: str) -> None:
        assert await self.call("DELETE", "/cs/config/beta", params=self.key(data_id)) is True

    async def history(self, data_id: str) -> list[dict[str, Any]]:
        params = {**self.key(data_id), "pageNo": "1", "pageSize": "10"}
        page = await self.call("GET", "/cs/history/list", params=params)
        return list(page["pageItems"])

    async def historic_content(self, data_id: str, nid: str) -> str:
        detail = await self.call("GET", "/cs/history", params={**self.key(data_id), "nid": nid})
        return str(detail["content"])


async def test_the_console_creates_edits_beta_publishes_and_rolls_back_an_agent(
    nacos_server: NacosServer, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    first = agent_document("bot", system="Created in the console.")
    second = agent_document("bot", system="Edited in the console.")
    beta = agent_document("bot", system="Beta for some instances.")
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    data_id = "bot.agent.yaml"
    group = nacos_settings.group
    async with (
        aiohttp.ClientSession() as session,
        running_service(config) as service,
    ):
        console = Console(session, nacos_server.console_url, group)
        await console.publish(data_id, yaml_text(first))  # create
        await service.wait_serving("bot", revision_of(first))
        await console.publish(data_id, yaml_text(second))  # edit
        await service.wait_serving("bot", revision_of(second))
        assert (await status_of(service, "bot"))["source"] == nacos_source(
            group, data_id, yaml_text(second)
        )

        # Beta to this instance: served, and its status says it is gray.
        ips = ",".join(sorted({"127.0.0.1", NetUtils.get_local_ip()}))
        await console.publish(data_id, yaml_text(beta), beta_ips=ips)
        await service.wait_serving("bot", revision_of(beta))
        assert (await status_of(service, "bot"))["source"] == nacos_source(
            group, data_id, yaml_text(beta), gray="beta"
        )
        await console.stop_beta(data_id)
        await service.wait_serving("bot", revision_of(second))
        assert (await status_of(service, "bot"))["source"] == nacos_source(
            group, data_id, yaml_text(second)
        )

        # Roll back as the history page does: read the old version, publish it again.
        # (Newest first; the beta publish is in the history too, as a gray insert.)
        versions = await console.history(data_id)
        created = [v for v in versions if v["opType"].strip() == "I"][-1]
        assert created.get("publishType", "formal") == "formal", versions
        await console.publish(data_id, await console.historic_content(data_id, created["id"]))
        await service.wait_serving("bot", revision_of(first))
        code, body = await invoke(service, "bot")
        assert (code, body["revision"]) == (200, revision_of(first))


async def test_a_tag_gray_serves_only_on_instances_with_its_tag_and_their_status_says_so(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    tmp_path: Path,
) -> None:
    """Nacos 3.1 tag gray (``tag=`` on publish) is matched against the client
    connection's ``Vipserver-Tag`` label, which ``nacos.gray_tag`` sets: such an instance
    is pushed the gray version and shows it as ``source.gray``; others serve the formal
    one. Stopping the gray brings the formal version back; an instance started while the
    gray is live serves it from the start."""
    group, data_id, tag = nacos_settings.group, "bot.agent.yaml", "canary-pods"
    formal = agent_document("bot", system="The formal version.")
    gray = agent_document("bot", system="The tag gray, for the canary pods.")
    await nacos.publish(data_id, group, yaml_text(formal))
    plain = nacos_service_config(nacos_settings, agents_dir, state_dir)
    tagged_settings = nacos_settings.model_copy(
        update={"gray_tag": tag, "snapshot_dir": tmp_path / "tagged-snapshot"}
    )
    tagged = nacos_service_config(tagged_settings, agents_dir, tmp_path / "tagged-state")
    formal_source = nacos_source(group, data_id, yaml_text(formal))
    gray_source = nacos_source(group, data_id, yaml_text(gray), gray=f"tag:{tag}")
    async with running_service(plain) as other, running_service(tagged) as canary:
        for service in (other, canary):
            await service.wait_serving("bot", revision_of(formal))
            assert (await status_of(service, "bot"))["source"] == formal_source

        await nacos.publish(data_id, group, yaml_text(gray), tag=tag)
        await canary.wait_serving("bot", revision_of(gray))
        assert (await status_of(canary, "bot"))["source"] == gray_source
        # The untagged instance was pushed the change too: a later publish it has served
        # is the barrier after which it still serves the formal version.
        marker = agent_document("marker")
        await nacos.publish("marker.agent.yaml", group, yaml_text(marker))
        await other.wait_serving("marker", revision_of(marker))
        assert (await status_of(other, "bot"))["source"] == formal_source
        assert [(await invoke(s, "bot"))[1]["revision"] for s in (other, canary)] == [
            revision_of(formal),
            revision_of(gray),
        ]

        await nacos.delete(data_id, group, tag=tag)
        await canary.wait_serving("bot", revision_of(formal))
        assert (await status_of(canary, "bot"))["source"] == formal_source

    # Started while the gray is live: served (and kept current by pushes).
    await nacos.publish(data_id, group, yaml_text(gray), tag=tag)
    async with running_service(tagged) as started_later:
        await started_later.wait_serving("bot", revision_of(gray))
        assert (await status_of(started_later, "bot"))["source"] == gray_source
        await nacos.delete(data_id, group, tag=tag)
        await started_later.wait_serving("bot", revision_of(formal))


async def test_a_source_started_while_a_gray_is_live_loads_it_with_the_rest(
    nacos: NacosAdmin, nacos_settings: NacosConfig, tmp_path: Path
) -> None:
    """The first load compares each read with the listing's md5, the formal version's, so
    it used to drop a gray read: a source without the fuzzy watch (one a factory feeds,
    as the Spring AI Alibaba groups) never served the dataId, one with it only once the
    watch's first notice came in, after the service said ready."""
    group, tag = nacos_settings.group, "canary-pods"
    await nacos.publish("bot.agent.yaml", group, yaml_text(agent_document("bot")))
    gray = yaml_text(agent_document("bot", system="The tag gray."))
    await nacos.publish("bot.agent.yaml", group, gray, tag=tag)
    client = NacosClient(nacos_settings.model_copy(update={"gray_tag": tag}))
    source = NacosSource(
        client,
        group,
        accepts=lambda data_id: data_id.endswith(".agent.yaml"),
        snapshot=Snapshot(tmp_path / "snapshot"),
        watch=False,
    )
    delivered: list[tuple[str, str | None, Any]] = []

    async def on_change(document: Document) -> bool:
        delivered.append((document.key, document.text, document.info.details.get("gray")))
        return True

    try:
        await client.connect()
        async with asyncio.timeout(10):  # reads trail a publish by ~0.1 s
            while (read := await client.read("bot.agent.yaml", group)) is None or not read.gray:
                await asyncio.sleep(0.05)  # polling the server's view, not a reload
        await source.start(on_change)
        assert delivered == [("bot.agent.yaml", gray, f"tag:{tag}")]
    finally:
        await source.stop()
