"""The ``retry`` interceptor repeats a tool call only when the failure is transient and the
tool is idempotent, against a local aiohttp server that counts the requests it receives."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from dynagent import Tool, ToolCallError
from dynagent.interceptors import Interceptor, InterceptorRegistry, RunContext, ToolOutcome
from dynagent.interceptors.base import ToolHandler
from dynagent.models import ToolCallRequest, ToolDefinition
from dynagent.tools.builtins import BUILTIN_TOOLS
from tests.support import AgentFactory, CallTools, Reply, ScriptedModelServer

ATTEMPTS = 3


class Api:
    """A local API: ``/status/<code>`` answers ``code``; ``/flaky`` answers 503 once, then
    200; ``/hang`` never answers. ``hits`` counts the requests each path received."""

    def __init__(self) -> None:
        self.base = ""
        self.hits: dict[str, int] = {}
        self.never = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.hits[path] = self.hits.get(path, 0) + 1
        if path.startswith("/status/"):
            status = int(path.removeprefix("/status/"))
            return web.json_response({"status": status}, status=status)
        if path == "/flaky":
            status = 503 if self.hits[path] == 1 else 200
            return web.json_response({"attempt": self.hits[path]}, status=status)
        if path == "/hang":
            await self.never.wait()
        return web.json_response({"path": path})


@pytest.fixture
async def api(aiohttp_server: AiohttpServer) -> Api:
    found = Api()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", found.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    found.base = f"http://127.0.0.1:{server.port}"
    return found


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so no one else takes it), never
    listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


class Attempts(Interceptor):
    """Inside ``retry``: counts the times a tool call is actually made."""

    name = "attempts"

    def __init__(self) -> None:
        self.count = 0

    async def wrap_tool(
        self, ctx: RunContext, call: ToolCallRequest, handler: ToolHandler
    ) -> ToolOutcome:
        self.count += 1
        return await handler(call)


async def run_tool(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    tool: dict[str, Any] | Tool,
    arguments: dict[str, Any] | None = None,
) -> tuple[str, int]:
    """Let the model call ``tool`` once, under ``retry`` (3 attempts, no backoff): what the
    model got back, and how many times the call was made."""
    attempts = Attempts()
    registry = InterceptorRegistry.default()
    registry.register("attempts", lambda config: attempts)
    model_server.script("gpt-main", [CallTools([("call_api", arguments or {})]), Reply("done")])
    code = [tool] if isinstance(tool, Tool) else []
    agent = make_agent(
        tools=code,
        spec_tools=None if code else [tool],
        interceptor_registry=registry,
        interceptors=[{"retry": {"max_attempts": ATTEMPTS, "backoff": 0}}, "attempts"],
    )
    await agent.run("go")
    results = [m["content"] for m in model_server.requests[-1]["messages"] if m["role"] == "tool"]
    return results[0], attempts.count


def http_spec(url: str, method: str = "GET", **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "call_api",
        "method": method,
        "url": url,
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        "allow_hosts": ["127.0.0.1"],
        "allow_private": True,
        **extra,
    }


async def test_a_post_answered_409_is_sent_exactly_once(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api
) -> None:
    spec = http_spec(f"{api.base}/status/409", "POST")

    result, _ = await run_tool(make_agent, model_server, spec)

    assert api.hits == {"/status/409": 1}
    assert result == 'TOOL_ERROR: ToolCallError: HTTP 409: {"status": 409}'


@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_a_post_or_patch_answered_503_is_sent_once(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api, method: str
) -> None:
    await run_tool(make_agent, model_server, http_spec(f"{api.base}/status/503", method))

    assert api.hits == {"/status/503": 1}


async def test_a_post_marked_idempotent_answered_503_is_sent_up_to_max_attempts(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api
) -> None:
    spec = http_spec(f"{api.base}/status/503", "POST", idempotent=True)

    result, _ = await run_tool(make_agent, model_server, spec)

    assert api.hits == {"/status/503": ATTEMPTS}
    assert result.startswith("TOOL_ERROR: ToolCallError: HTTP 503")


@pytest.mark.parametrize("status", [503, 500, 429, 408])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_an_idempotent_method_answered_5xx_429_or_408_is_retried(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    api: Api,
    method: str,
    status: int,
) -> None:
    await run_tool(make_agent, model_server, http_spec(f"{api.base}/status/{status}", method))

    assert api.hits == {f"/status/{status}": ATTEMPTS}


async def test_a_get_that_recovers_gives_the_model_the_good_answer(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api
) -> None:
    result, _ = await run_tool(make_agent, model_server, http_spec(f"{api.base}/flaky"))

    assert api.hits == {"/flaky": 2}
    assert result == '{"attempt": 2}'


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
async def test_a_get_answered_another_4xx_is_sent_once(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api, status: int
) -> None:
    await run_tool(make_agent, model_server, http_spec(f"{api.base}/status/{status}"))

    assert api.hits == {f"/status/{status}": 1}


async def test_a_get_idempotent_false_is_not_retried(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api
) -> None:
    spec = http_spec(f"{api.base}/status/503", idempotent=False)

    await run_tool(make_agent, model_server, spec)

    assert api.hits == {"/status/503": 1}


async def test_a_refused_connection_on_get_is_retried(
    make_agent: AgentFactory, model_server: ScriptedModelServer, refusing_port: int
) -> None:
    spec = http_spec(f"http://127.0.0.1:{refusing_port}/x")

    result, attempts = await run_tool(make_agent, model_server, spec)

    assert attempts == ATTEMPTS
    assert result.startswith("TOOL_ERROR: ToolCallError: Cannot connect to host 127.0.0.1")


async def test_a_refused_connection_on_post_is_not_retried(
    make_agent: AgentFactory, model_server: ScriptedModelServer, refusing_port: int
) -> None:
    spec = http_spec(f"http://127.0.0.1:{refusing_port}/x", "POST")

    _, attempts = await run_tool(make_agent, model_server, spec)

    assert attempts == 1


async def test_a_get_that_times_out_is_retried(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api
) -> None:
    spec = http_spec(f"{api.base}/hang", timeout=0.1)

    result, _ = await run_tool(make_agent, model_server, spec)

    assert api.hits == {"/hang": ATTEMPTS}
    assert "0.1 s" in result


async def test_arguments_the_url_refuses_are_never_retried(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api
) -> None:
    spec = http_spec(api.base + "/items/{id}")

    result, attempts = await run_tool(make_agent, model_server, spec, {"id": ".."})

    assert (attempts, api.hits) == (1, {})
    assert result.startswith("TOOL_ERROR: ValueError: argument 'id' = '..' would change")


async def test_a_host_the_policy_refuses_is_never_retried(
    make_agent: AgentFactory, model_server: ScriptedModelServer, api: Api
) -> None:
    private = http_spec(f"{api.base}/x", allow_private=False)
    outside = http_spec(f"{api.base}/x", allow_hosts=["api.example.com"])

    for spec in (private, outside):
        result, attempts = await run_tool(make_agent, model_server, spec)
        assert attempts == 1
        assert result.startswith("TOOL_ERROR: PermissionError: ")
    assert api.hits == {}


async def test_a_code_tool_is_retried_only_when_idempotent_and_the_failure_transient(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    def failing(error: Exception, *, idempotent: bool) -> Tool:
        async def run(arguments: dict[str, Any]) -> str:
            raise error

        definition = ToolDefinition("call_api", "", {"type": "object", "properties": {}})
        return Tool.of(definition, run, idempotent=idempotent)

    blip = ToolCallError("blip", transient=True)
    cases = {
        "transient, idempotent": (failing(blip, idempotent=True), ATTEMPTS),
        "transient, not idempotent": (failing(blip, idempotent=False), 1),
        "not transient": (failing(ToolCallError("no such order"), idempotent=True), 1),
        "untyped": (failing(RuntimeError("down"), idempotent=True), 1),
    }
    counted = {
        case: (await run_tool(make_agent, model_server, tool))[1]
        for case, (tool, _) in cases.items()
    }

    assert counted == {case: expected for case, (_, expected) in cases.items()}


def test_the_builtins_declare_they_may_be_repeated() -> None:
    assert {tool.name: tool.idempotent for tool in BUILTIN_TOOLS} == {
        "calculator": True,
        "current_time": True,
    }
