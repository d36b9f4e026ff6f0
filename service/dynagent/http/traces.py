"""Recent runs, bounded in memory, for ``GET /v1/traces/{trace_id}``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from ..agent import Agent
from ..events import Event


class TraceStore:
    def __init__(self, max_traces: int = 1000) -> None:
        self.max_traces = max_traces
        self._traces: OrderedDict[str, dict[str, Any]] = OrderedDict()

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
        self._traces[trace_id] = trace
        self._traces.move_to_end(trace_id)
        while len(self._traces) > self.max_traces:
            self._traces.popitem(last=False)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        return self._traces.get(trace_id)

    def recent(self) -> Iterator[dict[str, Any]]:
        """Every kept trace, newest first."""
        return reversed(self._traces.values())
