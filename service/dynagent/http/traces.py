"""Recent runs, bounded in memory, for ``GET /v1/traces/{trace_id}``.

A run's events are kept as they are (frozen) and turned into JSON only when a trace
is read: most traces are never read, and converting every run's events was a
measurable share of serving one (BENCHMARKS.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..agent import Agent, SourceInfo
from ..events import Event


@dataclass(frozen=True, slots=True)
class _Recorded:
    agent: str
    revision: str
    variant: str
    factory: str
    source: SourceInfo
    events: tuple[Event, ...]
    nested: tuple[dict[str, Any], ...]

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


class TraceStore:
    def __init__(self, max_traces: int = 1000) -> None:
        self.max_traces = max_traces
        self._traces: OrderedDict[str, _Recorded] = OrderedDict()
        self._feedback: dict[str, dict[str, Any]] = {}
        """The rating of a kept trace (``POST /v1/traces/{trace_id}/feedback``)."""

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
        self._traces[trace_id] = _Recorded(
            agent.name,
            agent.revision,
            variant,
            agent.factory,
            agent.source,
            tuple(events),
            tuple({**run, "events": tuple(run["events"])} for run in nested),
        )
        self._traces.move_to_end(trace_id)
        while len(self._traces) > self.max_traces:
            gone, _ = self._traces.popitem(last=False)
            self._feedback.pop(gone, None)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        recorded = self._traces.get(trace_id)
        if recorded is None:
            return None
        trace = recorded.as_dict(trace_id)
        if trace_id in self._feedback:
            trace["feedback"] = self._feedback[trace_id]
        return trace

    def rate(self, trace_id: str, feedback: dict[str, Any]) -> None:
        """Keep the rating of a kept trace (shown with it)."""
        if trace_id in self._traces:
            self._feedback[trace_id] = feedback

    def recent(self) -> Iterator[dict[str, Any]]:
        """Every kept trace, newest first."""
        return (recorded.as_dict(tid) for tid, recorded in reversed(self._traces.items()))
