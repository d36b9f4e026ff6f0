"""Declarative HTTP tools against a local aiohttp server: templates, headers, allow-list, SSRF."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from dynagent import ConfigError, Tool
from tests.support import AgentFactory, CallTools, Reply, ScriptedModelServer

Hits = list[dict[str, Any]]


@pytest.fixture
async def api(aiohttp_server: AiohttpServer) -> tuple[str, Hits]:
    """A small local API: its base URL (``http://127.0.0.1:<port>``) and the requests it got."""
    hits: Hits = []

    async def record(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        hit = {
            "method": request.method,
            "path": request.raw_path.split("?")[0],
            "query": dict(request.query),
            "key": request.headers.get("X-Key"),
            "body": body,
        }
        hits.append(hit)
        if request.path.startswith("/missing"):
            return web.json_response({"error": "no such thing"}, status=404)
        return web.json_response({**hit, "key": "***" if hit["key"] else None})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = await aiohttp_server(app, host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}", hits


def http_spec(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "call_api",
        "url": url,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "allow_hosts": ["127.0.0.1"],
        "allow_private": True,
        **extra,
    }


def api_tool(make_agent: AgentFactory, url: str, **extra: Any) -> Tool:
    return make_agent(spec_tools=[http_spec(url, **extra)]).tools["call_api"]


async def test_the_model_calls_an_http_tool_with_url_arguments_query_and_secret_header(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: tuple[str, Hits]
) -> None:
    base, hits = api
    make_agent.environ = {"WEATHER_KEY": "k-123"}
    spec = http_spec(f"{base}/weather/{{city}}", headers={"X-Key": "${WEATHER_KEY}"})
    model_server.script(
        "gpt-main",
        [CallTools([("call_api", {"city": "São Paulo/SP", "units": "metric"})]), Reply("sunny")],
    )
    agent = make_agent(spec_tools=[spec])

    result = await agent.run("weather?")

    expected = {
        "method": "GET",
        "path": "/weather/S%C3%A3o%20Paulo%2FSP",
        "query": {"units": "metric"},
        "key": "k-123",
        "body": None,
    }
    assert hits == [expected]
    assert json.loads(model_server.requests[1]["messages"][-1]["content"]) == {
        **expected,
        "key": "***",
    }
    assert model_server.requests[0]["tools"][0]["function"]["name"] == "call_api"
    assert "k-123" not in json.dumps([e.as_dict() for e in result.events])


async def test_a_post_tool_sends_the_other_arguments_as_json(
    make_agent: AgentFactory, api: tuple[str, Hits]
) -> None:
    base, hits = api
    tool = api_tool(make_agent, f"{base}/tickets/{{city}}", method="POST")

    await tool.function({"city": "oslo", "title": "broken", "priority": 2})

    assert hits == [
        {
            "method": "POST",
            "path": "/tickets/oslo",
            "query": {},
            "key": None,
            "body": {"title": "broken", "priority": 2},
        }
    ]


async def test_an_http_error_is_reported_to_the_model(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: tuple[str, Hits]
) -> None:
    base, _ = api
    model_server.script("gpt-main", [CallTools([("call_api", {})]), Reply("not found")])
    agent = make_agent(spec_tools=[http_spec(f"{base}/missing")])

    await agent.run("fetch")

    assert model_server.requests[1]["messages"][-1]["content"] == (
        'TOOL_ERROR: ToolCallError: HTTP 404: {"error": "no such thing"}'
    )


async def test_a_host_not_in_allow_hosts_is_refused(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: tuple[str, Hits]
) -> None:
    base, hits = api
    model_server.script("gpt-main", [CallTools([("call_api", {})]), Reply("refused")])
    agent = make_agent(spec_tools=[http_spec(f"{base}/x", allow_hosts=["api.example.com"])])

    await agent.run("fetch")

    assert model_server.requests[1]["messages"][-1]["content"] == (
        "TOOL_ERROR: PermissionError: host '127.0.0.1' is not in this tool's allow_hosts"
    )
    assert hits == []


def test_a_host_cannot_come_from_the_arguments(
    make_agent: AgentFactory, api: tuple[str, Hits]
) -> None:
    base, hits = api
    port = base.rsplit(":", 1)[1]
    # Arguments fill values, never structure (tests/security/test_http_tool_urls.py).
    with pytest.raises(ConfigError, match="may fill only a path segment or a query value"):
        api_tool(make_agent, f"http://{{city}}:{port}/x", allow_hosts=["*.example.com"])
    assert hits == []


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1", "2130706433", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0", "10.1.2.3"],
)
async def test_private_addresses_are_refused_unless_allowed(
    make_agent: AgentFactory, api: tuple[str, Hits], host: str
) -> None:
    base, hits = api
    port = base.rsplit(":", 1)[1]
    bare = host.strip("[]")
    tool = api_tool(make_agent, f"http://{host}:{port}/x", allow_hosts=[bare], allow_private=False)

    with pytest.raises(PermissionError, match=f"address {bare} is private or loopback"):
        await tool.function({})
    assert hits == []


async def test_a_name_resolving_to_loopback_is_refused_unless_allowed(
    make_agent: AgentFactory, api: tuple[str, Hits]
) -> None:
    base, hits = api
    port = base.rsplit(":", 1)[1]
    url = f"http://localhost:{port}/x"
    refused = api_tool(make_agent, url, allow_hosts=["localhost"], allow_private=False)
    allowed = api_tool(make_agent, url, allow_hosts=["localhost"], allow_private=True)

    with pytest.raises(OSError, match="localhost"):
        await refused.function({})
    assert hits == []
    await allowed.function({})
    assert len(hits) == 1


async def test_a_huge_answer_is_not_read_past_what_the_model_is_given(
    make_agent: AgentFactory, aiohttp_server: AiohttpServer
) -> None:
    sent = 0

    async def endless(request: web.Request) -> web.StreamResponse:
        # 64 MB if it were read whole; the tool stops reading after its 16,000 characters.
        nonlocal sent
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})  # no charset
        await response.prepare(request)
        piece = "é" * 32_768  # two bytes each
        try:
            for _ in range(1024):
                await response.write(piece.encode())
                sent += len(piece)
        except (ConnectionResetError, ConnectionError):
            pass  # the tool closed the connection: what this test wants
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", endless)
    server = await aiohttp_server(app, host="127.0.0.1")
    tool = api_tool(make_agent, f"http://127.0.0.1:{server.port}/big")

    text = await tool.function({})

    assert text == "é" * 16_000
    # It stopped reading after 64 kB; what the kernel's socket buffers took (a few MB on
    # loopback) is all the server got out of its 64 MB.
    assert sent < 256 * 32_768, sent
