"""A credential written in a definition (``Authorization: Bearer abc…`` rather than
``${VAR}``) is a secret like one read from the environment: masked in run output, traces,
streams and logs when the endpoint echoes it, not only in the definition view."""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp import web
from loguru import logger
from pytest_aiohttp import AiohttpServer

from dynagent import AgentBuilder, Resources, load_spec
from dynagent.masking import MASK
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.service import (
    agent_document,
    parse_sse,
    revision_of,
    running_service,
    service_config,
)

TOKEN = "lit-0123456789abcdef"
API_KEY = "k9-8765432109zyx"
MODEL_KEY = "sk-literal-model-key-42"
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "X-Api-Key": API_KEY,
    "Accept": "application/json",  # no credential: a protocol word stays as it is
}


async def echo_server(aiohttp_server: AiohttpServer) -> int:
    """An endpoint that answers with the headers it was sent, as careless ones do."""

    async def echo(request: web.Request) -> web.Response:
        sent = {name: request.headers.get(name) for name in HEADERS}
        return web.json_response({"you sent": sent})

    app = web.Application()
    app.router.add_get("/echo", echo)
    server = await aiohttp_server(app, host="127.0.0.1")
    assert server.port is not None
    return server.port


async def test_literal_header_credentials_never_surface_when_the_endpoint_echoes_them(
    model_server: ScriptedModelServer,
    aiohttp_server: AiohttpServer,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    port = await echo_server(aiohttp_server)
    tool = {
        "type": "http",
        "name": "echo",
        "url": f"http://127.0.0.1:{port}/echo",
        "headers": HEADERS,
        "allow_hosts": ["127.0.0.1"],
        "allow_private": True,
    }
    document = agent_document("bot", model_server, tools=[tool])
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG")
    try:
        async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
            service.write_agent(document)
            await service.wait_serving("bot", revision_of(document))
            # The model repeats what it read, as a model may.
            said = f"the endpoint saw {TOKEN} and {API_KEY}"
            for _ in range(2):
                model_server.script(DEFAULT_MODEL, [CallTools([("echo", {})]), Reply(said)])
            invoked = await service.client.post("/v1/agents/bot/invoke", json={"input": "go"})
            body = await invoked.json()
            streamed = await service.client.post(
                "/v1/agents/bot/invoke", json={"input": "go", "stream": True}
            )
            stream = await streamed.text()
            trace_id = body["trace_id"]
            trace = await (await service.client.get(f"/v1/traces/{trace_id}")).json()
            shown = await service.client.get(f"/v1/agents/bot/revisions/{revision_of(document)}")
            definition = (await shown.json())["definition"]
    finally:
        logger.remove(sink)

    results = [e["output"] for e in trace["events"] if e["type"] == "tool_result"]
    assert [json.loads(result) for result in results] == [
        {"you sent": {"Authorization": MASK, "X-Api-Key": MASK, "Accept": "application/json"}}
    ]
    assert body["output"] == f"the endpoint saw {MASK} and {MASK}"
    assert definition["tools"][0]["headers"] == dict.fromkeys(HEADERS, MASK)
    for text in (json.dumps(body), stream, json.dumps(trace), *lines):
        assert TOKEN not in text
        assert API_KEY not in text
    assert [data["type"] for _, data in parse_sse(stream)][-1] == "run_finished"


async def test_every_credential_field_takes_a_literal_value_as_a_secret() -> None:
    """The same rule for each kind's headers and the model's key: what is written there
    as it is, not only what ``${VAR}`` brought in."""
    tools = [
        {
            "type": "http",
            "name": "orders",
            "url": "https://api.example.com/orders",
            "headers": {"Authorization": "Bearer http-literal-0123456789"},
            "allow_hosts": ["api.example.com"],
        },
        {
            "type": "agent",
            "name": "billing",
            "a2a": {"url": "https://agents.example.com/a2a/billing"},
            "headers": {"X-Token": "a2a-literal-0123456789"},
        },
    ]
    model = {"provider": "openai", "base_url": "https://models.example.com/v1"}
    spec = load_spec(
        {
            "name": "bot",
            "model": {**model, "api_key": MODEL_KEY},
            "prompt": {"system": "x"},
            "tools": tools,
        }
    )
    resources = Resources()
    try:
        agent = AgentBuilder(environ={}, resources=resources).build(spec)
    finally:
        await resources.aclose()
    assert agent.secrets is not None
    text = "http-literal-0123456789 a2a-literal-0123456789 sk-literal-model-key-42 Bearer"
    assert agent.secrets.mask(text) == f"{MASK} {MASK} {MASK} Bearer"
