"""Recent runs, bounded in memory by count and by bytes, for ``GET /v1/traces/{trace_id}``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from ..agent import Agent
from ..config import DEFAULT_TRACE_BYTES
from ..events import Event


def size_of(value: Any) -> int:
    """About how many bytes ``value`` holds: its text, plus a little per value."""
    if isinstance(value, str):
        return len(value) + 50
    if isinstance(value, dict):
        return 64 + sum(size_of(k) + size_of(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 56 + sum(size_of(item) for item in value)
    return 24


class TraceStore:
    """The newest traces, at most ``max_traces`` of them and about ``max_bytes`` in all
    (``traces.max_bytes``); the oldest go first. A trace bigger than ``max_bytes`` on its
    own is not kept."""

    def __init__(self, max_traces: int = 1000, *, max_bytes: int = DEFAULT_TRACE_BYTES) -> None:
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.bytes = 0
        """The size of what is kept now, as ``size_of`` counts it."""
        self._traces: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()

    def record(
        self,
        agent: Agent,
        variant: str,
        trace_id: str,
        events: Sequence[Event],
        *,
        nested: Sequence[dict[str, Any]] = (),
    ) -> None:
        """``nested``: the runs of agents this run called as tools, with their events."""
        trace: dict[str, Any] = {
            "trace_id": trace_id,
            "agent": agent.name,
            "revision": agent.revision,
            "variant": variant,
            "factory": agent.factory,
            "source": agent.source.as_dict(),
            "events": [event.as_dict() for event in events],
        }
        if nested:  # only runs that called agents as tools have it
            trace["nested"] = [
                {**run, "events": [event.as_dict() for event in run["events"]]} for run in nested
            ]
        self._forget(trace_id)
        size = size_of(trace)
        if size > self.max_bytes:
            return
        self._traces[trace_id] = (trace, size)
        self.bytes += size
        while len(self._traces) > self.max_traces or self.bytes > self.max_bytes:
            self._forget(next(iter(self._traces)))

    def _forget(self, trace_id: str) -> None:
        kept = self._traces.pop(trace_id, None)
        if kept is not None:
            self.bytes -= kept[1]

    def get(self, trace_id: str) -> dict[str, Any] | None:
        kept = self._traces.get(trace_id)
        return kept[0] if kept else None

    def recent(self) -> Iterator[dict[str, Any]]:
        """Every kept trace, newest first."""
        return (trace for trace, _ in reversed(self._traces.values()))

    def __len__(self) -> int:
        return len(self._traces)
