"""``GET /v1/watch/agents``: the agents' status as a server-sent event stream, so the
operations page follows changes without polling the whole list.

The first event (``snapshot``) holds every agent the key may see; each ``update``
holds only the agents whose entry changed (a swap, a refusal, a canary started or
pulled …) or that served runs since the last event, the names removed, and the
degraded sources when they changed. A stream wakes on every registry change and
once a second for traffic; nothing runs while nobody watches.

A stream outlives the request that checked its key, so it re-checks the key whenever the
keys change: a key removed from the keys file (or given other rights) ends its streams
within a tick. Streams are limited per key and in all (``listen.max_watch_streams*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from dynagent.core.auth import ApiKeys, Caller
from dynagent.core.series import RecentSeries
from dynagent.http._routes import SSE, Param, Route, Routes
from dynagent.http.query import whole_number
from dynagent.http.state import SERVICE, caller
from dynagent.masking import SecretValues
from dynagent.registry.entry import AgentEntry
from dynagent.registry.facade import AgentRegistry

routes = Routes("operations page")
TICK = 1.0
"""Seconds between traffic updates."""
KEEPALIVE = 15.0
MAX_SECONDS = 3600


class AgentFeed:
    """What one watcher has been sent, to send it only what changed."""

    def __init__(self, registry: AgentRegistry, series: RecentSeries, who: Caller) -> None:
        self._registry = registry
        self._series = series
        self._who = who
        self._seen: dict[str, tuple[AgentEntry, int, int]] = {}
        self._degraded: dict[str, str] = {}

    def update(self, *, first: bool = False) -> dict[str, Any] | None:
        """The changes since the last call (everything on the first), or None."""
        changed: list[dict[str, Any]] = []
        series: dict[str, Any] = {}
        current: dict[str, tuple[AgentEntry, int, int]] = {}
        attached = self._registry.attachments
        degraded = dict(self._registry.degraded)
        # A source's health shows in every status it serves (source.state) without a new
        # entry: when it changes, everything is sent again (rare, and small).
        everything = degraded != self._degraded
        for entry in self._registry:
            if not self._who.may_see(entry.name):
                continue
            # The entry, its traffic series and what is attached to it (its suite) each
            # change the status on their own.
            mark = current[entry.name] = (
                entry,
                self._series.version(entry.name),
                attached.version(entry.name),
            )
            before = self._seen.get(entry.name)
            if (
                not everything
                and before is not None
                and before[0] is entry
                and before[1:] == mark[1:]
            ):
                continue
            status = self._registry.status(entry.name)
            status.pop("revisions", None)  # the agent view reads the history itself
            changed.append(status)
            if mark[1]:
                series[entry.name] = self._series.of(entry.name)
        removed = sorted(self._seen.keys() - current.keys())
        self._seen = current
        if not (first or changed or removed or everything):
            return None
        self._degraded = degraded
        return {
            "agents": changed,
            "removed": removed,
            "series": series,
            "degraded": degraded,
            "ready": self._registry.ready,
        }


async def _next_change(registry: AgentRegistry, seen: int, stopping: asyncio.Event) -> None:
    """Until the registry changes past ``seen``, the service stops, or a tick passes."""
    changed = asyncio.ensure_future(registry.wait_for(lambda r: r.changes != seen, TICK))
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((changed, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (changed, stopped):
            task.cancel()
        await asyncio.gather(changed, stopped, return_exceptions=True)


@routes.add(
    Route(
        "GET",
        "/v1/watch/agents",
        "The agents' status as server-sent events: snapshot, then updates",
        parameters=(
            Param(
                "max_seconds",
                "query",
                "End the stream after this long (default 300)",
                {"type": "integer", "minimum": 1, "maximum": MAX_SECONDS},
            ),
        ),
        description="snapshot and update events",
        streams=(SSE,),
        errors=(400, 401, 429),
    )
)
async def watch_agents(request: web.Request) -> web.StreamResponse:
    """The agents' status as it changes; the stream ends after ``max_seconds``, when the
    service stops, or when its key no longer holds."""
    who = caller(request)
    raw = request.query.get("max_seconds")
    lifetime = float(whole_number(raw, "max_seconds", default=300, most=MAX_SECONDS))
    with request.app[SERVICE].watchers.hold(who):
        response = await _watch(request, who, lifetime)
    # The slot is free before the stream ends: a watcher that saw the end may open another.
    with contextlib.suppress(ConnectionError):  # the page went away
        await response.write_eof()
    return response


async def _watch(request: web.Request, who: Caller, lifetime: float) -> web.StreamResponse:
    app, loop = request.app, asyncio.get_running_loop()
    registry, stopping = app[SERVICE].registry, app[SERVICE].stopping
    key = _KeyCheck(app[SERVICE].api_keys, who)
    feed = AgentFeed(registry, app[SERVICE].series, who)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx in front (scripts/fleet.sh): pass events on
        }
    )
    await response.prepare(request)
    deadline, quiet_since = loop.time() + lifetime, loop.time()
    seen, payload = registry.changes, feed.update(first=True)
    try:
        await _send(response, "snapshot", payload, app[SERVICE].secrets)
        while loop.time() < deadline and not stopping.is_set():
            await _next_change(registry, seen, stopping)
            if not key.holds() or _gone(request):
                break
            seen, payload = registry.changes, feed.update()
            if payload is not None:
                await _send(response, "update", payload, app[SERVICE].secrets)
                quiet_since = loop.time()
            elif loop.time() - quiet_since > KEEPALIVE:
                await response.write(b": keepalive\n\n")
                quiet_since = loop.time()
    except ConnectionError:
        pass  # the page went away
    return response


def _gone(request: web.Request) -> bool:
    """The watcher went away: its slot is freed within a tick, not at the next write."""
    transport = request.transport
    return transport is None or transport.is_closing()


class _KeyCheck:
    """Whether a stream's key still holds, looked up again only after the keys changed."""

    def __init__(self, keys: ApiKeys, who: Caller) -> None:
        self._keys, self._who = keys, who
        self._checked = keys.generation
        self._holds = True

    def holds(self) -> bool:
        if self._keys.generation != self._checked:
            self._checked = self._keys.generation
            self._holds = self._keys.holds(self._who)
        return self._holds


async def _send(
    response: web.StreamResponse, event: str, payload: Any, secrets: SecretValues
) -> None:
    # A stream passes no response mask (http/masking.py): statuses are masked here.
    data = secrets.mask(json.dumps(payload, ensure_ascii=False, default=str))
    await response.write(f"event: {event}\ndata: {data}\n\n".encode())
