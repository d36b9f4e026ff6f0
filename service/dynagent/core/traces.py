"""Recent runs, bounded in memory, for ``GET /v1/traces/{trace_id}``.

A run belongs to the identity that made it (``owner``, set by the run path from the
caller): every read of the store names its reader, and this module is the one place that
decides what the reader is shown (``Caller.may_read_run``, ``Caller.may_rate_run``), so no
route can forget to filter.

A run's events are kept as they are (frozen) and turned into JSON only when a trace
is read: most traces are never read, and converting every run's events was a
measurable share of serving one (docs/benchmarks.md). When the fleet shares a Redis
(``SharedRuns``), each trace is also written there as JSON, and traces and ratings are
read from there: any replica finds and rates any run, and a restart loses none.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dynagent.config import DEFAULT_TRACE_BYTES
from dynagent.core.auth import Caller
from dynagent.core.shared_runs import SharedRuns
from dynagent.events import (
    ErrorEvent,
    Event,
    ModelResponseEvent,
    RunFinished,
    RunStarted,
    ToolCallEvent,
    spent,
)
from dynagent.exceptions import Conflict, Forbidden, NotFound, SessionStoreUnavailable
from dynagent.runtime._redaction import trace_bytes
from dynagent.runtime.agent import Agent, SourceInfo, Variant


@dataclass(frozen=True, slots=True)
class _Recorded:
    agent: str
    revision: str
    variant: Variant
    factory: str
    source: SourceInfo
    events: tuple[Event, ...]
    nested: tuple[dict[str, Any], ...]
    owner: str
    """The identity (``Caller.principal``) that made the run."""
    routed: bool = True
    """The router chose the variant (the caller did not pin one)."""

    def as_dict(self, trace_id: str, reader: Caller) -> dict[str, Any]:
        trace: dict[str, Any] = {
            "trace_id": trace_id,
            "agent": self.agent,
            "revision": self.revision,
            "variant": self.variant,
            "owner": owner_label(self.owner),
            "factory": self.factory,
            "source": self.source.as_dict(),
            "events": [event.as_dict() for event in self.events],
        }
        # Runs of agents the reader may not call stay hidden, even inside a run it may read.
        nested = [run for run in self.nested if reader.may_see(run["agent"])]
        if nested:  # only runs that called agents as tools have it
            trace["nested"] = [
                {**run, "events": [event.as_dict() for event in run["events"]]} for run in nested
            ]
        return trace

    def document(self) -> dict[str, Any]:
        """The record as JSON for the fleet's Redis: every nested run, the owner in full."""
        return {
            "agent": self.agent,
            "revision": self.revision,
            "variant": self.variant,
            "factory": self.factory,
            "source": self.source.as_dict(),
            "events": [event.as_dict() for event in self.events],
            "nested": [
                {**run, "events": [event.as_dict() for event in run["events"]]}
                for run in self.nested
            ],
            "owner": self.owner,
            "routed": self.routed,
        }


def _shown(document: dict[str, Any], trace_id: str, reader: Caller) -> dict[str, Any]:
    """A trace read from the fleet's Redis as ``_Recorded.as_dict`` shows it to ``reader``."""
    trace = {key: document[key] for key in ("agent", "revision", "variant", "factory")}
    trace |= {"source": document["source"], "events": document["events"]}
    trace |= {"trace_id": trace_id, "owner": owner_label(document["owner"])}
    nested = [run for run in document["nested"] if reader.may_see(run["agent"])]
    if nested:
        trace["nested"] = nested
    return trace


def owner_label(principal: str) -> str:
    """How a run's owner is shown: a keys-file key by its name (``key:<name>``), a key from
    the environment by the first 12 hex digits of its SHA-256 (as ``key_digest``)."""
    kind, _, rest = principal.partition(":")
    return f"digest:{rest[:12]}" if kind == "digest" else principal


class TraceStore:
    """The newest traces, at most ``max_traces`` of them and about ``max_bytes`` in all
    (``traces.max_bytes``); the oldest go first. A trace bigger than ``max_bytes`` on its
    own is not kept."""

    def __init__(
        self,
        max_traces: int = 1000,
        *,
        max_bytes: int = DEFAULT_TRACE_BYTES,
        shared: SharedRuns | None = None,
    ) -> None:
        self.shared = shared
        """The fleet's Redis, when it shares one: traces are written and read there."""
        self.before_read: Callable[[], None] = lambda: None
        """Called before every read (the service's ``RunEnds.settle``: the traces of the
        runs that have ended are all kept by then)."""
        self._writing: dict[str, asyncio.Task[bool]] = {}
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.bytes = 0
        """The size of what is kept now, as ``trace_bytes`` counts it."""
        self._traces: OrderedDict[str, _Recorded] = OrderedDict()
        self._feedback: dict[str, dict[str, Any]] = {}
        """The rating of a kept trace (``POST /v1/traces/{trace_id}/feedback``)."""
        self._sizes: dict[str, int] = {}
        self._in_fleet: set[str] = set()
        """Kept traces the fleet's Redis took: once it no longer has one (deleted on any
        replica, or past the fleet's bounds), this replica's copy is not shown."""

    def record(
        self,
        agent: Agent,
        variant: Variant,
        trace_id: str,
        events: Sequence[Event],
        *,
        owner: str,
        nested: Sequence[dict[str, Any]] = (),
        routed: bool = True,
    ) -> None:
        """``owner``: the identity that made the run (``Caller.principal``); ``nested``: the
        runs of agents this run called as tools, with their events; ``routed``: False when
        the caller pinned the variant."""
        self._forget(trace_id)
        size = trace_bytes(events) + sum(trace_bytes(run["events"]) for run in nested)
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
            owner,
            routed,
        )
        while len(self._traces) > self.max_traces or self.bytes > self.max_bytes:
            gone = next(iter(self._traces))
            self._drop(gone)
        if self.shared is not None:
            work = self._share(self.shared, trace_id, self._traces[trace_id])
            task = self._writing[trace_id] = asyncio.get_running_loop().create_task(work)
            task.add_done_callback(lambda _: self._writing.pop(trace_id, None))

    async def _share(self, shared: SharedRuns, trace_id: str, recorded: _Recorded) -> bool:
        line = {**_summary(trace_id, recorded), "principal": recorded.owner}
        kept = await shared.keep_quietly("trace", trace_id, recorded.document(), line)
        if kept and self._traces.get(trace_id) is recorded:
            self._in_fleet.add(trace_id)
        return kept

    async def written(self, trace_id: str) -> None:
        """Until the trace is in the fleet's Redis (or failed to be): a run's answer
        follows it, so its caller can read or rate it through any replica at once."""
        task = self._writing.get(trace_id)
        if task is not None:
            await asyncio.shield(task)

    async def aclose(self) -> None:
        """Finish the writes under way (a stopping replica loses no trace), then close."""
        await asyncio.gather(*self._writing.values(), return_exceptions=True)
        if self.shared is not None:
            await self.shared.aclose()

    def _forget(self, trace_id: str) -> None:
        if self._traces.pop(trace_id, None) is not None:
            self.bytes -= self._sizes.pop(trace_id)
        self._in_fleet.discard(trace_id)

    def _drop(self, trace_id: str) -> None:
        """The trace and its rating gone from this replica."""
        self._forget(trace_id)
        self._feedback.pop(trace_id, None)

    async def forget(self, trace_id: str, reader: Caller) -> bool:
        """Delete a run's trace and its rating that ``reader`` may read, here and in the
        fleet's Redis (there first: a delete the fleet did not take is refused,
        ``SessionStoreUnavailable``); False when there is none ``reader`` may read."""
        if await self.find(trace_id, reader) is None:
            return False
        await self.written(trace_id)  # a write under way lands first, then goes
        if self.shared is not None:
            await self.shared.forget("trace", trace_id)
        self._drop(trace_id)
        return True

    def __len__(self) -> int:
        self.before_read()
        return len(self._traces)

    async def find(self, trace_id: str, reader: Caller) -> dict[str, Any] | None:
        """``get``, through the fleet's Redis when it shares one (any replica's run)."""
        self.before_read()
        if self.shared is None:
            return self.get(trace_id, reader)
        try:
            document, rating = await self.shared.trace(trace_id)
        except SessionStoreUnavailable:  # Redis is out: what this replica has
            return self.get(trace_id, reader)
        if document is None and trace_id in self._in_fleet:
            return None  # the fleet deleted or dropped it
        if document is None:
            return self.get(trace_id, reader)  # kept on this replica only (Redis was out)
        if not reader.may_read_run(document["owner"], document["agent"]):
            return None
        trace = _shown(document, trace_id, reader)
        if rating is not None:
            trace["feedback"] = rating
        return trace

    def get(self, trace_id: str, reader: Caller) -> dict[str, Any] | None:
        """The trace, as ``reader`` may see it; None when it is gone or not the reader's
        (the same answer: an id reveals nothing about a run of someone else)."""
        self.before_read()
        recorded = self._traces.get(trace_id)
        if recorded is None or not reader.may_read_run(recorded.owner, recorded.agent):
            return None
        trace = recorded.as_dict(trace_id, reader)
        if trace_id in self._feedback:
            trace["feedback"] = self._feedback[trace_id]
        return trace

    async def rate_run(self, trace_id: str, rater: Caller, feedback: dict[str, Any]) -> RatedRun:
        """``rate``, through the fleet's Redis when it shares one: a run is rated once in
        the whole fleet, on any replica."""
        self.before_read()
        if self.shared is None:
            return self.rate(trace_id, rater, feedback)
        document, _ = await self.shared.trace(trace_id)
        if document is None and trace_id in self._in_fleet:
            raise _not_found(trace_id)  # the fleet deleted or dropped it
        if document is None:
            return self.rate(trace_id, rater, feedback)
        run = RatedRun(
            document["agent"], document["revision"], document["variant"], document["routed"]
        )
        _check_rater(trace_id, rater, document["owner"], run.agent)
        kept = await self.shared.rate(trace_id, feedback)
        if kept < 0:
            raise _not_found(trace_id)
        if kept == 0:
            raise Conflict(f"run {trace_id!r} has been rated already")
        return run

    def rate(self, trace_id: str, rater: Caller, feedback: dict[str, Any]) -> RatedRun:
        """Keep ``rater``'s rating of a kept run (shown with it): the identity that made
        the run, or a key with the ``feedback`` right, rates it once."""
        self.before_read()
        recorded = self._traces.get(trace_id)
        if recorded is None:
            raise _not_found(trace_id)
        _check_rater(trace_id, rater, recorded.owner, recorded.agent)
        if trace_id in self._feedback:
            raise Conflict(f"run {trace_id!r} has been rated already")
        self._feedback[trace_id] = feedback
        return RatedRun(recorded.agent, recorded.revision, recorded.variant, recorded.routed)

    def summaries(self, reader: Caller, *, alone: bool = False) -> Iterator[dict[str, Any]]:
        """One line per kept trace ``reader`` may read, newest first, read from the events
        as they are kept: listing never converts a whole (perhaps 1 MB) trace to JSON.
        ``alone``: only those the fleet's Redis has not taken (yet, or while it was out)."""
        self.before_read()
        return (
            _summary(tid, recorded)
            for tid, recorded in reversed(self._traces.items())
            if reader.may_read_run(recorded.owner, recorded.agent)
            and not (alone and tid in self._in_fleet)
        )


def _not_found(trace_id: str) -> NotFound:
    return NotFound(f"no recent trace {trace_id!r} of this API key; only the last runs are kept")


def _check_rater(trace_id: str, rater: Caller, owner: str, agent: str) -> None:
    """``NotFound`` unless ``rater`` may rate or read the run (an id reveals nothing about
    a run of someone else); ``Forbidden`` when it may read it but not rate it."""
    if not (rater.may_rate_run(owner, agent) or rater.may_read_run(owner, agent)):
        raise _not_found(trace_id)
    if not rater.may_rate_run(owner, agent):
        raise Forbidden(
            "a run is rated by the API key that made it, or by a key with feedback: true"
        )


@dataclass(frozen=True, slots=True)
class RatedRun:
    """What served a rated run: the rating counts for it."""

    agent: str
    revision: str
    variant: Variant
    routed: bool
    """The router chose the variant: only then is the rating evidence for the guard (a
    caller rating its own pinned runs picks what it judges)."""


PREVIEW = 200
"""Characters of a run's input shown in the traces list."""


def _summary(trace_id: str, recorded: _Recorded) -> dict[str, Any]:
    """Who served the run, how it ended, how long it took, what it cost."""
    events = recorded.events
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    finished = RunFinished.of(events)
    error = next((e for e in reversed(events) if isinstance(e, ErrorEvent)), None)
    status = finished.status if finished else ("error" if error else "unfinished")
    usage, cost = spent(events)
    return {
        "trace_id": trace_id,
        "agent": recorded.agent,
        "revision": recorded.revision,
        "variant": recorded.variant,
        "owner": owner_label(recorded.owner),
        "session_id": started.session_id if started else None,
        "status": status,
        "started_at": events[0].at if events else None,
        "duration_ms": finished.duration_ms if finished else None,
        "steps": sum(1 for e in events if isinstance(e, ModelResponseEvent)),
        "tool_calls": sum(1 for e in events if isinstance(e, ToolCallEvent)),
        "usage": usage.as_dict(),
        "cost_usd": cost,
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
