"""MCP edges: a cancelled run cancels its call on the server, stdio servers come only from
the service config, and entries that cannot work are refused naming the field."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.client import Client

from dynagent import AgentBuilder, Resources, load_spec
from dynagent.config import ServiceConfig
from dynagent.events import Event, ToolCallEvent
from dynagent.exceptions import ConfigError
from dynagent.mcp.setup import mcp_servers
from dynagent.mcp.tools import McpServers
from dynagent.runtime.environment import EnvironmentPolicy
from tests.mcp.conftest import ROOT, McpProcess
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.agents import model_fields


@pytest.fixture
async def servers() -> AsyncIterator[McpServers]:
    config = ServiceConfig.model_validate(
        {
            "mcp_servers": {
                "local": {
                    "command": "python",
                    "args": ["-m", "tests.mcp.server", "--transport", "stdio"],
                    "cwd": str(ROOT),
                }
            }
        }
    )
    found = mcp_servers(config)
    yield found
    await found.aclose()


def spec(model_server: ScriptedModelServer, *tools: dict[str, Any]) -> Any:
    return load_spec(
        {
            "name": "bot",
            "model": model_fields(model_server),
            "prompt": {"system": "x"},
            "tools": list(tools),
        }
    )


async def test_a_cancelled_run_cancels_its_call_on_the_server(
    model_server: ScriptedModelServer, http_server: McpProcess, servers: McpServers
) -> None:
    resources = Resources()
    builder = AgentBuilder(mcp=servers, resources=resources)
    definition = spec(
        model_server, {"type": "mcp", "name": "o", "url": http_server.url, "allow_private": True}
    )
    await builder.prepare(definition)
    agent = builder.build(definition)
    model_server.script(DEFAULT_MODEL, [CallTools([("o_slow", {"seconds": 60})])])
    called = asyncio.Event()

    def seen(event: Event) -> None:
        if isinstance(event, ToolCallEvent):
            called.set()

    run = asyncio.create_task(agent.run("go", on_event=seen))
    async with Client(http_server.url, mode="legacy", cache=None) as direct:
        assert (await direct.call_tool("wait_running", {})).content[0].text == "running"  # type: ignore[union-attr]
        assert called.is_set()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        answer = await direct.call_tool("wait_cancelled", {})
        assert answer.content[0].text == "1"  # type: ignore[union-attr]
    await resources.aclose()


async def test_a_stdio_server_is_named_from_the_service_config(
    model_server: ScriptedModelServer, servers: McpServers
) -> None:
    resources = Resources()
    builder = AgentBuilder(mcp=servers, resources=resources)
    definition = spec(model_server, {"type": "mcp", "name": "files", "server": "local"})
    await builder.prepare(definition)
    agent = builder.build(definition)
    model_server.script(
        DEFAULT_MODEL, [CallTools([("files_echo", {"text": "over stdio"})]), Reply("ok")]
    )
    result = await agent.run("go")
    outputs = [e.output for e in result.events if e.type == "tool_result"]
    assert outputs == ["echo: over stdio"]
    [status] = servers.status()
    assert (status["server"], status["transport"], status["state"]) == (
        "stdio:local",
        "stdio",
        "connected",
    )
    assert sys.executable not in str(status)  # the command line is not shown
    await resources.aclose()


@pytest.mark.parametrize(
    "entry,path,message",
    [
        (
            {"type": "mcp", "name": "f", "server": "nowhere"},
            "tools[f].server",
            "no MCP server 'nowhere' in mcp_servers; known: local",
        ),
        (
            {
                "type": "mcp",
                "name": "f",
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"Authorization": "Bearer ${NOT_SET_ANYWHERE}"},
            },
            "tools[f].headers.Authorization",
            "environment variable NOT_SET_ANYWHERE is not set",
        ),
        (
            {
                "type": "mcp",
                "name": "f",
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"Authorization": "Bearer ${SERVICE_SECRET}"},
            },
            "tools[f].headers.Authorization",
            "environment variable SERVICE_SECRET is not in the service's environment.allow; "
            "add it (or a pattern) there to let definitions read it",
        ),
        (
            {"type": "mcp", "name": "f", "server": "local", "allow": ["echo", "nope"]},
            "tools[f].allow",
            "stdio:local lists no ['nope']; it has add, authorization, big, cancelled, echo, fail, "
            "flake, flood, grow, picture, resources, slow, stats, structured, trace_context, "
            "wait_cancelled, wait_running",
        ),
    ],
)
async def test_an_entry_that_cannot_work_is_refused_naming_its_field(
    model_server: ScriptedModelServer,
    servers: McpServers,
    entry: dict[str, Any],
    path: str,
    message: str,
) -> None:
    allowed = EnvironmentPolicy(allow=("NOT_SET_ANYWHERE",))
    environ = {"SERVICE_SECRET": "set, but not for definitions"}
    builder = AgentBuilder(mcp=servers, environ=environ, environment=allowed)
    definition = spec(model_server, entry)
    with pytest.raises(ConfigError) as refused:
        await builder.prepare(definition)
        builder.build(definition)
    assert [(i.path, i.message) for i in refused.value.issues] == [(path, message)]


@pytest.mark.parametrize(
    "prefix,offered", [(None, "files_echo"), ("shop", "shop_echo"), ("", "echo")]
)
async def test_the_prefix_names_the_offered_tools(
    model_server: ScriptedModelServer, servers: McpServers, prefix: str | None, offered: str
) -> None:
    entry = {"type": "mcp", "name": "files", "server": "local", "allow": ["echo"]}
    builder = AgentBuilder(mcp=servers)
    definition = spec(model_server, entry if prefix is None else {**entry, "prefix": prefix})
    await builder.prepare(definition)
    agent = builder.build(definition)
    assert list(agent.tools) == [offered]
    model_server.script(DEFAULT_MODEL, [CallTools([(offered, {"text": "hi"})]), Reply("ok")])
    result = await agent.run("go")
    assert [(e.name, e.output) for e in result.events if e.type == "tool_result"] == [
        (offered, "echo: hi")
    ]
    await builder.resources.aclose()


def test_a_spec_cannot_start_a_program() -> None:
    with pytest.raises(ConfigError) as refused:
        load_spec(
            {
                "name": "bot",
                "prompt": {"system": "x"},
                "tools": [{"type": "mcp", "name": "f", "command": "rm", "args": ["-rf", "/"]}],
            }
        )
    known = (
        "known fields: a2a, allow, allow_hosts, allow_private, description, headers, idempotent, "
        "method, nacos, name, on_error, parameters, prefix, server, shadow_safe, timeout, "
        "transport, type, url"
    )
    assert [(i.path, i.message) for i in refused.value.issues] == [
        ("tools[f].command", f"unknown field 'command' in tools[f]; {known}"),
        ("tools[f].args", f"unknown field 'args' in tools[f]; {known}"),
    ]


async def test_two_entries_offering_one_tool_name_are_refused(
    model_server: ScriptedModelServer, servers: McpServers
) -> None:
    builder = AgentBuilder(mcp=servers)
    definition = spec(
        model_server,
        {"type": "mcp", "name": "a", "server": "local", "prefix": "", "allow": ["echo"]},
        {"type": "mcp", "name": "b", "server": "local", "prefix": "", "allow": ["echo"]},
    )
    await builder.prepare(definition)
    with pytest.raises(ConfigError) as refused:
        builder.build(definition)
    assert [(i.path, i.message) for i in refused.value.issues] == [
        ("tools[b]", "'echo' is already a tool of this agent")
    ]
