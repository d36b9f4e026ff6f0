"""``dynagent eval capture``: the last answered runs of an agent, from this replica's trace
store, as a suite (``evals.capture``) validated before it is handed out.

A run's trace is read as its reader may read it (an admin: every run), masked as the
trace views mask it; the earlier turns of a session come from the kept traces of the
same caller and session.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from dynagent.core.auth import Caller
from dynagent.core.redact import Redactor
from dynagent.core.trace_list import listing
from dynagent.core.traces import TraceStore
from dynagent.evals.capture import (
    MAX_LAST,
    MAX_SUITE_CHARS,
    CapturedRun,
    captured_run,
    case_size,
    session_turns,
    suite_document,
)
from dynagent.evals.spec import EvalSuite, load_suite
from dynagent.exceptions import BadRequest, NotFound

Summary = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Capture:
    """A captured suite, and the runs that could not become cases (and why)."""

    suite: EvalSuite
    document: dict[str, Any]
    skipped: list[dict[str, str]]

    def as_dict(self, agent: str, variant: str) -> dict[str, Any]:
        return {
            "agent": agent,
            "variant": variant,
            "cases": len(self.suite.cases),
            "skipped": self.skipped,
            "suite": self.document,
        }


async def capture_suite(
    traces: TraceStore,
    redactor: Redactor,
    reader: Caller,
    name: str,
    *,
    last: int,
    variant: str,
    judge: str,
    rubric: str | None = None,
) -> Capture:
    """The suite of ``name``'s last ``last`` answered runs of ``variant`` kept here.

    The traces are read on the event loop (the store is the loop's); masking them and
    building and validating the suite, which takes time in proportion to their text,
    happen on a worker thread."""
    if not 1 <= last <= MAX_LAST:
        raise BadRequest(f"last must be a whole number from 1 to {MAX_LAST}")
    # Newest first; every replica's runs when the fleet shares a Redis.
    mine = await listing(traces, reader, {"agent": name}, traces.max_traces)
    chosen = [s for s in mine if s["variant"] == variant and s["status"] == "ok"][:last]
    if not chosen:
        raise NotFound(
            f"no answered {variant} run of agent {name!r} is kept: serve some traffic "
            "first (only the last runs are kept, traces.max_traces)"
        )
    chosen.reverse()  # oldest first: a suite reads in the order the traffic came
    sessions = _sessions(mine)
    needed = {s["trace_id"] for s in chosen}
    needed.update(s["trace_id"] for c in chosen for s in _earlier(c, sessions))
    kept = await _read(traces, reader, list(needed))
    build = _Build(kept, redactor, sessions)
    return await asyncio.to_thread(build.capture, name, chosen, judge, rubric)


READ_AT_ONCE = 32
"""Traces read at a time (from the fleet's Redis: each read a connection of its own)."""


async def _read(
    traces: TraceStore, reader: Caller, ids: list[str]
) -> dict[str, dict[str, Any] | None]:
    kept: dict[str, dict[str, Any] | None] = {}
    for start in range(0, len(ids), READ_AT_ONCE):
        some = ids[start : start + READ_AT_ONCE]
        found = await asyncio.gather(*(traces.find(trace_id, reader) for trace_id in some))
        kept.update(zip(some, found, strict=True))
    return kept


@dataclass
class _Build:
    """Turns the traces read into a suite (on a worker thread)."""

    kept: dict[str, dict[str, Any] | None]
    redactor: Redactor
    sessions: dict[tuple[str, str], list[Summary]]
    _runs: dict[str, CapturedRun | str] = field(default_factory=dict)

    def read(self, trace_id: str) -> CapturedRun | str:
        if trace_id not in self._runs:
            trace = self.kept.get(trace_id)
            self._runs[trace_id] = (
                "the trace is gone" if trace is None else captured_run(self.redactor.value(trace))
            )
        return self._runs[trace_id]

    def capture(self, name: str, chosen: list[Summary], judge: str, rubric: str | None) -> Capture:
        runs, skipped, size = [], [], 0
        for summary in chosen:
            run = self.read(summary["trace_id"])
            if not isinstance(run, str):
                earlier = (self.read(s["trace_id"]) for s in _earlier(summary, self.sessions))
                turns = session_turns([r for r in earlier if not isinstance(r, str)], run.turns)
                size += case_size(run, turns)
                if size <= MAX_SUITE_CHARS:
                    runs.append((run, turns))
                    continue
                run = f"the suite reached its size limit ({MAX_SUITE_CHARS} characters)"
            skipped.append({"trace_id": summary["trace_id"], "reason": run})
        if not runs:
            raise NotFound(
                f"none of the last runs of agent {name!r} can be a case: {skipped[0]['reason']}"
            )
        document = suite_document(runs, judge=judge, rubric=rubric)
        suite = load_suite(document, source="capture", agent=name)
        return Capture(suite, document, skipped)


def _sessions(kept: list[Summary]) -> dict[tuple[str, str], list[Summary]]:
    """The kept answered runs of each caller's session, oldest first."""
    found: dict[tuple[str, str], list[Summary]] = {}
    for summary in reversed(kept):
        if summary["session_id"] and summary["status"] == "ok":
            found.setdefault((summary["owner"], summary["session_id"]), []).append(summary)
    return found


def _earlier(summary: Summary, sessions: dict[tuple[str, str], list[Summary]]) -> list[Summary]:
    """The answered runs of the same caller's session before this one, oldest first."""
    session = summary["session_id"]
    if not session:
        return []
    at = summary["started_at"] or 0.0
    same = sessions.get((summary["owner"], session), [])
    return [s for s in same if (s["started_at"] or 0.0) < at]
