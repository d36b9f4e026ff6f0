"""``a2a.register: true``: every agent's A2A card released to the real Nacos 3.1 A2A
registry, a new version on each revision; read back through Nacos's own admin API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from v2.nacos.ai.model.ai_param import ReleaseAgentCardParam

from dynagent.a2a_card import agent_card
from dynagent.config import NacosConfig
from dynagent.http.state import A2A_REGISTRAR
from dynagent.sources._nacos_a2a import _ai_service
from dynagent.tools.a2a import remote_agent_tool
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.nacos import NacosAdmin, invoke
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

URL = "http://dynagent.test:8090"


async def card_in_nacos(nacos: NacosAdmin, name: str) -> dict[str, Any]:
    url = nacos.base_url + "/v3/admin/ai/a2a"
    async with nacos.session.get(url, params={"agentName": name}) as response:
        body = await response.json(content_type=None)
    assert body["code"] == 0, body
    card: dict[str, Any] = body["data"]
    return card


async def released(service: RunningService, name: str, revision: str) -> None:
    registrar = service.app[A2A_REGISTRAR]
    await registrar.wait_for(lambda r: r.released.get(name) == revision)


async def test_agent_cards_are_released_to_the_nacos_a2a_registry_and_follow_each_revision(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    nacos_group: str,
) -> None:
    name = f"a2a-{nacos_group[-8:]}"
    first = agent_document(name, description="Registered in Nacos.")
    write_agent(agents_dir, first)
    config = service_config(
        agents_dir,
        state_dir,
        nacos=nacos_settings.model_dump(mode="json"),
        a2a={"register": True, "url": URL},
    )
    async with running_service(config) as service:
        await released(service, name, revision_of(first))
        card = await card_in_nacos(nacos, name)
        assert {k: card[k] for k in ("name", "description", "version", "url")} == {
            "name": name,
            "description": "Registered in Nacos.",
            "version": revision_of(first),
            "url": f"{URL}/a2a/{name}",
        }
        assert card["capabilities"]["streaming"] is True

        # A remote-agent tool finds the agent through the registry at call time, and
        # calls it over A2A (here at the test server's real address).
        registrar = service.app[A2A_REGISTRAR]
        assert await registrar.url_of(name) == f"{URL}/a2a/{name}"

        async def here() -> str:
            return f"{service.url}/a2a/{name}"

        async with aiohttp.ClientSession() as session:
            tool = remote_agent_tool(name, "", here, session)
            answer = await tool.function({"input": "ping"})
        assert answer == "[test model] you said: ping"

        second = agent_document(name, description="A new revision.")
        service.write_agent(second)
        await released(service, name, revision_of(second))
        card = await card_in_nacos(nacos, name)
        assert (card["version"], card["description"]) == (revision_of(second), "A new revision.")


async def test_a_type_agent_tool_calls_a_remote_agent_found_in_the_nacos_a2a_registry(
    nacos_settings: NacosConfig,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    nacos_group: str,
    tmp_path: Path,
) -> None:
    remote = f"remote-{nacos_group[-8:]}"
    partner = f"partner-{nacos_group[-8:]}"
    write_agent(agents_dir, agent_document(remote))  # the offline model echoes
    config = service_config(agents_dir, state_dir, nacos=nacos_settings.model_dump(mode="json"))

    def tool_result_is(text: str) -> Any:
        def check(body: dict[str, Any]) -> None:
            assert body["messages"][-1]["content"] == text

        return check

    echoed = "[test model] you said: ping"
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([(partner, {"input": "ping"})]),
            Reply("by nacos", expect=tool_result_is(echoed)),
            CallTools([("direct", {"input": "ping"})]),
            Reply("by url", expect=tool_result_is(echoed)),
        ],
    )
    async with running_service(config) as service:
        await service.wait_serving(remote, revision_of(agent_document(remote)))
        # Another team's agent, published in the registry under its own name, at our address.
        ai = await _ai_service(nacos_settings, tmp_path / "ai")
        try:
            card = agent_card(service.registry.get(remote), f"{service.url}/a2a/{remote}")
            card = card.model_copy(update={"name": partner})
            await ai.release_agent_card(ReleaseAgentCardParam(agent_card=card, set_as_latest=True))
            for tool, target in ((partner, {"nacos": partner}), ("direct", {"url": card.url})):
                caller = agent_document(
                    "caller", model_server, tools=[{"type": "agent", "name": tool, "a2a": target}]
                )
                service.write_agent(caller)
                await service.wait_serving("caller", revision_of(caller))
                code, body = await invoke(service, "caller", "ask them")
                assert (code, body["output"]) == (
                    200,
                    "by nacos" if "nacos" in target else "by url",
                )
        finally:
            await ai.shutdown()
    model_server.assert_complete()
