"""OpenTelemetry for runs, with the GenAI semantic conventions (the ``otel`` extra).

One ``invoke_agent {name}`` span per run, opened when the request arrives (a W3C
``traceparent`` from the caller becomes its parent) and current while the agent runs. Its
children — ``chat {model}`` per model call, ``execute_tool {tool}`` per tool call — are built
from the run's typed events when it ends, with the events' own times: nothing here runs
inside the run loop. Each child gets the span id that ``_tracing.child_span_id`` derives for
its call, the one the model, HTTP-tool and MCP calls named as their parent while it ran
(``_tracing.outgoing_headers``), so the callee's spans nest under the call that made them.
A shadow run (``rollout.shadow``) gets a span of its own, a child of the stable request's.
Export is OTLP, configured by the standard ``OTEL_*`` variables. Message content is recorded
only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from dynagent._compat import opentelemetry as otel_compat
from dynagent.events import (
    ErrorEvent,
    Event,
    FinalOutput,
    ModelRequestEvent,
    ModelResponseEvent,
    RunFinished,
    RunStarted,
    ToolCallEvent,
    ToolResultEvent,
)
from dynagent.runtime._tracing import RUN_SPAN, child_span_id
from dynagent.runtime.agent import Agent, Variant

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def _ns(at: float) -> int:
    return int(at * 1_000_000_000)


@dataclass
class _Run:
    span: Span
    token: object | None


_CHOSEN: ContextVar[int | None] = ContextVar("dynagent_chosen_span_id", default=None)


class _ChosenSpanIds(IdGenerator):
    """The SDK's ids, except the span id chosen for a span built from a run's events."""

    def __init__(self, ids: IdGenerator) -> None:
        self.ids = ids

    def generate_span_id(self) -> int:
        chosen = _CHOSEN.get()
        return self.ids.generate_span_id() if chosen is None else chosen

    def generate_trace_id(self) -> int:
        return self.ids.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return self.ids.is_trace_id_random()


class OtelTracer:
    """A ``RunTracer`` on an SDK ``TracerProvider``."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool = False) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("dynagent")
        otel_compat.wrap_id_generator(self.tracer, _ChosenSpanIds)
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
        return self._open(name, propagate.extract(dict(headers)), SpanKind.SERVER, {})

    def start_shadow(self, name: str, stable: _Run | None) -> _Run:
        """A shadow run's span: a child of the stable request's run (``stable``), apart from
        whatever context the task starting it had."""
        parent = otel_context.Context()
        if stable is not None:
            parent = trace.set_span_in_context(stable.span, parent)
        return self._open(name, parent, SpanKind.INTERNAL, {"dynagent.shadow": True})

    def _open(
        self, name: str, parent: otel_context.Context, kind: SpanKind, extra: dict[str, Any]
    ) -> _Run:
        span = self.tracer.start_span(
            f"invoke_agent {name}",
            context=parent,
            kind=kind,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": name,
                **extra,
            },
        )
        current = trace.set_span_in_context(span, parent)
        current = otel_context.set_value(RUN_SPAN, span.get_span_context().span_id, current)
        return _Run(span, otel_context.attach(current))

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
        self._children(span, events)
        if self.capture_content:
            span.set_attributes(_content(events))
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def _children(self, run: Span, events: Sequence[Event]) -> None:
        parent = trace.set_span_in_context(run, otel_context.Context())
        ids = _ChildIds(run.get_span_context().span_id)
        request: ModelRequestEvent | None = None
        calls: dict[str, ToolCallEvent] = {}
        for event in events:
            if isinstance(event, ModelRequestEvent):
                request = event
            elif isinstance(event, ModelResponseEvent) and request is not None:
                self._chat(parent, ids, request, event, None)
                request = None
            elif isinstance(event, ToolCallEvent):
                calls[event.call_id] = event
            elif isinstance(event, ToolResultEvent) and event.call_id in calls:
                self._tool(parent, ids, calls.pop(event.call_id), event)
            elif isinstance(event, ErrorEvent) and request is not None:
                self._chat(parent, ids, request, None, event)  # the model call that failed
                request = None

    def _chat(
        self,
        parent: otel_context.Context,
        ids: _ChildIds,
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
        span = ids.start(
            f"chat {request.step}",
            lambda: self.tracer.start_span(
                f"chat {request.model}",
                context=parent,
                kind=SpanKind.CLIENT,
                start_time=_ns(request.at),
                attributes=attributes,
            ),
        )
        if error is not None:
            span.set_attribute("error.type", error.error_type)
            span.set_status(Status(StatusCode.ERROR, error.error_type))
        span.end(end_time=_ns((response or error or request).at))

    def _tool(
        self,
        parent: otel_context.Context,
        ids: _ChildIds,
        call: ToolCallEvent,
        result: ToolResultEvent,
    ) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.call_id,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = call.arguments
            attributes["gen_ai.tool.call.result"] = result.output
        span = ids.start(
            f"tool {call.step} {call.call_id}",
            lambda: self.tracer.start_span(
                f"execute_tool {call.name}",
                context=parent,
                kind=SpanKind.INTERNAL,
                start_time=_ns(call.at),
                attributes=attributes,
            ),
        )
        if result.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, "tool_error"))
        span.end(end_time=_ns(result.at))

    async def aclose(self) -> None:
        await asyncio.to_thread(self.provider.shutdown)


@dataclass(frozen=True, slots=True)
class _ChildIds:
    """Starts the children of one run's span with the ids its calls sent downstream."""

    run_span_id: int

    def start(self, call: str, open_span: Callable[[], Span]) -> Span:
        token = _CHOSEN.set(child_span_id(self.run_span_id, call))
        try:
            return open_span()
        finally:
            _CHOSEN.reset(token)


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
    finished = RunFinished.of(events)
    if finished is not None:  # the whole run's tokens (its chat spans carry each call's)
        attributes["gen_ai.usage.input_tokens"] = finished.usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = finished.usage.output_tokens
        if finished.cost_usd is not None:
            attributes["dynagent.cost_usd"] = finished.cost_usd
    return attributes


def _content(events: Sequence[Event]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for event in events:
        if isinstance(event, RunStarted):
            found["gen_ai.input.messages"] = json.dumps(event.input, default=str)
        elif isinstance(event, FinalOutput):
            found["gen_ai.output.messages"] = json.dumps(event.output, default=str)
    return found
