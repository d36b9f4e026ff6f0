"""Recent runs, bounded in memory, for ``GET /v1/traces/{trace_id}``.

A run's events are kept as they are (frozen) and turned into JSON only when a trace
is read: most traces are never read, and converting every run's events was a
measurable share of serving one (docs/benchmarks.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dynagent.config import DEFAULT_TRACE_BYTES
from dynagent.events import (
    ErrorEvent,
    Event,
    ModelResponseEvent,
    RunFinished,
    RunStarted,
    ToolCallEvent,
)
from dynagent.runtime._redaction import TEXT_FIELDS, text_size
from dynagent.runtime.agent import Agent, SourceInfo


@dataclass(frozen=True, slots=True)
class _Recorded:
    agent: str
    revision: str
    variant: str
    factory: str
    source: SourceInfo
    events: tuple[Event, ...]
    nested: tuple[dict[str, Any], ...]
    routed: bool = True
    """The router chose the variant (the caller did not pin one)."""

    def as_dict(self, trace_id: str) -> dict[str, Any]:
        trace: dict[str, Any] = {
            "trace_id": trace_id,
            "agent": self.agent,
            "revision": self.revision,
            "variant": self.variant,
            "factory": self.factory,
            "source": self.source.as_dict(),
            "events": [event.as_dict() for event in self.events],
        }
        if self.nested:  # only runs that called agents as tools have it
            trace["nested"] = [
                {**run, "events": [event.as_dict() for event in run["events"]]}
                for run in self.nested
            ]
        return trace


def _size(events: Sequence[Event]) -> int:
    """About how many bytes the events hold: their text, plus a little per event."""
    return sum(
        200 + text_size([getattr(event, name, None) for name in TEXT_FIELDS], limit=1 << 62)
        for event in events
    )


class TraceStore:
    """The newest traces, at most ``max_traces`` of them and about ``max_bytes`` in all
    (``traces.max_bytes``); the oldest go first. A trace bigger than ``max_bytes`` on its
    own is not kept."""

    def __init__(self, max_traces: int = 1000, *, max_bytes: int = DEFAULT_TRACE_BYTES) -> None:
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.bytes = 0
        """The size of what is kept now, as ``_size`` counts it."""
        self._traces: OrderedDict[str, _Recorded] = OrderedDict()
        self._feedback: dict[str, dict[str, Any]] = {}
        """The rating of a kept trace (``POST /v1/traces/{trace_id}/feedback``)."""
        self._sizes: dict[str, int] = {}

    def record(
        self,
        agent: Agent,
        variant: str,
        trace_id: str,
        events: Sequence[Event],
        *,
        nested: Sequence[dict[str, Any]] = (),
        routed: bool = True,
    ) -> None:
        """``nested``: the runs of agents this run called as tools, with their events;
        ``routed``: False when the caller pinned the variant."""
        self._forget(trace_id)
        size = _size(events) + sum(_size(run["events"]) for run in nested)
        if size > self.max_bytes:
            return
        self._sizes[trace_id] = size
        self.bytes += size
        self._traces[trace_id] = _Recorded(
            agent.name,
            agent.revision,
            variant,
            agent.factory,
            agent.source,
            tuple(events),
            tuple({**run, "events": tuple(run["events"])} for run in nested),
            routed,
        )
        while len(self._traces) > self.max_traces or self.bytes > self.max_bytes:
            gone = next(iter(self._traces))
            self._forget(gone)
            self._feedback.pop(gone, None)

    def _forget(self, trace_id: str) -> None:
        if self._traces.pop(trace_id, None) is not None:
            self.bytes -= self._sizes.pop(trace_id)

    def __len__(self) -> int:
        return len(self._traces)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        recorded = self._traces.get(trace_id)
        if recorded is None:
            return None
        trace = recorded.as_dict(trace_id)
        if trace_id in self._feedback:
            trace["feedback"] = self._feedback[trace_id]
        return trace

    def routed(self, trace_id: str) -> bool:
        """Whether the router chose the variant of a kept run: only such runs' ratings are
        evidence for the guard (a caller rating its own pinned runs picks what it judges)."""
        recorded = self._traces.get(trace_id)
        return recorded is not None and recorded.routed

    def rate(self, trace_id: str, feedback: dict[str, Any]) -> None:
        """Keep the rating of a kept trace (shown with it)."""
        if trace_id in self._traces:
            self._feedback[trace_id] = feedback

    def summaries(self) -> Iterator[dict[str, Any]]:
        """One line per kept trace, newest first, read from the events as they are kept:
        listing never converts a whole (perhaps 1 MB) trace to JSON."""
        return (_summary(tid, recorded) for tid, recorded in reversed(self._traces.items()))


PREVIEW = 200
"""Characters of a run's input shown in the traces list."""


def _summary(trace_id: str, recorded: _Recorded) -> dict[str, Any]:
    """Who served the run, how it ended, how long it took, what it cost."""
    events = recorded.events
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    finished = next((e for e in reversed(events) if isinstance(e, RunFinished)), None)
    error = next((e for e in reversed(events) if isinstance(e, ErrorEvent)), None)
    status = finished.status if finished else ("error" if error else "unfinished")
    return {
        "trace_id": trace_id,
        "agent": recorded.agent,
        "revision": recorded.revision,
        "variant": recorded.variant,
        "session_id": started.session_id if started else None,
        "status": status,
        "started_at": events[0].at if events else None,
        "duration_ms": finished.duration_ms if finished else None,
        "steps": sum(1 for e in events if isinstance(e, ModelResponseEvent)),
        "tool_calls": sum(1 for e in events if isinstance(e, ToolCallEvent)),
        "usage": finished.usage.as_dict() if finished else None,
        "error": error and {"type": error.error_type, "message": error.message},
        "input": _preview(started.input if started else None),
    }


def _preview(value: Any) -> str:
    """The first ``PREVIEW`` characters of a run's input: its text, or its messages as
    ``role: text`` lines (only as much of them as the preview shows is ever formatted)."""
    if isinstance(value, str):
        return value[:PREVIEW]
    lines: list[str] = []
    size = 0
    for item in value if isinstance(value, list) else ():
        if size >= PREVIEW:
            break
        message = item if isinstance(item, dict) else {}
        content, role = message.get("content"), message.get("role")
        text = content[:PREVIEW] if isinstance(content, str) else ""
        lines.append(f"{role}: {text}" if isinstance(role, str) else text)
        size += len(lines[-1]) + 1
    return "\n".join(lines)[:PREVIEW]
