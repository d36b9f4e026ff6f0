"""What a chatty MCP server costs: ``tools/list_changed`` sent in a burst lists the tools
and rebuilds the agents on them at most once per interval, the last change of the burst
is never lost, and a server's session is closed once no agent uses it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dynagent.http.state import SERVICE
from dynagent.mcp.tools import McpServers
from tests.mcp.conftest import McpProcess
from tests.mcp.test_mcp_tools import invoke, mcp_agent, serve, tool_results
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.service import RunningService, agent_document, running_service, service_config


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    async with running_service(service_config(agents_dir, state_dir)) as running:
        yield running


def servers(service: RunningService) -> McpServers:
    return service.app[SERVICE].mcp


def offered(service: RunningService) -> list[str]:
    [status] = servers(service).status()
    return list(status["tools"])


async def test_a_burst_of_list_changed_lists_the_tools_and_rebuilds_the_agent_once(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    servers(service).pool.relist_seconds = 3600.0  # the burst ends long before the next
    await serve(service, mcp_agent(model_server, http_server.url))
    first = service.serving("bot")
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_flood", {"times": 200})]), Reply("ok")])
    await invoke(service)
    pool = servers(service).pool
    await pool.wait_for(lambda: "v0" in offered(service))
    await service.registry.wait_for(lambda r: r.entry("bot").stable.revision != first)  # type: ignore[union-attr]
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_stats", {})]), Reply("ok")])
    [(_, stats)] = await tool_results(service, await invoke(service))
    revisions = [record.revision for record in service.registry.history("bot")]
    # The connect's listing and one for the whole burst; the load and one rebuild.
    assert (json.loads(stats), len(revisions)) == ({"sessions": 1, "listings": 2}, 2)


async def test_the_last_change_of_a_burst_is_listed_and_served(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    servers(service).pool.relist_seconds = 0.05
    await serve(service, mcp_agent(model_server, http_server.url))
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_flood", {"times": 50})]), Reply("ok")])
    await invoke(service)

    def has_the_last(registry: Any) -> bool:
        agent = registry.entry("bot").stable
        return agent is not None and "orders_v49" in agent.tools

    await service.registry.wait_for(has_the_last, within=30)
    assert offered(service)[-3:] == ["v47", "v48", "v49"]


async def test_a_servers_session_closes_when_its_last_agent_is_deleted(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    # allow_private: the test server listens on loopback.
    tool: dict[str, object] = {"type": "mcp", "name": "orders", "url": http_server.url}
    tool |= {"allow": ["echo"], "allow_private": True}
    files = {
        name: service.write_agent(agent_document(name, model_server, tools=[tool]))
        for name in ("bot", "bot2")
    }
    await service.registry.wait_for(
        lambda r: all(n in r and r.entry(n).stable is not None for n in files)
    )
    mcp = servers(service)

    def users() -> list[list[str]]:
        return [status["agents"] for status in mcp.status()]

    files["bot"].unlink()
    await mcp.pool.wait_for(lambda: users() == [["bot2"]])
    assert [status["state"] for status in mcp.status()] == ["connected"]
    files["bot2"].unlink()
    await mcp.pool.wait_for(lambda: mcp.status() == [])
    # Named again, the server gets a new session and serves as before.
    await serve(service, mcp_agent(model_server, http_server.url, allow=["echo"]))
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_echo", {"text": "hi"})]), Reply("ok")])
    assert await tool_results(service, await invoke(service)) == [("orders_echo", "echo: hi")]
    assert users() == [["bot"]]


async def test_a_servers_session_closes_when_an_edit_drops_it_and_not_before(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    """An edit that no longer names the server lets go of it as a deletion does; an edit
    that still names it, or a canary that does, keeps the session."""
    tool: dict[str, object] = {"type": "mcp", "name": "orders", "url": http_server.url}
    tool |= {"allow": ["echo"], "allow_private": True}
    service.write_agent(agent_document("bot", model_server, tools=[tool]))
    await service.registry.wait_for(lambda r: "bot" in r and r.entry("bot").stable is not None)
    mcp = servers(service)
    assert [status["agents"] for status in mcp.status()] == [["bot"]]

    def serving(prompt: str) -> bool:
        stable = service.registry.entry("bot").stable
        return stable is not None and stable.system_prompt == prompt

    edited = agent_document("bot", model_server, tools=[tool], system="Still with orders.")
    service.write_agent(edited)
    await service.registry.wait_for(lambda r: serving("Still with orders."))
    assert [status["agents"] for status in mcp.status()] == [["bot"]]

    service.write_agent(agent_document("bot", model_server, system="No tools now."))
    await service.registry.wait_for(lambda r: serving("No tools now."))
    await mcp.pool.wait_for(lambda: mcp.status() == [])
