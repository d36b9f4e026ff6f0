"""Built-in interceptors by name, and the hook order of code interceptors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynagent import LimitExceeded, ModelError, Tool, ToolCallError
from dynagent.events import FinalOutput, ModelResponseEvent, ToolCallEvent
from dynagent.interceptors import Interceptor, InterceptorRegistry, RunContext, ToolOutcome
from dynagent.interceptors.base import ModelHandler
from dynagent.interceptors.pii import PiiConfig, PiiRedaction
from dynagent.models import ModelRequest, ModelResponse, ToolCallRequest, ToolDefinition
from dynagent.runtime._redaction import INLINE_CHARS
from tests.support import (
    SYSTEM_PROMPT,
    AgentFactory,
    CallTools,
    Fail,
    Reply,
    ScriptedModelServer,
    event_types,
    of_type,
    one,
)

NO_ARGS = {"type": "object", "properties": {}}


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def constant_tool(name: str, text: str) -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        return text

    return Tool.of(ToolDefinition(name, "", NO_ARGS), run)


async def test_context_editing_clears_old_tool_results_past_the_budget(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script(
        "gpt-main",
        [
            CallTools([("first", {})]),
            CallTools([("second", {})]),
            CallTools([("third", {})]),
            Reply("done"),
        ],
    )
    tools = [constant_tool(n, f"{n} result " * 20) for n in ("first", "second", "third")]
    interceptors = [
        {"context_editing": {"trigger_tokens": 10, "keep_last": 1, "placeholder": "[cleared]"}}
    ]
    agent = make_agent(tools=tools, interceptors=interceptors)

    result = await agent.run("go")

    full = [f"{n} result " * 20 for n in ("first", "second", "third")]
    assert [tool_results(body) for body in model_server.requests] == [
        [],
        [full[0]],
        ["[cleared]", full[1]],
        ["[cleared]", "[cleared]", full[2]],
    ]
    assert result.output == "done"


async def test_pii_is_masked_for_the_model_and_in_events_but_not_in_the_result(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script(
        "gpt-main",
        [CallTools([("customer", {})]), Reply("Write to help@example.org about 123-45-6789.")],
    )
    agent = make_agent(
        tools=[constant_tool("customer", "SSN 123-45-6789, jane@corp.example.com")],
        interceptors=["pii_redaction"],
    )

    result = await agent.run("I am jane@corp.example.com, call +1 415 555 0100")

    assert model_server.requests[1]["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "I am [EMAIL], call [PHONE]"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "customer", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1_0", "content": "SSN [ID], [EMAIL]"},
    ]
    trace = json.dumps([event.as_dict() for event in result.events])
    for secret in ("jane@", "415 555", "123-45-6789", "help@example.org"):
        assert secret not in trace
    assert one(result.events, FinalOutput).output == "Write to [EMAIL] about [ID]."
    assert (
        result.output == "Write to help@example.org about 123-45-6789."
    )  # the caller's own answer


class CountingPii(PiiRedaction):
    """``pii_redaction`` that counts the times it masks ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(PiiConfig())
        self.text = text
        self.count = 0

    def _redact(self, text: str) -> str:
        self.count += text == self.text
        return super()._redact(text)


async def test_a_long_text_is_masked_once_per_run_however_many_steps_send_it(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    # A long system prompt: sent at every step, and in no event (events are masked too).
    long = "write to jane@corp.example.com " * (INLINE_CHARS // 20)
    pii = CountingPii(long)
    registry = InterceptorRegistry.default()
    registry.register("counting_pii", lambda config: pii)
    model_server.script(
        "gpt-main", [CallTools([("ping", {})]), CallTools([("ping", {})]), Reply("done")]
    )
    agent = make_agent(
        tools=[constant_tool("ping", "pong")],
        interceptor_registry=registry,
        interceptors=["counting_pii"],
        prompt={"system": long},
    )

    await agent.run("go")

    sent = [request["messages"][0]["content"] for request in model_server.requests]
    assert sent == [long.replace("jane@corp.example.com", "[EMAIL]")] * 3
    assert pii.count == 1


async def test_pii_in_the_model_s_tool_call_arguments_is_masked_in_the_trace(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script(
        "gpt-main", [CallTools([("customer", {"email": "jane@corp.example.com"})]), Reply("done")]
    )
    agent = make_agent(tools=[constant_tool("customer", "found")], interceptors=["pii_redaction"])

    result = await agent.run("look her up")

    masked = '{"email": "[EMAIL]"}'
    [response, _] = of_type(result.events, ModelResponseEvent)
    assert response.tool_calls == [{"id": "call_1_0", "name": "customer", "arguments": masked}]
    assert one(result.events, ToolCallEvent).arguments == masked


async def test_pii_masking_keeps_structured_output_intact(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    schema = {
        "type": "object",
        "properties": {"count": {"type": "integer"}, "phone": {"type": "string"}},
    }
    model_server.script("gpt-main", [Reply('{"count": 12345678, "phone": "+1 415 555 0100"}')])
    agent = make_agent(output={"schema": schema}, interceptors=["pii_redaction"])

    result = await agent.run("count them")

    assert result.output == {"count": 12345678, "phone": "+1 415 555 0100"}
    # A count is not a phone number: only the phone is masked in the trace.
    assert one(result.events, FinalOutput).output == {"count": 12345678, "phone": "[PHONE]"}


async def test_model_call_limit_ends_the_run(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [CallTools([("ping", {})])])
    agent = make_agent(
        tools=[constant_tool("ping", "pong")], interceptors=[{"model_call_limit": {"max": 1}}]
    )

    with pytest.raises(LimitExceeded) as caught:
        await agent.run("go")

    assert caught.value.message == "model call limit of 1 per run reached"
    assert event_types(caught.value.events) == [
        "run_started",
        "model_request",
        "model_response",
        "tool_call",
        "tool_result",
        "model_request",
        "error",
        "run_finished",
    ]


async def test_tool_call_limit_reports_calls_past_the_limit(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [CallTools([("ping", {}), ("ping", {})]), Reply("once")])
    agent = make_agent(
        tools=[constant_tool("ping", "pong")], interceptors=[{"tool_call_limit": {"max": 1}}]
    )

    await agent.run("go")

    assert tool_results(model_server.requests[1]) == [
        "pong",
        "TOOL_ERROR: tool call limit of 1 per run reached; answer without tools",
    ]


async def test_tool_call_limit_can_end_the_run(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [CallTools([("ping", {})]), CallTools([("ping", {})])])
    interceptors = [{"tool_call_limit": {"max": 1, "on_exceed": "fail"}}]
    agent = make_agent(tools=[constant_tool("ping", "pong")], interceptors=interceptors)

    with pytest.raises(LimitExceeded, match="tool call limit of 1 per run reached"):
        await agent.run("go")


async def test_the_retry_interceptor_retries_model_and_tool_calls(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    attempts: list[int] = []

    async def flaky(arguments: dict[str, Any]) -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            raise ToolCallError("blip", transient=True)
        return "steady"

    model_server.script("gpt-main", [Fail(500), CallTools([("flaky", {})]), Reply("ok")])
    agent = make_agent(
        tools=[Tool.of(ToolDefinition("flaky", "", NO_ARGS), flaky, idempotent=True)],
        model={"retries": 0},
        interceptors=[{"retry": {"max_attempts": 2, "backoff": 0}}],
    )

    result = await agent.run("go")

    assert result.output == "ok"
    assert attempts == [1, 2]
    assert tool_results(model_server.requests[2]) == ["steady"]


async def test_the_retry_interceptor_leaves_errors_a_retry_cannot_fix(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Fail(400)])
    agent = make_agent(
        model={"retries": 0}, interceptors=[{"retry": {"max_attempts": 3, "backoff": 0}}]
    )

    with pytest.raises(ModelError) as caught:
        await agent.run("go")

    assert (caught.value.status, len(model_server.requests)) == (400, 1)


class Recorder(Interceptor):
    """Logs every hook it sees; contributes a tool."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.tools = [constant_tool(f"{name}_tool", f"from {name}")]

    async def before_model(self, ctx: RunContext, request: ModelRequest) -> ModelRequest:
        self.log.append(f"{self.name}.before_model")
        return request

    async def wrap_model(
        self, ctx: RunContext, request: ModelRequest, call: ModelHandler
    ) -> ModelResponse:
        self.log.append(f"{self.name}.wrap_model>")
        response = await call(request)
        self.log.append(f"{self.name}.wrap_model<")
        return response

    async def after_model(self, ctx: RunContext, response: ModelResponse) -> ModelResponse:
        self.log.append(f"{self.name}.after_model")
        return response

    async def after_tool(
        self, ctx: RunContext, call: ToolCallRequest, outcome: ToolOutcome
    ) -> ToolOutcome:
        self.log.append(f"{self.name}.after_tool")
        return ToolOutcome(outcome.output + f" +{self.name}", outcome.is_error)


async def test_hooks_run_in_order_and_interceptors_contribute_tools(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    log: list[str] = []
    registry = InterceptorRegistry()
    registry.register("outer", lambda config: Recorder("outer", log))
    registry.register("inner", lambda config: Recorder("inner", log))
    model_server.script("gpt-main", [CallTools([("inner_tool", {})]), Reply("ok")])
    agent = make_agent(interceptor_registry=registry, interceptors=["outer", "inner"])

    await agent.run("go")

    model_call = [
        "outer.before_model",
        "inner.before_model",
        "outer.wrap_model>",
        "inner.wrap_model>",
        "inner.wrap_model<",
        "outer.wrap_model<",
        "inner.after_model",
        "outer.after_model",
    ]
    assert log == [*model_call, "inner.after_tool", "outer.after_tool", *model_call]
    assert [t["function"]["name"] for t in model_server.requests[0]["tools"]] == [
        "outer_tool",
        "inner_tool",
    ]
    assert tool_results(model_server.requests[1]) == ["from inner +inner +outer"]
