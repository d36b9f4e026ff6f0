"""OpenTelemetry (the ``otel`` extra): one ``invoke_agent`` span per run with ``chat`` and
``execute_tool`` children built from the run's events, GenAI attributes, ``error.type`` on
failures, the caller's ``traceparent`` as parent; the model and HTTP-tool calls name the
innermost span (their ``chat`` or ``execute_tool``) as theirs; message content only when
opted in. Checked with the SDK's in-memory exporter, and over OTLP/HTTP against a receiver
on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dynagent import Tool, ToolRegistry
from dynagent.core.otel import OtelTracer
from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support.otel import CALLER_TRACE, TRACEPARENT, by_start, in_memory, shape, traceparent
from tests.support.process import free_port
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)


@pytest.fixture
def exported() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    with in_memory() as kept:
        yield kept


def tools() -> ToolRegistry:
    async def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    return ToolRegistry.default({"lookup": Tool.from_function(lookup)})


async def invoke(service: RunningService, body: dict[str, Any]) -> tuple[int, Any]:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json=body, headers={"traceparent": TRACEPARENT}
    )
    return response.status, await response.json()


async def test_a_run_is_one_invoke_agent_span_with_chat_and_tool_children(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    exported: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = exported
    document = agent_document("bot", model_server, tools=["lookup"])
    write_agent(agents_dir, document)
    model_server.script(DEFAULT_MODEL, [CallTools([("lookup", {"key": "k"})]), Reply("K it is")])
    tracer = OtelTracer(provider)
    prices = {DEFAULT_MODEL: {"input": 2.0, "output": 8.0}}  # US dollars per million tokens
    config = service_config(agents_dir, state_dir, models={"prices": prices})
    async with running_service(config, tools=tools(), tracer=tracer) as service:
        code, body = await invoke(service, {"input": "look up k", "session_id": "conv-1"})
    assert code == 200, body
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {int(CALLER_TRACE, 16)}
    rows = shape(spans)
    chat_attributes = [a for name, _, a in rows if name.startswith("chat")]
    usage = body["usage"]
    assert usage["cost_usd"] > 0
    assert rows == [
        (
            "invoke_agent bot",
            "caller",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "bot",
                "gen_ai.agent.version": revision_of(document),
                "dynagent.variant": "stable",
                "dynagent.trace_id": body["trace_id"],
                "gen_ai.conversation.id": "conv-1",
                # the whole run: both model calls' tokens, and what they cost
                "gen_ai.usage.input_tokens": usage["input_tokens"],
                "gen_ai.usage.output_tokens": usage["output_tokens"],
                "dynagent.cost_usd": usage["cost_usd"],
            },
        ),
        ("chat gpt-main", "invoke_agent bot", chat_attributes[0]),
        ("chat gpt-main", "invoke_agent bot", chat_attributes[1]),
        (
            "execute_tool lookup",
            "invoke_agent bot",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "call_1_0",
            },
        ),
    ]
    assert sorted(a["gen_ai.response.finish_reasons"] for a in chat_attributes) == [
        ("stop",),
        ("tool_calls",),
    ]
    for attributes in chat_attributes:
        assert attributes["gen_ai.request.model"] == "gpt-main"
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.usage.output_tokens"] > 0
        assert not any("messages" in key for key in attributes)  # no content unless opted in
    for key in ("input_tokens", "output_tokens"):
        assert sum(a[f"gen_ai.usage.{key}"] for a in chat_attributes) == usage[key]
    # each model call named its own chat span as the parent, not the run's span
    chats = by_start(spans, "chat ")
    assert model_server.traceparents == [traceparent(chat) for chat in chats]


async def test_a_failed_run_sets_error_type_and_content_only_when_opted_in(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    exported: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = exported
    write_agent(agents_dir, agent_document("bot", model_server, model={"retries": 0}))
    model_server.script(DEFAULT_MODEL, [Reply("the answer"), Fail(500)])
    tracer = OtelTracer(provider, capture_content=True)
    async with running_service(service_config(agents_dir, state_dir), tracer=tracer) as service:
        assert (await invoke(service, {"input": "question"}))[0] == 200
        assert (await invoke(service, {"input": "again"}))[0] == 502
    spans = exporter.get_finished_spans()
    first, second = [s for s in spans if s.name == "invoke_agent bot"]
    assert (first.attributes or {})["gen_ai.input.messages"] == '"question"'
    assert (first.attributes or {})["gen_ai.output.messages"] == '"the answer"'
    assert ((second.attributes or {})["error.type"], second.status.status_code.name) == (
        "model_error",
        "ERROR",
    )
    failed_chat = [s for s in spans if s.name == "chat gpt-main" and s.parent == second.context]
    assert [(s.attributes or {}).get("error.type") for s in failed_chat] == ["model_error"]


async def test_spans_are_exported_over_otlp_http_as_the_otel_variables_say(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    received: list[ExportTraceServiceRequest] = []

    async def traces(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_SERVICE_NAME": "dynagent-test",
    }
    tracer = OtelTracer.from_environ(environ)
    assert tracer is not None
    try:
        write_agent(agents_dir, agent_document("bot", model_server))
        model_server.script(DEFAULT_MODEL, [Reply("hi")])
        config = service_config(agents_dir, state_dir)
        async with running_service(config, tracer=tracer) as service:
            assert (await invoke(service, {"input": "hello"}))[0] == 200
        # leaving the app shut the tracer down, which flushes the batch
    finally:
        await runner.cleanup()
    spans = [
        (span.name, resource.resource)
        for message in received
        for resource in message.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert sorted(name for name, _ in spans) == ["chat gpt-main", "invoke_agent bot"]
    service_names = {
        a.value.string_value
        for _, resource in spans
        for a in resource.attributes
        if a.key == "service.name"
    }
    assert service_names == {"dynagent-test"}


async def test_an_http_tool_call_names_its_execute_tool_span_as_parent(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    exported: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = exported
    seen: list[str | None] = []

    async def weather(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({"sky": "clear"})

    app = web.Application()
    app.router.add_get("/weather", weather)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    tool = {
        "type": "http",
        "name": "weather",
        "url": f"http://127.0.0.1:{port}/weather",
        "allow_hosts": ["127.0.0.1"],
        "allow_private": True,
    }
    try:
        write_agent(agents_dir, agent_document("bot", model_server, tools=[tool]))
        model_server.script(DEFAULT_MODEL, [CallTools([("weather", {})]), Reply("clear")])
        config = service_config(agents_dir, state_dir)
        async with running_service(config, tracer=OtelTracer(provider)) as service:
            assert (await invoke(service, {"input": "weather?"}))[0] == 200
    finally:
        await runner.cleanup()
    spans = exporter.get_finished_spans()
    run = next(s for s in spans if s.name == "invoke_agent bot")
    (called,) = by_start(spans, "execute_tool ")
    assert (called.parent, called.context.trace_id) == (run.context, int(CALLER_TRACE, 16))
    assert seen == [traceparent(called)]  # the tool's own span, under the run's
