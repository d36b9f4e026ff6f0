"""The Nacos MCP registry, for real: an MCP server registered through Nacos's admin API,
an agent that uses it by name, then a tool disabled, the endpoint moved and a new version
published in Nacos."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynagent.config import NacosConfig
from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
from tests.mcp.conftest import McpProcess, mcp_process
from tests.nacos.test_cli import dynagent
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.nacos import NacosAdmin, NacosServer, yaml_text
from tests.support.process import free_port
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

LOOPBACK = {"allow_private": True}
"""The registered endpoints listen on loopback: reached only because the entries allow it."""
TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text back.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "add",
        "description": "Add two integers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
]


class McpRegistryAdmin:
    """Nacos's v3 admin API for its MCP registry and the naming service behind it."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, name: str) -> None:
        self.session, self.base_url, self.name = session, base_url, name

    def _forms(
        self, port: int, disabled: set[str], version: str = "1.0.0", tools_listed: Any = None
    ) -> dict[str, str]:
        spec = {
            "name": self.name,
            "protocol": "mcp-streamable",
            "frontProtocol": "mcp-streamable",
            "description": "orders over MCP",
            "versionDetail": {"version": version},
            "remoteServerConfig": {"exportPath": "/mcp"},
        }
        tools = {
            "tools": TOOLS if tools_listed is None else tools_listed,
            "toolsMeta": {n: {"enabled": n not in disabled} for n in ("echo", "add")},
        }
        endpoint = {"type": "DIRECT", "data": {"address": "127.0.0.1", "port": str(port)}}
        return {
            "mcpName": self.name,
            "serverSpecification": json.dumps(spec),
            "toolSpecification": json.dumps(tools),
            "endpointSpecification": json.dumps(endpoint),
        }

    async def _send(self, method: str, path: str, data: dict[str, str]) -> None:
        async with self.session.request(method, f"{self.base_url}{path}", data=data) as response:
            body = await response.json()
            assert body["code"] == 0, body

    async def register(self, port: int) -> None:
        await self._send("POST", "/v3/admin/ai/mcp", self._forms(port, set()))

    async def update(self, port: int, disabled: set[str]) -> None:
        await self._send(
            "PUT", "/v3/admin/ai/mcp", {**self._forms(port, disabled), "latest": "true"}
        )

    async def new_version(self, port: int, version: str, tools: Any) -> None:
        forms = self._forms(port, set(), version, tools)
        await self._send("PUT", "/v3/admin/ai/mcp", {**forms, "latest": "true"})

    async def drop_endpoint(self, port: int) -> None:
        await self._send(
            "DELETE",
            "/v3/admin/ns/instance",
            {
                "serviceName": f"{self.name}::1.0.0",
                "groupName": "mcp-endpoints",
                "ip": "127.0.0.1",
                "port": str(port),
                "ephemeral": "false",
            },
        )


@pytest.fixture
async def servers() -> AsyncIterator[tuple[McpProcess, McpProcess]]:
    async with mcp_process("streamable_http") as first, mcp_process("streamable_http") as second:
        yield first, second


async def test_an_agent_uses_a_registry_server_and_follows_its_changes(
    nacos_server: NacosServer,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    model_server: ScriptedModelServer,
    servers: tuple[McpProcess, McpProcess],
) -> None:
    first, second = servers
    name = f"orders-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession() as session:
        admin = McpRegistryAdmin(session, nacos_server.base_url, name)
        await admin.register(first.port)
        config = service_config(agents_dir, state_dir, nacos=nacos_settings.model_dump(mode="json"))
        async with running_service(config, environ={}) as service:
            tool = {"type": "mcp", "name": "orders", "nacos": {"server": name}, **LOOPBACK}
            service.write_agent(agent_document("bot", model_server, tools=[tool]))
            await service.registry.wait_for(
                lambda r: _tools(r) == ["orders_add", "orders_echo"], within=30
            )
            model_server.script(
                DEFAULT_MODEL, [CallTools([("orders_echo", {"text": "a"})]), Reply("ok")]
            )
            assert await _results(service) == [("orders_echo", "echo: a")]

            await admin.update(first.port, disabled={"echo"})
            await service.registry.wait_for(lambda r: _tools(r) == ["orders_add"], within=40)

            await admin.update(second.port, disabled={"echo"})
            await admin.drop_endpoint(first.port)
            mcp = service.app[SERVICE].mcp
            moved = [f"http://127.0.0.1:{second.port}/mcp"]
            await mcp.pool.wait_for(lambda: _endpoints(mcp.status(), name) == moved, within=40)
            first.kill()
            model_server.script(
                DEFAULT_MODEL, [CallTools([("orders_add", {"a": 1, "b": 2})]), Reply("ok")]
            )
            assert await _results(service) == [("orders_add", '{\n  "sum": 3\n}')]

            await admin.new_version(second.port, "1.1.0", [TOOLS[0]])
            await service.registry.wait_for(lambda r: _tools(r) == ["orders_echo"], within=40)


async def test_a_pinned_version_keeps_its_tools_while_the_latest_moves_on(
    nacos_server: NacosServer,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    model_server: ScriptedModelServer,
) -> None:
    name = f"pinned-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession() as session, mcp_process("streamable_http") as server:
        admin = McpRegistryAdmin(session, nacos_server.base_url, name)
        await admin.register(server.port)  # 1.0.0: echo and add
        await admin.new_version(server.port, "1.1.0", [TOOLS[0]])  # the latest: echo only
        config = service_config(agents_dir, state_dir, nacos=nacos_settings.model_dump(mode="json"))
        async with running_service(config, environ={}) as service:
            for agent, version in (("bot", None), ("pinned", "1.0.0")):
                ref = {"server": name, **({"version": version} if version else {})}
                tool = {"type": "mcp", "name": "orders", "nacos": ref, **LOOPBACK}
                service.write_agent(agent_document(agent, model_server, tools=[tool]))
            await service.registry.wait_for(
                lambda r: (
                    (_tools(r), _tools(r, "pinned"))
                    == (["orders_echo"], ["orders_add", "orders_echo"])
                ),
                within=30,
            )
            servers = {s["server"]: s["version"] for s in service.app[SERVICE].mcp.status()}
            assert {k: v for k, v in servers.items() if k.startswith("nacos:")} == {
                f"nacos:{name}@latest": "1.1.0",
                f"nacos:{name}@1.0.0": "1.0.0",
            }


def _tools(registry: AgentRegistry, name: str = "bot") -> list[str] | None:
    agent = registry.entry(name).stable if name in registry else None
    return sorted(agent.tools) if agent else None


def _endpoints(status: list[dict[str, Any]], name: str) -> list[str] | None:
    entry = next((s for s in status if s["server"] == f"nacos:{name}@latest"), None)
    return entry["endpoints"] if entry else None


async def _results(service: RunningService) -> list[tuple[str, str]]:
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": "go"})
    body = await response.json()
    assert response.status == 200, body
    trace = await (await service.client.get(f"/v1/traces/{body['trace_id']}")).json()
    return [(e["name"], e["output"]) for e in trace["events"] if e["type"] == "tool_result"]


async def test_mcp_list_shows_the_registry_and_the_agents_using_it(
    nacos_server: NacosServer, nacos: NacosAdmin, nacos_group: str, agents_dir: Path
) -> None:
    name = f"listed-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession() as session:
        await McpRegistryAdmin(session, nacos_server.base_url, name).register(free_port())
    tool = {
        "type": "mcp",
        "name": "orders",
        "nacos": {"server": name, "version": "1.0.0"},
        **LOOPBACK,
    }
    remote = agent_document("remote-bot", tools=[tool])
    await nacos.publish("remote-bot.agent.yaml", nacos_group, yaml_text(remote))
    write_agent(agents_dir, agent_document("local-bot", tools=[tool]))
    done = dynagent(
        "mcp",
        "list",
        "--nacos",
        nacos_server.addr,
        "--group",
        nacos_group,
        "--agents",
        str(agents_dir),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)["servers"]}
    assert rows[name] == {
        "name": name,
        "version": "1.0.0",
        "protocol": "mcp-streamable",
        "enabled": True,
        "agents": ["local-bot", "remote-bot"],
    }
    table = dynagent("mcp", "list", "--nacos", nacos_server.addr, "--group", nacos_group)
    assert table.returncode == 0, table.stderr
    [line] = [line for line in table.stdout.splitlines() if line.startswith(name)]
    assert line.split() == [name, "1.0.0", "mcp-streamable", "yes", "remote-bot"]
