"""Shadow traffic (``rollout.shadow``): a copy of stable requests runs on the canary in the
background. The caller gets the stable answer without waiting; the shadow is recorded for the
canary; a tool that is not ``shadow_safe`` is never executed (the model sees a placeholder),
and the shadow never writes the session. Traced, a shadow is an ``invoke_agent`` span of its
own (``dynagent.shadow``), a child of the stable request's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dynagent import Tool, ToolRegistry
from dynagent.core.otel import OtelTracer
from dynagent.http.state import SERVICE
from dynagent.rollout.shadow import PLACEHOLDER
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer, Slow
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.otel import TRACEPARENT, attributes, by_start, in_memory, traceparent
from tests.support.service import (
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

CANARY_MODEL = "gpt-canary"


def tools(sent: list[str], looked_up: list[str]) -> ToolRegistry:
    async def send_email(to: str) -> str:
        """Send an e-mail."""
        sent.append(to)
        return "sent"

    async def lookup(key: str) -> str:
        """Look a key up."""
        looked_up.append(key)
        return key.upper()

    safe = dataclasses.replace(Tool.from_function(lookup), shadow_safe=True)
    return ToolRegistry.default({"send_email": Tool.from_function(send_email), "lookup": safe})


def shadow_requests(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dynagent_requests_total" and sample.labels["endpoint"] == "shadow":
                return sample.value
    return 0.0


async def test_a_shadow_runs_on_the_canary_without_its_unsafe_tools_and_the_caller_never_waits(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    sent: list[str] = []
    looked_up: list[str] = []
    stable = agent_document("bot", model_server, system="Stable.", tools=["send_email", "lookup"])
    candidate = agent_document(
        "bot",
        model_server,
        system="Canary.",
        model={"name": CANARY_MODEL},
        tools=["send_email", "lookup"],
    )
    write_agent(agents_dir, stable)
    write_agent(
        agents_dir,
        canary_document(candidate, weight=0, shadow=100),
        filename=canary_filename("bot"),
    )
    model_server.script(DEFAULT_MODEL, [Reply("first"), Reply("second")])
    model_server.script(
        CANARY_MODEL,
        [
            Slow(0.3, CallTools([("send_email", {"to": "a@b.c"}), ("lookup", {"key": "k"})])),
            Reply("canary says"),
            Reply("canary again"),
        ],
    )
    options: dict[str, Any] = {"tools": tools(sent, looked_up)}
    async with running_service(service_config(agents_dir, state_dir), **options) as service:
        runner = service.app[SERVICE].shadows
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hello", "session_id": "s"}
        )
        body = await response.json()
        assert (response.status, body["variant"], body["output"]) == (200, "stable", "first")
        assert (runner.started, runner.running) == (1, 1)  # answered; the shadow (0.3 s) runs on
        await runner.idle()
        # the canary's second call saw a placeholder for the unsafe tool, the real safe one
        tool_messages = [m for m in model_server.requests[2]["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in tool_messages] == [PLACEHOLDER, "K"]
        assert (sent, looked_up) == ([], ["k"])
        metrics = await (await service.client.get("/metrics")).text()
        assert shadow_requests(metrics) == 1
        assert service.registry.status("bot")["traffic"]["canary"]["requests"] == 1

        # the session holds the stable's turn only; the next shadow sees that history
        second = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "again", "session_id": "s"}
        )
        assert (await second.json())["output"] == "second"
        await runner.idle()
    shadow_context = model_server.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in shadow_context[1:]] == [
        ("user", "hello"),
        ("assistant", "first"),
        ("user", "again"),
    ]


async def test_a_shadow_run_is_a_span_of_its_own_under_the_stable_requests(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable = agent_document("bot", model_server, system="Stable.", tools=["lookup"])
    candidate = agent_document(
        "bot", model_server, system="Canary.", model={"name": CANARY_MODEL}, tools=["lookup"]
    )
    write_agent(agents_dir, stable)
    write_agent(
        agents_dir,
        canary_document(candidate, weight=0, shadow=100),
        filename=canary_filename("bot"),
    )
    model_server.script(DEFAULT_MODEL, [Reply("stable says")])
    model_server.script(
        CANARY_MODEL, [Slow(0.3, CallTools([("lookup", {"key": "k"})])), Reply("canary says")]
    )
    options: dict[str, Any] = {"tools": tools([], [])}
    with in_memory() as (exporter, provider):
        config = service_config(agents_dir, state_dir)
        async with running_service(config, tracer=OtelTracer(provider), **options) as service:
            runner = service.app[SERVICE].shadows
            response = await service.client.post(
                "/v1/agents/bot/invoke",
                json={"input": "hello", "session_id": "s"},
                headers={"traceparent": TRACEPARENT},
            )
            assert (response.status, (await response.json())["output"]) == (200, "stable says")
            # answered while the shadow runs on: its span is not among the finished ones
            assert runner.running == 1
            assert [s.name for s in exporter.get_finished_spans()] == [
                "chat gpt-main",
                "invoke_agent bot",
            ]
            await runner.idle()
        spans = exporter.get_finished_spans()
    first, shadow = by_start(spans, "invoke_agent ")
    assert shadow.parent == first.context  # the caller's trace, under the stable run
    shadow_chats = [s for s in spans if s.parent == shadow.context and s.name.startswith("chat")]
    run_attributes = {
        k: v for k, v in (shadow.attributes or {}).items() if k != "dynagent.trace_id"
    }
    assert run_attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "bot",
        "gen_ai.agent.version": canary_revision(canary_document(candidate, weight=0)),
        "gen_ai.conversation.id": "s",
        "dynagent.variant": "canary",
        "dynagent.shadow": True,
        **{
            f"gen_ai.usage.{key}": sum(attributes(s)[f"gen_ai.usage.{key}"] for s in shadow_chats)
            for key in ("input_tokens", "output_tokens")
        },
    }
    assert (
        (first.attributes or {})["dynagent.variant"],
        "dynagent.shadow" in (first.attributes or {}),
    ) == ("stable", False)
    assert (first.attributes or {})["gen_ai.agent.version"] == revision_of(stable)
    children = [(s.name, s.parent) for s in spans if s.parent == shadow.context]
    assert sorted(children, key=lambda c: c[0]) == [
        ("chat gpt-canary", shadow.context),
        ("chat gpt-canary", shadow.context),
        ("execute_tool lookup", shadow.context),
    ]
    # the canary's model calls named the shadow's chat spans
    canary_chats = by_start(tuple(s for s in spans if s.parent == shadow.context), "chat ")
    assert model_server.traceparents[1:] == [traceparent(chat) for chat in canary_chats]


async def test_a_streamed_stable_request_is_shadowed_too_once_its_stream_has_ended(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    write_agent(agents_dir, stable)
    write_agent(
        agents_dir,
        canary_document(candidate, weight=0, shadow=100),
        filename=canary_filename("bot"),
    )
    model_server.script(DEFAULT_MODEL, [Reply("streamed stable")])
    model_server.script(CANARY_MODEL, [Reply("canary shadow")])
    async with running_service(service_config(agents_dir, state_dir)) as service:
        runner = service.app[SERVICE].shadows
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hello", "stream": True}
        )
        text = await response.text()
        assert response.headers["X-Agent-Variant"] == "stable"
        assert "streamed" in text and "canary" not in text
        await runner.idle()
        assert runner.started == 1
        metrics = await (await service.client.get("/metrics")).text()
        assert shadow_requests(metrics) == 1
    assert [r["model"] for r in model_server.requests] == [DEFAULT_MODEL, CANARY_MODEL]
