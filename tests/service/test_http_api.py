"""The HTTP API on its happy paths: health, status, invoke, variables, sessions, SSE,
traces, metrics and the OpenAPI document."""

from __future__ import annotations

import json
import os
import re
import resource
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from dynagent.http import routing
from dynagent.http.app import create_app
from dynagent.http.openapi import UNDOCUMENTED, UndocumentedRoute
from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support._wire import estimate_tokens
from tests.support.service import (
    RunningService,
    agent_document,
    parse_sse,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

PROMPT = "You are the assistant of {{company}} for {{team}}."


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    """``bot`` on the scripted model, with prompt variables and the calculator tool."""
    document = agent_document(
        "bot",
        model_server,
        system=PROMPT,
        description="Test bot.",
        prompt={"system": PROMPT, "variables": {"company": "ACME"}},
        tools=["calculator"],
    )
    write_agent(agents_dir, document)
    async with running_service(service_config(agents_dir, state_dir)) as running:
        assert running.serving("bot") == revision_of(document)
        yield running


def usage(*requests: dict[str, Any], answers: list[str]) -> dict[str, int]:
    prompt = sum(estimate_tokens(r["messages"]) for r in requests)
    completion = sum(estimate_tokens(a) for a in answers)
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def test_health_and_readiness(service: RunningService) -> None:
    health = await service.client.get("/healthz")
    ready = await service.client.get("/readyz")
    assert (health.status, await health.json()) == (200, {"status": "ok"})
    assert (ready.status, await ready.json()) == (
        200,
        {"status": "ready", "agents": 1, "degraded": {}},
    )
    service.registry.readiness.ready = False  # as before the sources have loaded
    loading = await service.client.get("/readyz")
    assert (loading.status, (await loading.json())["status"]) == (503, "loading")


async def test_agents_are_listed_with_their_status(
    service: RunningService, agents_dir: Path
) -> None:
    listed = await (await service.client.get("/v1/agents")).json()
    single = await (await service.client.get("/v1/agents/bot")).json()
    assert listed == {"agents": [single]}
    assert isinstance(single.pop("loaded_at"), float)
    assert isinstance(single["revisions"][0].pop("loaded_at"), float)
    source = {"kind": "file", "location": str((agents_dir / "bot.yaml").resolve())}
    assert single == {
        "name": "bot",
        "state": "serving",
        "revision": service.serving("bot"),
        "description": "Test bot.",
        "source": source,
        "factory": "default",
        "last_error": None,
        "canary": None,
        "traffic": {},
        "revisions": [
            {
                "revision": service.serving("bot"),
                "variant": "stable",
                "factory": "default",
                "source": source,
            }
        ],
    }


async def test_invoke_answers_with_the_whole_result(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Hello there.")])
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi", "variables": {"team": "sales"}}
    )
    body = await response.json()
    assert response.status == 200
    assert re.fullmatch(r"[0-9a-f]{32}", body["trace_id"])
    assert body == {
        "output": "Hello there.",
        "agent": "bot",
        "revision": service.serving("bot"),
        "variant": "stable",
        "trace_id": response.headers["X-Trace-Id"],
        "session_id": None,
        "usage": usage(*model_server.requests, answers=["Hello there."]),
        "steps": 1,
    }
    assert (response.headers["X-Agent-Revision"], response.headers["X-Agent-Variant"]) == (
        service.serving("bot"),
        "stable",
    )


async def test_request_variables_fill_the_prompt_over_its_defaults(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("one"), Reply("two")])
    for variables in ({"team": "billing"}, {"team": "shipping", "company": "Globex"}):
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi", "variables": variables}
        )
        assert response.status == 200
    assert [r["messages"][:2] for r in model_server.requests] == [
        [
            {"role": "system", "content": "You are the assistant of ACME for billing."},
            {"role": "user", "content": "hi"},
        ],
        [
            {"role": "system", "content": "You are the assistant of Globex for shipping."},
            {"role": "user", "content": "hi"},
        ],
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_missing_variable_is_a_bad_request(service: RunningService, stream: bool) -> None:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi", "stream": stream}
    )
    assert (response.status, response.content_type) == (400, "application/json")
    assert await response.json() == {
        "error": {
            "type": "bad_request",
            "message": "the prompt of agent 'bot' needs variable 'team'; pass it in 'variables'",
        }
    }


async def test_a_session_continues_the_conversation(
    service: RunningService, model_server: ScriptedModelServer, state_dir: Path
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Hi Ada."), Reply("Your name is Ada."), Reply("?")])
    turns = [("s-1", "My name is Ada."), ("s-1", "What is my name?"), ("s-2", "Who am I?")]
    bodies = []
    for session_id, text in turns:
        response = await service.client.post(
            "/v1/agents/bot/invoke",
            json={"input": text, "session_id": session_id, "variables": {"team": "x"}},
        )
        bodies.append(await response.json())
    assert [(b["session_id"], b["output"]) for b in bodies] == [
        ("s-1", "Hi Ada."),
        ("s-1", "Your name is Ada."),
        ("s-2", "?"),
    ]
    system = {"role": "system", "content": "You are the assistant of ACME for x."}
    assert [r["messages"] for r in model_server.requests[1:]] == [
        [
            system,
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hi Ada."},
            {"role": "user", "content": "What is my name?"},
        ],
        [system, {"role": "user", "content": "Who am I?"}],
    ]
    assert (state_dir / "sessions.db").is_file()


async def test_a_streamed_run_sends_every_event_then_the_trace_keeps_them(
    service: RunningService, model_server: ScriptedModelServer, agents_dir: Path
) -> None:
    model_server.script(
        DEFAULT_MODEL, [CallTools([("calculator", {"expression": "6*7"})]), Reply("It is 42.")]
    )
    response = await service.client.post(
        "/v1/agents/bot/invoke",
        json={"input": "6 times 7?", "variables": {"team": "math"}, "stream": True},
    )
    assert (response.status, response.content_type) == (200, "text/event-stream")
    events = parse_sse(await response.text())
    trace_id = response.headers["X-Trace-Id"]

    assert [name for name, _ in events] == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "model_request",
        *["model_delta"] * (len(events) - 9),  # joined when they arrive close together
        "model_response",
        "final_output",
        "run_finished",
    ]
    data = [payload for _, payload in events]
    assert all(d["type"] == name and d["trace_id"] == trace_id for name, d in events)
    assert response.headers["X-Agent-Revision"] == data[0]["revision"] == service.serving("bot")
    assert "".join(d["text"] for d in data if d["type"] == "model_delta") == "It is 42."
    assert [(d["name"], d["output"]) for d in data if d["type"] == "tool_result"] == [
        ("calculator", "42")
    ]
    assert (data[-2]["output"], data[-1]["status"]) == ("It is 42.", "ok")

    trace = await (await service.client.get(f"/v1/traces/{trace_id}")).json()
    assert trace == {
        "trace_id": trace_id,
        "agent": "bot",
        "revision": service.serving("bot"),
        "variant": "stable",
        "owner": "anonymous",
        "factory": "default",
        "source": {"kind": "file", "location": str((agents_dir / "bot.yaml").resolve())},
        "events": data,
    }


async def test_the_trace_of_a_json_run(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("ok")])
    body = await (
        await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi", "variables": {"team": "x"}}
        )
    ).json()
    trace = await (await service.client.get(f"/v1/traces/{body['trace_id']}")).json()
    assert [e["type"] for e in trace["events"]] == [
        "run_started",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]
    assert trace["events"][0] | {"at": 0} == {
        "type": "run_started",
        "trace_id": body["trace_id"],
        "step": 0,
        "at": 0,
        "agent": "bot",
        "revision": body["revision"],
        "variant": "stable",
        "session_id": None,
        "input": "hi",
    }


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_count_runs_per_agent_and_variant(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("one"), Reply("two"), Fail(400), Reply("three")])
    run = {"input": "hi", "variables": {"team": "x"}}
    statuses = [
        (await service.client.post("/v1/agents/bot/invoke", json=run)).status for _ in range(3)
    ]
    streamed = await service.client.post("/v1/agents/bot/invoke", json={**run, "stream": True})
    await streamed.read()
    assert statuses == [200, 200, 502]

    response = await service.client.get("/metrics")
    assert response.content_type == "text/plain"
    found = samples(await response.text())

    def value(name: str, **labels: str) -> float | None:
        return found.get((name, frozenset(labels.items())))

    bot = {"agent": "bot", "variant": "stable"}
    assert value("dynagent_requests_total", **bot, endpoint="invoke", outcome="ok") == 3
    assert value("dynagent_requests_total", **bot, endpoint="invoke", outcome="error") == 1
    assert value("dynagent_errors_total", **bot, type="model_error") == 1
    assert value("dynagent_request_duration_seconds_count", **bot) == 4
    tokens = usage(*model_server.requests[:2], model_server.requests[3], answers=["one", "two"])
    assert value("dynagent_tokens_total", **bot, kind="input") == tokens["input_tokens"]
    assert value("dynagent_reloads_total", agent="bot", result="swapped") == 1
    assert value("dynagent_agents") == 1


async def test_metrics_describe_the_process_and_its_garbage_collector(
    service: RunningService,
) -> None:
    # The service runs in this process: its figures are this process's, read around them.
    cpu_before = time.process_time()
    found = samples(await (await service.client.get("/metrics")).text())
    cpu_after = time.process_time()
    names = {name for name, _ in found}
    rss = found[("process_resident_memory_bytes", frozenset())]
    fds = found[("process_open_fds", frozenset())]
    cpu = found[("process_cpu_seconds_total", frozenset())]
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    assert 0 < rss <= peak_rss
    assert 0 < fds <= found[("process_max_fds", frozenset())]
    tick = 1 / os.sysconf("SC_CLK_TCK")  # /proc counts CPU time in clock ticks
    assert cpu_before - 2 * tick <= cpu <= cpu_after
    assert ("python_info" in names) and ("python_gc_collections_total" in names)
    assert {labels for name, labels in found if name == "python_gc_objects_collected_total"} == {
        frozenset({("generation", str(generation))}) for generation in range(3)
    }


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, less the HEAD beside each GET and
    the routes the document leaves out on purpose (each with its reason)."""
    routes = set()
    for route in app.router.routes():
        assert route.resource is not None
        routes.add((route.method, route.resource.canonical))
    heads = {("HEAD", path) for method, path in routes if method == "GET"}
    return routes - heads - UNDOCUMENTED.keys()


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for item in node for r in refs(item)]
    return []


async def test_the_openapi_document_describes_the_whole_contract(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    response = await service.client.get("/openapi.json")
    document = await response.json()
    assert document["openapi"].startswith("3.1")
    documented = {
        (method.upper(), path) for path, ops in document["paths"].items() for method in ops
    }
    assert documented == served(service.app)
    some = {("GET", "/healthz"), ("POST", "/v1/agents/{name}/invoke"), ("POST", "/a2a/{name}")}
    assert some <= documented
    schemas = document["components"]["schemas"]
    for ref in refs(document):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    for schema in schemas.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    for operation in (ops[m] for ops in document["paths"].values() for m in ops):
        assert "200" in operation["responses"]
        assert operation["tags"], operation["summary"]
        assert all(code.isdigit() for code in operation["responses"])

    # Real answers match the documented schemas.
    def check(name: str, answer: Any) -> None:
        reference = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
        jsonschema.Draft202012Validator(reference).validate(answer)

    model_server.script(DEFAULT_MODEL, [Reply("ok")])
    ok = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi", "variables": {"team": "x"}}
    )
    check("InvokeResponse", await ok.json())
    error = await (await service.client.get("/v1/agents/nobody")).json()
    check("ErrorResponse", error)

    echo = agent_document("echo")  # the offline model: it echoes
    service.write_agent(echo)
    await service.wait_serving("echo", revision_of(echo))
    card = await service.client.get("/a2a/echo/.well-known/agent-card.json")
    check("AgentCard", await card.json())
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}
    send = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    operation = document["paths"]["/a2a/{name}"]["post"]
    requests = operation["requestBody"]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**requests, "components": document["components"]}).validate(
        send
    )
    answer = await (await service.client.post("/a2a/echo", json=send)).json()
    parts = [{"kind": "text", "text": "[test model] you said: hi | prompt: You are a test agent."}]
    assert answer.get("result", {}).get("parts") == parts, answer
    check("SendMessageResponse", answer)
    # A run that fails (bot's prompt needs a variable A2A cannot pass) and a bad request.
    failed = await (await service.client.post("/a2a/bot", json=send)).json()
    assert failed["error"]["data"] == {"type": "bad_request"}, failed
    check("SendMessageResponse", failed)
    refused = await (await service.client.post("/a2a/bot", json={**send, "method": "x"})).json()
    assert refused["error"]["code"] == -32601, refused
    check("SendMessageResponse", refused)


async def test_an_app_with_an_undocumented_route_is_not_made(
    agents_dir: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stray = web.RouteTableDef()

    @stray.get("/v1/stray")
    async def handler(request: web.Request) -> web.Response:
        return web.Response()

    monkeypatch.setattr(routing, "TABLES", (*routing.TABLES, stray))
    with pytest.raises(UndocumentedRoute, match=r"^GET /v1/stray has no Route"):
        create_app(service_config(agents_dir, state_dir))


async def test_a_structured_output_json_cannot_hold_is_answered_as_valid_json(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    # The model's JSON may spell NaN and numbers past a float's range, which parse (to
    # NaN and infinity) and meet a schema that only asks for numbers; JSON has no form
    # for them, and the answer must still be JSON a strict parser reads.
    document = agent_document(
        "shaped", model_server, output={"schema": {"type": "object"}, "retries": 0}
    )
    write_agent(agents_dir, document)
    model_server.script(DEFAULT_MODEL, [Reply('{"ratio": NaN, "big": 1e400, "n": 2}')])
    async with running_service(service_config(agents_dir, state_dir)) as running:
        response = await running.client.post("/v1/agents/shaped/invoke", json={"input": "go"})
        text = await response.text()
    assert response.status == 200

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    body = json.loads(text, parse_constant=refuse)
    assert body["output"] == {"ratio": None, "big": None, "n": 2}
    assert body["agent"] == "shaped"
