"""OpenTelemetry for streamed runs: SSE on ``/v1/agents/{name}/invoke`` and ``stream: true``
on ``/v1/chat/completions``. The ``invoke_agent`` span ends when the stream does (exported
while the service still runs), with ``chat`` and ``execute_tool`` children carrying token
usage, the model calls naming their ``chat`` span; a stream that fails sets ``error.type``,
and so does a caller that goes away mid-stream (``disconnected``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dynagent import Tool, ToolRegistry
from dynagent.core.otel import OtelTracer
from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support.otel import (
    CALLER_TRACE,
    TRACEPARENT,
    Ended,
    attributes,
    by_start,
    in_memory,
    traceparent,
)
from tests.support.service import (
    Gate,
    RunningService,
    agent_document,
    parse_sse,
    revision_of,
    running_service,
    service_config,
)

STREAMS = {
    "invoke": ("/v1/agents/bot/invoke", {"input": "look up k", "stream": True}),
    "chat.completions": (
        "/v1/chat/completions",
        {"model": "bot", "messages": [{"role": "user", "content": "look up k"}], "stream": True},
    ),
}


@pytest.fixture
def ended() -> Ended:
    return Ended()


@pytest.fixture
def exported(ended: Ended) -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    with in_memory(ended) as kept:
        yield kept


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
async def service(
    agents_dir: Path,
    state_dir: Path,
    exported: tuple[InMemorySpanExporter, TracerProvider],
    gate: Gate,
) -> AsyncIterator[RunningService]:
    async def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    tools = ToolRegistry.default({"lookup": Tool.from_function(lookup), "gate": gate.tool})
    config = service_config(agents_dir, state_dir)
    async with running_service(config, tools=tools, tracer=OtelTracer(exported[1])) as running:
        yield running


async def stream(service: RunningService, route: str) -> tuple[int, list[tuple[str, Any]]]:
    path, body = STREAMS[route]
    response = await service.client.post(path, json=body, headers={"traceparent": TRACEPARENT})
    text = await response.text()
    return response.status, parse_sse(text) if response.status == 200 else [("error", text)]


def run_span(spans: tuple[ReadableSpan, ...]) -> ReadableSpan:
    (run,) = [s for s in spans if s.name == "invoke_agent bot"]
    return run


@pytest.mark.parametrize("route", sorted(STREAMS))
async def test_a_streamed_run_ends_its_span_with_the_stream_and_has_its_children(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    service: RunningService,
    exported: tuple[InMemorySpanExporter, TracerProvider],
    route: str,
) -> None:
    document = agent_document("bot", model_server, tools=["lookup"])
    service.write_agent(document)
    await service.registry.wait_for(lambda r: "bot" in r)
    model_server.script(DEFAULT_MODEL, [CallTools([("lookup", {"key": "k"})]), Reply("K it is")])
    status, events = await stream(service, route)
    assert status == 200, events
    spans = exported[0].get_finished_spans()  # the service still runs: ended by the stream
    run = run_span(spans)
    assert (run.parent and f"{run.parent.span_id:016x}", run.context.trace_id) == (
        TRACEPARENT.split("-")[2],
        int(CALLER_TRACE, 16),
    )
    chats, tools = by_start(spans, "chat "), by_start(spans, "execute_tool ")
    assert {k: v for k, v in (run.attributes or {}).items() if k != "dynagent.trace_id"} == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "bot",
        "gen_ai.agent.version": revision_of(document),
        "dynagent.variant": "stable",
        # the whole streamed run's tokens: its two model calls'
        **{
            f"gen_ai.usage.{key}": sum(attributes(s)[f"gen_ai.usage.{key}"] for s in chats)
            for key in ("input_tokens", "output_tokens")
        },
    }
    assert run.status.status_code.name == "UNSET"
    assert [(s.name, s.parent) for s in [*chats, *tools]] == [
        ("chat gpt-main", run.context),
        ("chat gpt-main", run.context),
        ("execute_tool lookup", run.context),
    ]
    usage = [
        (
            attributes(s)["gen_ai.response.finish_reasons"],
            attributes(s)["gen_ai.usage.input_tokens"] > 0,
            attributes(s)["gen_ai.usage.output_tokens"] > 0,
        )
        for s in chats
    ]
    assert usage == [(("tool_calls",), True, True), (("stop",), True, True)]
    assert model_server.traceparents == [traceparent(chat) for chat in chats]
    assert run.end_time is not None and all(
        (s.end_time or 0) <= run.end_time for s in [*chats, *tools]
    )


@pytest.mark.parametrize("route", sorted(STREAMS))
async def test_a_streamed_run_that_fails_sets_error_type_on_its_span(
    model_server: ScriptedModelServer,
    service: RunningService,
    exported: tuple[InMemorySpanExporter, TracerProvider],
    route: str,
) -> None:
    service.write_agent(agent_document("bot", model_server, tools=["lookup"], model={"retries": 0}))
    await service.registry.wait_for(lambda r: "bot" in r)
    model_server.script(DEFAULT_MODEL, [CallTools([("lookup", {"key": "k"})]), Fail(500)])
    status, events = await stream(service, route)
    # the model answered once (the tool call): the stream had begun, so it carries the error
    errors = [data for _, data in events if isinstance(data, dict) and "error" in data]
    if route == "invoke":
        errors = [data for name, data in events if name == "error"]
    assert (status, len(errors)) == (200, 1), events
    spans = exported[0].get_finished_spans()
    run = run_span(spans)
    assert ((run.attributes or {}).get("error.type"), run.status.status_code.name) == (
        "model_error",
        "ERROR",
    )
    chats = by_start(spans, "chat ")
    assert [(s.parent, (s.attributes or {}).get("error.type")) for s in chats] == [
        (run.context, None),
        (run.context, "model_error"),
    ]
    assert [s.name for s in by_start(spans, "execute_tool ")] == ["execute_tool lookup"]


async def test_a_caller_that_leaves_mid_stream_ends_the_span_as_disconnected(
    model_server: ScriptedModelServer,
    service: RunningService,
    exported: tuple[InMemorySpanExporter, TracerProvider],
    ended: Ended,
    gate: Gate,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service.write_agent(agent_document("bot", model_server, tools=["gate"]))
    await service.registry.wait_for(lambda r: "bot" in r)
    # cycled: however far the run gets after the caller left, every step was foreseen
    model_server.script(DEFAULT_MODEL, [CallTools([("gate", {})])], cycle=True)
    path, body = STREAMS["invoke"]
    response = await service.client.post(path, json=body, headers={"traceparent": TRACEPARENT})
    assert response.status == 200
    await gate.entered.wait()
    response.close()  # the caller goes away while the tool runs
    gate.opened.set()
    with caplog.at_level(logging.WARNING, logger="opentelemetry"):
        await ended.wait_for("invoke_agent bot")
    run = run_span(exported[0].get_finished_spans())
    assert ((run.attributes or {}).get("error.type"), run.status.status_code.name) == (
        "disconnected",
        "ERROR",
    )
    # the span was current in the handler's task only, and left it there: ending it
    # elsewhere (the stream's generator closed after the handler failed) is no error
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []
