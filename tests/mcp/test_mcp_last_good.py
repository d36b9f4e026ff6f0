"""An agent that serves keeps its last good version while its MCP server is down or flaky:
a rebuild then is refused naming the server, and the retry once it is back builds it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
from tests.mcp.conftest import McpProcess, mcp_process
from tests.mcp.test_mcp_tools import invoke, mcp_agent, serve
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.process import free_port
from tests.support.service import RunningService, running_service, service_config

EDITED = "You are the edited agent."


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    async with running_service(service_config(agents_dir, state_dir), environ={}) as running:
        yield running


def server_status(service: RunningService) -> dict[str, Any]:
    [status] = service.app[SERVICE].mcp.status()
    return status


def serves_edit(registry: AgentRegistry) -> bool:
    agent = registry.entry("bot").stable
    return agent is not None and agent.spec.prompt.system == EDITED


async def refused_edit(service: RunningService, document: dict[str, Any], url: str) -> str:
    """Edit ``bot``'s prompt; the refusal's message, once it shows in the status."""
    service.write_agent({**document, "prompt": {"system": EDITED}})
    status = await service.wait_error("bot", f"MCP server {url} is unavailable")
    error = status["last_error"]
    assert (status["state"], error["path"], error["source"]) == (
        "serving",
        "tools[orders]",
        str(service.folder / "bot.yaml") if service.folder else "",
    )
    return str(error["message"])


async def answers_with(service: RunningService, revision: str | None) -> None:
    body = await invoke(service)
    assert (body["output"], body["revision"]) == ("still here", revision)


async def test_an_edit_while_the_server_is_down_is_refused_until_it_is_back(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    port = free_port()
    async with mcp_process("streamable_http", port) as server:
        document = mcp_agent(model_server, server.url)
        await serve(service, document)
        good = service.serving("bot")
        server.kill()  # not waited for: the rebuild itself finds the server gone
    message = await refused_edit(service, document, server.url)
    head, reason = message.split(" is not connected: ")
    assert head.endswith(
        f"MCP server {server.url} is unavailable (tools[orders]: MCP server {server.url}"
    )
    # the transport says it one way or the other, depending on when it saw the close
    assert reason in (
        "cannot connect (ConnectError); retried with backoff)",
        "MCPError: Connection closed; retried with backoff)",
    )
    assert service.serving("bot") == good
    model_server.script(DEFAULT_MODEL, [Reply("still here")])
    await answers_with(service, good)
    async with mcp_process("streamable_http", port):
        await service.registry.wait_for(serves_edit, within=40)  # the backoff's retry
        assert service.registry.entry("bot").last_error is None
        assert service.serving("bot") != good
        assert server_status(service)["state"] == "connected"


async def test_a_list_changed_while_the_server_is_flaky_keeps_the_last_good(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    document = mcp_agent(model_server, http_server.url)
    await serve(service, document)
    good = service.serving("bot")
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_flake", {})]), Reply("flaked")])
    await invoke(service)  # the server now sends list_changed, then cannot list its tools
    pool = service.app[SERVICE].mcp.pool
    await pool.wait_for(lambda: server_status(service)["state"] == "down")
    broken = "MCPError: the tool listing is broken for now"
    assert server_status(service)["last_error"] == broken
    assert service.serving("bot") == good
    message = await refused_edit(service, document, http_server.url)
    assert message.endswith(f"is not connected: {broken}; retried with backoff)")
    model_server.script(DEFAULT_MODEL, [Reply("still here")])
    await answers_with(service, good)
    agent = service.registry.entry("bot").stable
    assert agent is not None and "orders_late" not in agent.tools

    http_server.heal()
    await service.registry.wait_for(serves_edit, within=40)
    agent = service.registry.entry("bot").stable
    assert agent is not None and "orders_late" in agent.tools
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_late", {"x": 1})]), Reply("ok")])
    assert (await invoke(service))["output"] == "ok"
