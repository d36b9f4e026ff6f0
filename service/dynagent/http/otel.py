"""OpenTelemetry for runs, with the GenAI semantic conventions (the ``otel`` extra).

One ``invoke_agent {name}`` span per run, opened when the request arrives (a W3C
``traceparent`` from the caller becomes its parent) and current while the agent runs, so
the model and HTTP-tool calls carry it on (``_tracing.outgoing_headers``). Its children —
``chat {model}`` per model call, ``execute_tool {tool}`` per tool call — are built from the
run's typed events when it ends, with the events' own times: nothing here runs inside the
run loop. Export is OTLP, configured by the standard ``OTEL_*`` variables. Message content
is recorded only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ..agent import Agent, Variant
from ..events import (
    ErrorEvent,
    Event,
    FinalOutput,
    ModelRequestEvent,
    ModelResponseEvent,
    RunStarted,
    ToolCallEvent,
    ToolResultEvent,
)

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def _ns(at: float) -> int:
    return int(at * 1_000_000_000)


@dataclass
class _Run:
    span: Span
    token: object | None


class OtelTracer:
    """A ``RunTracer`` on an SDK ``TracerProvider``."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool = False) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("dynagent")
        self.capture_content = capture_content

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> OtelTracer | None:
        """A tracer exporting over OTLP/HTTP when ``OTEL_*`` asks for it; else None."""
        if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
            return None
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        if not endpoint or environ.get("OTEL_TRACES_EXPORTER", "otlp") == "none":
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        traces_url = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
            endpoint.rstrip("/") + "/v1/traces"
        )
        headers = dict(
            pair.split("=", 1)
            for pair in environ.get("OTEL_EXPORTER_OTLP_HEADERS", "").split(",")
            if "=" in pair
        )
        exporter = OTLPSpanExporter(endpoint=traces_url, headers=headers or None)
        name = environ.get("OTEL_SERVICE_NAME", "dynagent")
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, capture_content=environ.get(CAPTURE, "").lower() == "true")

    def start(self, name: str, headers: Mapping[str, str]) -> _Run:
        parent = propagate.extract(dict(headers))
        span = self.tracer.start_span(
            f"invoke_agent {name}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name},
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        return _Run(span, token)

    def detach(self, handle: _Run) -> None:
        if handle.token is not None:
            otel_context.detach(handle.token)  # type: ignore[arg-type]
            handle.token = None

    def finish(
        self,
        handle: _Run,
        agent: Agent,
        variant: Variant,
        events: Sequence[Event],
        error: str | None,
    ) -> None:
        self.detach(handle)
        span = handle.span
        span.set_attributes(_run_attributes(agent, variant, events))
        parent = trace.set_span_in_context(span)
        self._children(parent, events)
        if self.capture_content:
            span.set_attributes(_content(events))
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def _children(self, parent: otel_context.Context, events: Sequence[Event]) -> None:
        request: ModelRequestEvent | None = None
        calls: dict[str, ToolCallEvent] = {}
        for event in events:
            if isinstance(event, ModelRequestEvent):
                request = event
            elif isinstance(event, ModelResponseEvent) and request is not None:
                self._chat(parent, request, event, None)
                request = None
            elif isinstance(event, ToolCallEvent):
                calls[event.call_id] = event
            elif isinstance(event, ToolResultEvent) and event.call_id in calls:
                self._tool(parent, calls.pop(event.call_id), event)
            elif isinstance(event, ErrorEvent) and request is not None:
                self._chat(parent, request, None, event)  # the model call that failed
                request = None

    def _chat(
        self,
        parent: otel_context.Context,
        request: ModelRequestEvent,
        response: ModelResponseEvent | None,
        error: ErrorEvent | None,
    ) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": request.model,
        }
        if response is not None:
            attributes["gen_ai.usage.input_tokens"] = response.usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = response.usage.output_tokens
            reason = "tool_calls" if response.tool_calls else "stop"
            attributes["gen_ai.response.finish_reasons"] = [reason]
            if self.capture_content and response.content is not None:
                attributes["gen_ai.output.messages"] = json.dumps(
                    [{"role": "assistant", "content": response.content}]
                )
        span = self.tracer.start_span(
            f"chat {request.model}",
            context=parent,
            kind=SpanKind.CLIENT,
            start_time=_ns(request.at),
            attributes=attributes,
        )
        if error is not None:
            span.set_attribute("error.type", error.error_type)
            span.set_status(Status(StatusCode.ERROR, error.error_type))
        span.end(end_time=_ns((response or error or request).at))

    def _tool(
        self, parent: otel_context.Context, call: ToolCallEvent, result: ToolResultEvent
    ) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.call_id,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = call.arguments
            attributes["gen_ai.tool.call.result"] = result.output
        span = self.tracer.start_span(
            f"execute_tool {call.name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            start_time=_ns(call.at),
            attributes=attributes,
        )
        if result.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, "tool_error"))
        span.end(end_time=_ns(result.at))

    async def aclose(self) -> None:
        await asyncio.to_thread(self.provider.shutdown)


def _run_attributes(agent: Agent, variant: Variant, events: Sequence[Event]) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.agent.name": agent.name,
        "gen_ai.agent.version": agent.revision,
        "dynagent.variant": variant,
    }
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    if started is not None:
        attributes["dynagent.trace_id"] = started.trace_id
        if started.session_id:
            attributes["gen_ai.conversation.id"] = started.session_id
    return attributes


def _content(events: Sequence[Event]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for event in events:
        if isinstance(event, RunStarted):
            found["gen_ai.input.messages"] = json.dumps(event.input, default=str)
        elif isinstance(event, FinalOutput):
            found["gen_ai.output.messages"] = json.dumps(event.output, default=str)
    return found
