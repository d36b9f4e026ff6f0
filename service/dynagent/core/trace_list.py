"""The traces list (``GET /v1/traces``, and the runs a capture starts from): this
replica's runs, or, when the fleet shares a Redis, every replica's.

The fleet's list is read from the lines each replica wrote beside its traces
(``shared_runs``), newest first, a page at a time until enough match: never the traces
themselves. Added to it: the runs this replica kept while Redis was out, which the fleet
does not have. While Redis is out, the list is this replica's alone, as it would be
without a shared Redis.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any

from dynagent.exceptions import SessionStoreUnavailable

if TYPE_CHECKING:
    from dynagent.core.auth import Caller
    from dynagent.core.shared_runs import SharedRuns
    from dynagent.core.traces import TraceStore

PAGE = 200
"""Lines read from Redis at a time."""

MOST_READ = 10_000
"""Lines a list reads at most, newest first: a caller with few runs in a fleet keeping
more traces than this (``traces.max_traces``) sees those among the newest."""


async def listing(
    traces: TraceStore, reader: Caller, wanted: Mapping[str, str], limit: int
) -> list[dict[str, Any]]:
    """At most ``limit`` lines of the runs ``reader`` may read whose fields have the
    ``wanted`` values (compared as text), newest first."""
    try:
        fleet = (
            None if traces.shared is None else await _fleet(traces.shared, reader, wanted, limit)
        )
    except SessionStoreUnavailable:
        fleet = None
    if fleet is None:  # no fleet, or its Redis is out: this replica's own
        return _here(traces, reader, wanted, limit)
    listed = {line["trace_id"] for line in fleet}
    alone = [  # a write under way: the fleet's line is listed
        line
        for line in _here(traces, reader, wanted, limit, alone=True)
        if line["trace_id"] not in listed
    ]
    if not alone:
        return fleet
    merged = sorted(fleet + alone, key=lambda line: line["started_at"] or 0.0, reverse=True)
    return merged[:limit]


def _here(
    traces: TraceStore,
    reader: Caller,
    wanted: Mapping[str, str],
    limit: int,
    *,
    alone: bool = False,
) -> list[dict[str, Any]]:
    """This replica's lines (``alone``: those the fleet's Redis has not taken)."""
    lines = traces.summaries(reader, alone=alone)
    return list(islice((line for line in lines if _fits(line, wanted)), limit))


async def _fleet(
    shared: SharedRuns, reader: Caller, wanted: Mapping[str, str], limit: int
) -> list[dict[str, Any]]:
    """The fleet's lines, newest first, until ``limit`` of them match, none is left (at
    most ``traces.max_traces`` are kept), or ``MOST_READ`` have been read."""
    chosen: list[dict[str, Any]] = []
    seen: set[str] = set()  # runs kept meanwhile move the older ones a page further
    start = 0
    while len(chosen) < limit:
        page = await shared.newest("trace", start, PAGE)
        for trace_id, line in page:
            if line is None or trace_id in seen:
                continue  # None: kept by a replica that wrote no line for it
            seen.add(trace_id)
            principal = line.pop("principal", "")
            if reader.may_read_run(principal, line["agent"]) and _fits(line, wanted):
                chosen.append(line)
                if len(chosen) == limit:
                    break
        start += PAGE
        if len(page) < PAGE or start >= MOST_READ:
            break
    return chosen


def _fits(line: dict[str, Any], wanted: Mapping[str, str]) -> bool:
    return all(str(line.get(key)) == value for key, value in wanted.items())
