"""Our own API: list agents, their status, invoke them (JSON or SSE), read traces."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from dynagent.core.conversation import check_conversation
from dynagent.core.routing import RunRequest
from dynagent.events import Event, FinalOutput, ModelResponseEvent, RunFinished
from dynagent.exceptions import NotFound
from dynagent.http._routes import AGENT_ERRORS, ROUTING, RUN_ERRORS, SERVED_BY, SSE, Route, Routes
from dynagent.http.api.bodies import read_body
from dynagent.http.api.schemas import (
    AgentList,
    AgentStatus,
    InvokeRequest,
    InvokeResponse,
    Trace,
    TraceDeleted,
)
from dynagent.http.runs import agent_headers, pinned_variant, run_agent, stream_agent
from dynagent.http.sse import SSE_HEADERS, EventStream, json, json_value, open_stream
from dynagent.http.sse import event as sse_event
from dynagent.http.state import caller, service
from dynagent.runtime.agent import RunResult

routes = Routes("agents")
_LAST = frozenset({FinalOutput, RunFinished})
"""The kinds of the run's last events (``_followed``)."""


# The run route is added first: aiohttp tries the routes under "/v1/agents" in the
# order they were added, and every other one would be tried and refused before it.
@routes.add(
    Route(
        "POST",
        "/v1/agents/{name}/invoke",
        "Run an agent",
        runs=True,
        parameters=ROUTING,
        request=InvokeRequest,
        response=InvokeResponse,
        description="The run's result, or its events with stream: true",
        streams=(SSE,),
        headers=SERVED_BY,
        errors=RUN_ERRORS,
    )
)
async def invoke(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, InvokeRequest)
    run = RunRequest(
        name=request.match_info["name"],
        input=body.input if isinstance(body.input, str) else [m.wire() for m in body.input],
        session_id=body.session_id,
        variables=body.variables,
        pin=pinned_variant(request, None),
        endpoint="invoke",
    )
    if not isinstance(run.input, str):
        check_conversation(run.input, field="input", continued=body.session_id is not None)
    if body.stream:
        agent, variant, trace_id, events = await stream_agent(request, run)
        return await write_sse(request, agent_headers(agent, variant, trace_id), events)
    agent, result = await run_agent(request, run)
    answer = {  # InvokeResponse's fields, in its order
        "output": result.output,
        "agent": result.agent,
        "revision": result.revision,
        "variant": result.variant,
        "trace_id": result.trace_id,
        "session_id": result.session_id,
        "usage": _usage(result),
        "steps": result.steps,
    }
    headers = agent_headers(agent, result.variant, result.trace_id)
    try:
        return json_value(answer, headers=headers)
    except (ValueError, TypeError):  # NaN or an infinity in a structured output, or a
        # value of a plugin's that is not JSON's own: the schema's encoding writes those
        return json(InvokeResponse.model_validate(answer), headers=headers)


@routes.add(
    Route(
        "GET",
        "/v1/agents",
        "The status of every agent the key may use",
        response=AgentList,
        errors=(401,),
    )
)
async def list_agents(request: web.Request) -> web.Response:
    who = caller(request)
    registry = service(request).registry
    statuses = [registry.status(e.name) for e in registry if who.may_see(e.name)]
    return json(AgentList.model_validate({"agents": statuses}))


@routes.add(
    Route(
        "GET", "/v1/agents/{name}", "An agent's status", response=AgentStatus, errors=AGENT_ERRORS
    )
)
async def get_agent(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    caller(request).check_agent(name)
    return json(AgentStatus.model_validate(service(request).registry.status(name)))


def _usage(result: RunResult) -> dict[str, int | float]:
    """The run's tokens, and its cost in US dollars when every model it used has a price."""
    usage: dict[str, int | float] = dict(result.usage.as_dict())
    if result.cost_usd is not None:
        usage["cost_usd"] = result.cost_usd
    return usage


async def write_sse(
    request: web.Request, headers: dict[str, str], events: AsyncIterator[Event]
) -> web.StreamResponse:
    response = await open_stream(request, {**SSE_HEADERS, **headers}, first_event_ready=True)
    stream = EventStream(response)
    async for event in events:
        await stream.write(sse_event(event.type, event.as_dict()), held=_followed(event))
    await stream.end()
    return response


def _followed(event: Event) -> bool:
    """Whether another event follows ``event`` at once, or it is the run's last: a
    ``model_response`` that asks for no tool is followed by ``final_output`` (or, its
    answer refused by the output schema, by the retry's ``model_request``), and
    ``final_output`` by ``run_finished``."""
    if isinstance(event, ModelResponseEvent):
        return not event.tool_calls
    return type(event) in _LAST


@routes.add(
    Route(
        "GET",
        "/v1/traces/{trace_id}",
        "The events of a recent run of the caller's (an admin's: anyone's)",
        tags=("traces",),
        response=Trace,
        errors=AGENT_ERRORS,
    )
)
async def get_trace(request: web.Request) -> web.Response:
    """A run of the caller's (or any run, for an admin): someone else's is not found."""
    trace_id = request.match_info["trace_id"]
    trace = await service(request).traces.find(trace_id, caller(request))
    if trace is None:
        raise _no_trace(trace_id)
    return json(Trace.model_validate(trace))


@routes.add(
    Route(
        "DELETE",
        "/v1/traces/{trace_id}",
        "Delete a recent run's trace and its rating, on every replica (the caller's own; "
        "an admin's: anyone's)",
        tags=("traces",),
        response=TraceDeleted,
        errors=(*AGENT_ERRORS, 503),
    )
)
async def delete_trace(request: web.Request) -> web.Response:
    """Erase what a run left in the trace store (its input, answer and events), for a
    caller who wants the conversation gone; someone else's run is not found."""
    trace_id = request.match_info["trace_id"]
    if not await service(request).traces.forget(trace_id, caller(request)):
        raise _no_trace(trace_id)
    return json(TraceDeleted(trace_id=trace_id, deleted=True))


def _no_trace(trace_id: str) -> NotFound:
    return NotFound(f"no recent trace {trace_id!r} of this API key; only the last runs are kept")
