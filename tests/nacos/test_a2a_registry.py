"""``a2a.register: true``: every agent's A2A card released to the real Nacos 3.1 A2A
registry, a new version on each revision; read back through Nacos's own admin API."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
from v2.nacos.ai.model.ai_param import ReleaseAgentCardParam

from dynagent.a2a.card import agent_card
from dynagent.a2a.client import remote_agent_tool
from dynagent.a2a.nacos_registry import _ai_service
from dynagent.config import NacosConfig
from dynagent.http.state import SERVICE
from dynagent.runtime.outbound import OutboundPolicy
from tests.support import DEFAULT_MODEL, CallTools, Held, Reply, ScriptedModelServer
from tests.support.nacos import NacosAdmin, invoke
from tests.support.process import free_port, serve_process, write_config
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


async def endpoints(nacos: NacosAdmin, version: str) -> list[tuple[str, int, str]]:
    """The endpoints registered for card ``version``, as Nacos keeps them: instances of
    the naming service ``{agent}::{version}`` in group ``agent-endpoints`` (3.1 server)."""
    base, group = nacos.base_url + "/v3/admin/ns", "agent-endpoints"
    search = {"groupNameParam": group, "serviceNameParam": f"::{version}", "pageSize": "10"}
    async with nacos.session.get(f"{base}/service/list", params=search) as response:
        services = (await response.json(content_type=None))["data"]["pageItems"]
    found = []
    for service in (s["name"] for s in services if s["name"].endswith(f"::{version}")):
        params = {"groupName": group, "serviceName": service}
        async with nacos.session.get(f"{base}/instance/list", params=params) as response:
            body = await response.json(content_type=None)
        if body["code"] == 0:  # else the service went with its last instance
            found += [
                (i["ip"], i["port"], i["metadata"]["__nacos.agent.endpoint.path__"])
                for i in body["data"]
            ]
    return found


async def until_endpoints(
    nacos: NacosAdmin, version: str, expected: list[tuple[str, int, str]], within: float = 10
) -> None:
    """Poll Nacos's view (it follows a register or deregister within ~0.5 s) until it
    shows ``expected``; fail after ``within`` seconds."""
    async with asyncio.timeout(within):
        while (seen := await endpoints(nacos, version)) != expected:
            await asyncio.sleep(0.1)  # polling another process's view, not waiting a reload
    assert seen == expected


async def released(service: RunningService, name: str, revision: str) -> None:
    registrar = service.app[SERVICE].a2a_registrar
    assert registrar is not None
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
        registrar = service.app[SERVICE].a2a_registrar
        assert registrar is not None
        assert await registrar.url_of(name) == f"{URL}/a2a/{name}"

        async def here() -> str:
            return f"{service.url}/a2a/{name}"

        async with aiohttp.ClientSession() as session:
            loopback = OutboundPolicy(allow_private=True)
            tool = remote_agent_tool(name, "", here, session, policy=loopback)
            answer = await tool.function({"input": "ping"})
        assert answer == "[test model] you said: ping | prompt: You are a test agent."

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

    echoed = "[test model] you said: ping | prompt: You are a test agent."
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
                    "caller",
                    model_server,
                    tools=[{"type": "agent", "name": tool, "a2a": target, "allow_private": True}],
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


async def test_a_stopping_service_takes_its_endpoints_out_of_the_registry_before_it_drains(
    nacos: NacosAdmin, nacos_settings: NacosConfig, tmp_path: Path, nacos_group: str
) -> None:
    """A real ``dynagent serve`` with ``a2a.register``, stopped with SIGTERM while a run is
    in flight: the endpoint leaves the registry at once (callers resolving through it stop
    finding this instance), the run still finishes, and the process exits 0."""
    name = f"leaving-{nacos_group[-8:]}"
    port = free_port()
    agents = tmp_path / "agents"
    agents.mkdir()
    released = asyncio.Event()
    async with ScriptedModelServer() as model:
        model.script(DEFAULT_MODEL, [Held(released, Reply("finished while draining"))])
        document = agent_document(name, model)
        write_agent(agents, document)
        config = write_config(
            tmp_path,
            {
                "listen": {"drain_seconds": 60},
                "factories": {"default": {"directory": str(agents)}},
                "sessions": {"store": "sqlite", "path": str(tmp_path / "sessions.db")},
                "nacos": nacos_settings.model_dump(mode="json"),
                "a2a": {"register": True, "url": f"http://127.0.0.1:{port}"},
            },
        )
        revision = revision_of(document)
        async with serve_process(config, port) as served, aiohttp.ClientSession() as http:
            await served.wait_log(f"Nacos A2A registry: agent {name} card {revision}")
            await until_endpoints(nacos, revision, [("127.0.0.1", port, f"/a2a/{name}")])

            async def run() -> tuple[int, Any]:
                url = f"{served.url}/v1/agents/{name}/invoke"
                async with http.post(url, json={"input": "hi"}) as response:
                    return response.status, (await response.json())["output"]

            running = asyncio.create_task(run())
            await model.wait_for_requests(1)
            served.terminate()
            await served.wait_log(
                f"agent {name} card {revision}: endpoint 127.0.0.1:{port} deregistered"
            )
            await until_endpoints(nacos, revision, [])
            assert not running.done(), "the run ended before the endpoint left the registry"
            released.set()
            assert await running == (200, "finished while draining")
            assert await served.exit_code(within=30) == 0, "\n".join(served.log)
        assert served.log[-1].endswith("| stopped")
    model.assert_complete()
