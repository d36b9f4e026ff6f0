"""What every route that runs an agent reads from its request: the caller, the pin,
the canary key and the trace context; the run itself is the service's."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from dynagent.core import runs
from dynagent.core.routing import RunRequest
from dynagent.events import Event
from dynagent.exceptions import BadRequest
from dynagent.http.state import (
    CANARY_KEY_HEADER,
    REVISION_HEADER,
    TRACE_HEADER,
    VARIANT_HEADER,
    caller,
    service,
)
from dynagent.runtime.agent import Agent, RunResult, Variant


def pinned_variant(request: web.Request, from_name: Variant | None) -> Variant | None:
    header = request.headers.get(VARIANT_HEADER)
    if header is None:
        return from_name
    if header not in ("stable", "canary"):
        raise BadRequest(f"{VARIANT_HEADER} must be 'stable' or 'canary'")
    return header  # type: ignore[return-value]


def agent_headers(agent: Agent, variant: Variant, trace_id: str) -> dict[str, str]:
    return {REVISION_HEADER: agent.revision, VARIANT_HEADER: variant, TRACE_HEADER: trace_id}


def with_headers(request: web.Request, run: RunRequest) -> RunRequest:
    """``run`` with the caller's canary key and trace context, from the request's headers.
    Built field by field: ``dataclasses.replace`` costs some twenty calls, on every run."""
    return RunRequest(
        run.name,
        run.input,
        run.session_id,
        run.variables,
        run.pin,
        run.endpoint,
        run.options,
        run.sticky,
        request.headers.get(CANARY_KEY_HEADER),
        request.headers,
        run.metadata,
    )


async def run_agent(request: web.Request, run: RunRequest) -> tuple[Agent, RunResult]:
    return await runs.run_agent(service(request), caller(request), with_headers(request, run))


async def stream_agent(
    request: web.Request, run: RunRequest, *, hold: bool = False
) -> tuple[Agent, Variant, str, AsyncIterator[Event]]:
    return await runs.stream_agent(
        service(request), caller(request), with_headers(request, run), hold=hold
    )
