"""OpenTelemetry in tests: spans kept by the SDK's in-memory exporter, the caller's W3C
``traceparent``, and the shape of a finished trace."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
"""What the caller of the service sends: its spans are the run's parents."""


class Ended(SpanProcessor):
    """Tells a test when a span of a given name has ended (spans end on the event loop)."""

    def __init__(self) -> None:
        self._names: dict[str, asyncio.Event] = {}

    def _event(self, name: str) -> asyncio.Event:
        return self._names.setdefault(name, asyncio.Event())

    def on_end(self, span: ReadableSpan) -> None:
        self._event(span.name).set()

    async def wait_for(self, name: str, within: float = 10) -> None:
        async with asyncio.timeout(within):
            await self._event(name).wait()


@contextmanager
def in_memory(ended: Ended | None = None) -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    """A provider whose finished spans the exporter keeps, shut down at the end."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if ended is not None:
        provider.add_span_processor(ended)
    try:
        yield exporter, provider
    finally:
        provider.shutdown()


def traceparent(span: ReadableSpan) -> str:
    """The ``traceparent`` that names ``span`` as the parent."""
    return f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-01"


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def shape(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(name, parent span name, attributes) of each span, parents first: a parent that is
    not among ``spans`` is ``caller``."""
    names = {s.context.span_id: s.name for s in spans}
    rows = [
        (
            s.name,
            names.get(s.parent.span_id, "caller") if s.parent else None,
            dict(s.attributes or {}),
        )
        for s in spans
    ]
    return sorted(rows, key=lambda row: (row[1] is not None and row[1] != "caller", row[0]))


def by_start(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    """The spans whose name starts with ``prefix``, in the order they started."""
    return sorted((s for s in spans if s.name.startswith(prefix)), key=lambda s: s.start_time or 0)
