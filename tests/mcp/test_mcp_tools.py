"""MCP tools through the service, against real MCP servers (the official SDK) on loopback."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from dynagent import load_spec
from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
from tests.mcp.conftest import McpProcess, mcp_process
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.process import free_port
from tests.support.service import RunningService, agent_document, running_service, service_config

TOKEN = "s3cret-mcp-token-value"


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    config = service_config(agents_dir, state_dir, environment={"allow": ["ORDERS_TOKEN"]})
    async with running_service(config, environ={"ORDERS_TOKEN": TOKEN}) as running:
        yield running


def mcp_agent(model_server: ScriptedModelServer, url: str, **entry: Any) -> dict[str, Any]:
    # The servers listen on loopback: reached only because the entry allows it.
    tool = {"type": "mcp", "name": "orders", "url": url, "allow_private": True, **entry}
    return agent_document("bot", model_server, tools=[tool])


async def serve(service: RunningService, document: dict[str, Any]) -> None:
    service.write_agent(document)
    await service.registry.wait_for(lambda r: "bot" in r and r.entry("bot").stable is not None)


async def invoke(service: RunningService) -> dict[str, Any]:
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": "go"})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def server_calls(service: RunningService) -> int:
    """``tools/call`` requests the one pooled session has sent."""
    [status] = service.app[SERVICE].mcp.status()
    return int(status["calls"])


async def tool_results(service: RunningService, body: dict[str, Any]) -> list[tuple[str, str]]:
    trace = await (await service.client.get(f"/v1/traces/{body['trace_id']}")).json()
    return [(e["name"], e["output"]) for e in trace["events"] if e["type"] == "tool_result"]


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_the_model_sees_the_servers_tools_and_gets_their_results(
    service: RunningService, model_server: ScriptedModelServer, transport: str
) -> None:
    async with mcp_process(transport) as server:
        document = mcp_agent(
            model_server,
            server.url,
            transport=transport,
            allow=["echo", "add"],
            headers={"Authorization": "Bearer ${ORDERS_TOKEN}"},
        )
        model_server.script(
            DEFAULT_MODEL,
            [
                CallTools([("orders_echo", {"text": "hi"}), ("orders_add", {"a": 2, "b": 3})]),
                Reply("done"),
            ],
        )
        await serve(service, document)
        body = await invoke(service)
        assert body["output"] == "done"
        assert sorted(await tool_results(service, body)) == [
            ("orders_add", '{\n  "sum": 5\n}'),
            ("orders_echo", "echo: hi"),
        ]
        offered = {t["function"]["name"]: t["function"] for t in model_server.requests[0]["tools"]}
        assert offered == {
            "orders_echo": {
                "name": "orders_echo",
                "description": "Echo the text back.",
                "parameters": {
                    "properties": {"text": {"title": "Text", "type": "string"}},
                    "required": ["text"],
                    "title": "echoArguments",
                    "type": "object",
                },
            },
            "orders_add": {
                "name": "orders_add",
                "description": "Add two integers.",
                "parameters": {
                    "properties": {
                        "a": {"title": "A", "type": "integer"},
                        "b": {"title": "B", "type": "integer"},
                    },
                    "required": ["a", "b"],
                    "title": "addArguments",
                    "type": "object",
                },
            },
        }
        status = await (await service.client.get("/v1/mcp/servers")).json()
        assert TOKEN not in json.dumps(status)
        assert status == {
            "servers": [
                {
                    "server": server.url,
                    "transport": transport,
                    "state": "connected",
                    "tools": [
                        "echo",
                        "add",
                        "fail",
                        "slow",
                        "cancelled",
                        "wait_running",
                        "wait_cancelled",
                        "picture",
                        "resources",
                        "trace_context",
                        "grow",
                        "flake",
                        "flood",
                        "big",
                        "authorization",
                        "stats",
                        "structured",
                    ],
                    "connected_at": status["servers"][0]["connected_at"],
                    "calls": 2,
                    "last_error": None,
                    "agents": ["bot"],
                }
            ]
        }


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_headers_reach_the_server_with_their_variables_filled_in(
    service: RunningService, model_server: ScriptedModelServer, transport: str
) -> None:
    async with mcp_process(transport) as server:
        headers = {"Authorization": "Bearer ${ORDERS_TOKEN}"}
        document = mcp_agent(model_server, server.url, transport=transport, headers=headers)
        model_server.script(
            DEFAULT_MODEL, [CallTools([("orders_authorization", {})]), Reply("done")]
        )
        await serve(service, document)
        results = await tool_results(service, await invoke(service))
    # The server answers with a digest: the token itself is masked in every trace.
    digest = hashlib.sha256(f"Bearer {TOKEN}".encode()).hexdigest()
    assert results == [("orders_authorization", digest)]


async def test_one_session_serves_every_agent_and_run_and_tools_are_listed_once(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    await serve(service, mcp_agent(model_server, http_server.url))
    service.write_agent({**mcp_agent(model_server, http_server.url), "name": "bot2"})
    await service.registry.wait_for(lambda r: "bot2" in r and r.entry("bot2").stable is not None)
    outputs: list[str] = []
    for name in ("bot", "bot2", "bot", "bot2"):
        model_server.script(DEFAULT_MODEL, [CallTools([("orders_stats", {})]), Reply("ok")])
        response = await service.client.post(f"/v1/agents/{name}/invoke", json={"input": "go"})
        body = await response.json()
        outputs.extend(output for _, output in await tool_results(service, body))
    assert [json.loads(output) for output in outputs] == [{"sessions": 1, "listings": 1}] * 4
    [status] = service.app[SERVICE].mcp.status()
    assert (status["agents"], status["calls"]) == (["bot", "bot2"], 4)


async def test_errors_images_and_bad_arguments_reach_the_model_as_such(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools(
                [
                    ("orders_fail", {"reason": "nope"}),
                    ("orders_add", {"a": "two", "b": 3}),
                    ("orders_picture", {}),
                    ("orders_resources", {}),
                    ("orders_structured", {}),
                ]
            ),
            Reply("done"),
        ],
    )
    await serve(service, mcp_agent(model_server, http_server.url))
    body = await invoke(service)
    assert sorted(await tool_results(service, body)) == [  # parallel calls: any order
        ("orders_add", "TOOL_ERROR: invalid arguments: a: 'two' is not of type 'integer'"),
        ("orders_fail", "TOOL_ERROR: McpToolError: Error executing tool fail"),
        ("orders_picture", "[image image/png, 70 bytes, not shown]"),
        (
            "orders_resources",
            "[resource file:///notes.txt]\na note\n"
            "[resource file:///logo.png, image/png, 70 bytes, not shown]\n"
            "[resource link file:///big.csv: big.csv]",
        ),
        ("orders_structured", '{"total": 3}'),
    ]
    # The arguments were refused before any call: the server saw the other four only.
    assert server_calls(service) == 4


async def test_on_error_fail_ends_the_run(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_fail", {"reason": "nope"})])])
    await serve(service, mcp_agent(model_server, http_server.url, on_error="fail"))
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": "go"})
    assert response.status == 502
    body = await response.json()
    assert body["error"]["type"] == "tool_error"
    assert "Error executing tool fail" in body["error"]["message"]


async def test_list_changed_rebuilds_the_agent_with_the_new_tool(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_grow", {})]), Reply("grown")])
    await serve(service, mcp_agent(model_server, http_server.url))
    before = service.serving("bot")
    await invoke(service)

    def grown(registry: AgentRegistry) -> bool:
        agent = registry.entry("bot").stable
        return agent is not None and "orders_late" in agent.tools

    await service.registry.wait_for(grown)
    assert service.serving("bot") != before
    model_server.script(DEFAULT_MODEL, [CallTools([("orders_late", {"x": 7})]), Reply("ok")])
    assert await tool_results(service, await invoke(service)) == [("orders_late", "late 7")]


async def test_a_server_down_at_build_refuses_the_agent_until_it_starts(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    service.write_agent(mcp_agent(model_server, url))
    status = await service.wait_error("bot", f"MCP server {url} is unavailable")
    assert status["state"] == "refused"
    assert status["last_error"]["path"] == "tools[orders]"
    servers = await (await service.client.get("/v1/mcp/servers")).json()
    assert servers == {
        "servers": [
            {
                "server": url,
                "transport": "streamable_http",
                "state": "down",
                "tools": [],
                "connected_at": None,
                "calls": 0,
                "last_error": "cannot connect (ConnectError)",
                "agents": ["bot"],
            }
        ]
    }
    async with mcp_process("streamable_http", port):
        await service.registry.wait_for(lambda r: r.entry("bot").stable is not None, within=40)
        assert service.registry.entry("bot").last_error is None


async def test_a_server_killed_mid_run_is_a_tool_error_and_reconnects(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    port = free_port()
    async with mcp_process("streamable_http", port) as server:
        await serve(service, mcp_agent(model_server, server.url))
        model_server.script(
            DEFAULT_MODEL,
            [
                CallTools([("orders_echo", {"text": "one"})]),
                CallTools([("orders_echo", {"text": "two"})], expect=lambda _: server.kill()),
                Reply("done"),
            ],
        )
        results = await tool_results(service, await invoke(service))
    assert results[0] == ("orders_echo", "echo: one")
    assert results[1] == (
        "orders_echo",
        f"TOOL_ERROR: McpUnavailable: MCP server {server.url} closed the connection during "
        "the call; the session reconnects for the next call",
    )
    async with mcp_process("streamable_http", port):
        model_server.script(
            DEFAULT_MODEL, [CallTools([("orders_echo", {"text": "three"})]), Reply("back")]
        )
        assert await tool_results(service, await invoke(service)) == [
            ("orders_echo", "echo: three")
        ]
    [state] = service.app[SERVICE].mcp.status()
    assert state["calls"] == 3


async def test_a_call_past_its_timeout_is_cancelled_on_the_server(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([("orders_slow", {"seconds": 30})]),
            CallTools([("orders_cancelled", {})]),
            Reply("done"),
        ],
    )
    await serve(service, mcp_agent(model_server, http_server.url, timeout=0.5))
    results = await tool_results(service, await invoke(service))
    assert results[0] == (
        "orders_slow",
        "TOOL_ERROR: ToolTimeout: tool 'orders_slow' took longer than 0.5 s",
    )
    assert results[1] == ("orders_cancelled", "1")


async def test_retry_calls_again_only_a_tool_the_server_marks_read_only(
    service: RunningService, model_server: ScriptedModelServer, http_server: McpProcess
) -> None:
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([("orders_wait_running", {})]),  # no hint: times out once, not repeated
            CallTools([("orders_slow", {"seconds": 30})]),  # readOnlyHint: times out twice
            CallTools([("orders_cancelled", {})]),
            Reply("done"),
        ],
    )
    document = mcp_agent(model_server, http_server.url, timeout=0.5)
    document["interceptors"] = [{"retry": {"max_attempts": 2, "backoff": 0}}]
    await serve(service, document)

    results = await tool_results(service, await invoke(service))

    assert [output.split(":")[1] for _, output in results[:2]] == [" ToolTimeout"] * 2
    assert results[2] == ("orders_cancelled", "2")  # both calls of slow, nothing else
    assert server_calls(service) == 4


async def test_a_spec_given_in_code_waits_for_its_server_too(
    agents_dir: Path, state_dir: Path, model_server: ScriptedModelServer
) -> None:
    port = free_port()
    spec = load_spec(mcp_agent(model_server, f"http://127.0.0.1:{port}/mcp"))
    config = service_config(agents_dir, state_dir)
    async with running_service(config, specs=[spec], environ={}) as service:
        assert service.registry.entry("bot").stable is None
        async with mcp_process("streamable_http", port):
            await service.registry.wait_for(lambda r: r.entry("bot").stable is not None, within=40)


async def test_secrets_in_headers_and_the_url_reach_no_log_status_or_trace(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG")
    try:
        async with mcp_process("streamable_http") as server:
            url = f"{server.url}?key=${{ORDERS_TOKEN}}"
            headers = {"Authorization": "Bearer ${ORDERS_TOKEN}"}
            model_server.script(
                DEFAULT_MODEL, [CallTools([("orders_echo", {"text": "x"})]), Reply("ok")]
            )
            await serve(service, mcp_agent(model_server, url, headers=headers))
            body = await invoke(service)
            server.kill()
            model_server.script(
                DEFAULT_MODEL, [CallTools([("orders_echo", {"text": "y"})]), Reply("ok")]
            )
            failed = await invoke(service)
            trace = await (await service.client.get(f"/v1/traces/{failed['trace_id']}")).json()
            status = await (await service.client.get("/v1/mcp/servers")).json()
            agents = await (await service.client.get("/v1/agents")).json()
    finally:
        logger.remove(sink)
    assert body["output"] == "ok"
    assert "TOOL_ERROR: McpUnavailable" in json.dumps(trace)
    assert status["servers"][0]["server"] == server.url
    for text in (*lines, json.dumps(trace), json.dumps(status), json.dumps(agents)):
        assert TOKEN not in text
