"""An MCP tool call carries the run's W3C trace context, against a real MCP server (the
official SDK, ``tests/mcp/server.py``) that reports what each call arrived with: over
streamable HTTP and SSE as a ``traceparent`` request header and in ``params._meta``, naming
the tool call's ``execute_tool`` span, a child of the run's span in the caller's trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynagent.core.otel import OtelTracer
from tests.mcp.conftest import mcp_process
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.otel import CALLER_TRACE, TRACEPARENT, by_start, in_memory, traceparent
from tests.support.service import agent_document, running_service, service_config, write_agent


@pytest.mark.parametrize("transport", ["streamable_http", "sse"])
async def test_an_mcp_call_names_its_execute_tool_span_in_header_and_meta(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, transport: str
) -> None:
    with in_memory() as (exporter, provider):
        async with mcp_process(transport) as server:
            tool = {
                "type": "mcp",
                "name": "mcp",
                "url": server.url,
                "transport": transport,
                "allow_private": True,
            }
            write_agent(agents_dir, agent_document("bot", model_server, tools=[tool]))
            model_server.script(
                DEFAULT_MODEL,
                [
                    CallTools([("mcp_trace_context", {})]),
                    CallTools([("mcp_trace_context", {})]),
                    Reply("traced"),
                ],
            )
            config = service_config(agents_dir, state_dir)
            async with running_service(config, tracer=OtelTracer(provider)) as service:
                response = await service.client.post(
                    "/v1/agents/bot/invoke",
                    json={"input": "what trace?"},
                    headers={"traceparent": TRACEPARENT},
                )
                assert response.status == 200, await response.text()
                trace_id = (await response.json())["trace_id"]
                trace = await (await service.client.get(f"/v1/traces/{trace_id}")).json()
        spans = exporter.get_finished_spans()
    run = next(s for s in spans if s.name == "invoke_agent bot")
    tools = by_start(spans, "execute_tool ")
    assert [(s.name, s.parent, s.context.trace_id) for s in tools] == [
        ("execute_tool mcp_trace_context", run.context, int(CALLER_TRACE, 16))
    ] * 2
    seen = [json.loads(e["output"]) for e in trace["events"] if e["type"] == "tool_result"]
    # each call names its own tool span (two calls, two spans), not the run's span
    assert seen == [{"header": traceparent(s), "meta": traceparent(s)} for s in tools]
