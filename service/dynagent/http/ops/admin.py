"""Version management: revision history, promote a canary, roll back, pause and resume.

Each writes the definition back to where it lives (the agent file, or the Nacos
dataId), so the source stays the truth and every replica follows; the request
returns once this instance serves the result. All need an admin key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from dynagent.exceptions import Conflict, Forbidden, NotFound
from dynagent.http._routes import AGENT_ERRORS, BODY_ERRORS, Route, Routes
from dynagent.http.api.bodies import read_body
from dynagent.http.api.schemas import (
    AgentStatus,
    CurrentRevisions,
    PauseRequest,
    PromoteRequest,
    RevisionBody,
    RevisionHistory,
    RollbackRequest,
    RolloutHistory,
)
from dynagent.http.sse import json
from dynagent.http.state import caller, service
from dynagent.notifications import Notice
from dynagent.registry.entry import Canary
from dynagent.registry.facade import AgentRegistry

routes = Routes("rollout")
ADMIN_ERRORS = (*AGENT_ERRORS, 409)
APPLY_TIMEOUT = 15.0
"""Seconds to wait for the written definition to come back through the watcher."""
PAUSE_REASON = "paused by hand"
"""``rollout.paused.reason`` when a pause gives none."""


def _admin(request: web.Request, name: str) -> None:
    who = caller(request)
    who.check_agent(name)
    if not who.admin:
        raise Forbidden("promote, rollback, pause, resume and approve need an admin API key")


@routes.add(
    Route(
        "GET",
        "/v1/agents/{name}/revisions",
        "The revisions an agent served",
        response=RevisionHistory,
        errors=AGENT_ERRORS,
    )
)
async def revisions(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    caller(request).check_agent(name)
    registry = service(request).registry
    entry = registry.entry(name)
    current = CurrentRevisions(
        stable=entry.stable.revision if entry.stable else None,
        canary=entry.canary.agent.revision if entry.canary else None,
    )
    history = [RevisionBody.model_validate(r.as_dict()) for r in reversed(registry.history(name))]
    return json(RevisionHistory(name=name, current=current, revisions=history))


@routes.add(
    Route(
        "POST",
        "/v1/agents/{name}/promote",
        "Make the canary the stable version (admin key)",
        request=PromoteRequest,
        request_required=False,
        response=AgentStatus,
        errors=(*ADMIN_ERRORS, *BODY_ERRORS),
    )
)
async def promote(request: web.Request) -> web.Response:
    """Make the canary the stable definition and end the canary. A gated canary without a
    passing record for its revision is refused (409) unless the body says ``force``."""
    name = request.match_info["name"]
    _admin(request, name)
    body = await read_body(request, PromoteRequest) if request.can_read_body else None
    registry = service(request).registry
    entry = registry.entry(name)
    if entry.canary is None:
        raise Conflict(f"agent {name!r} has no canary to promote")
    gate = service(request).gate
    refusal = gate.refusal(name)
    if refusal is not None and not (body is not None and body.force):
        raise Conflict(f"cannot promote: {refusal} (dynagent promote --force)")
    forced = None
    if refusal is not None:
        async with _refused_as("record the forced promotion"):
            forced = await gate.force(name, _operator(request))
    candidate = entry.canary.agent
    factory = service(request).factories[candidate.factory]
    current = entry.stable.source if entry.stable else None
    async with _refused_as("promote"):
        await factory.write(name, "stable", candidate.spec, current)
        await factory.write(name, "canary", None, candidate.source)
    await _until(registry, name, candidate.spec.revision, canary_gone=True)
    status = registry.status(name)
    if forced is not None:  # the record the canary's document held when it was promoted
        status["forced"] = forced.as_dict()
    return json(AgentStatus.model_validate(status))


@routes.add(
    Route(
        "POST",
        "/v1/agents/{name}/rollback",
        "Restore an earlier revision as the stable version (admin key)",
        request=RollbackRequest,
        request_required=False,
        response=AgentStatus,
        errors=(*ADMIN_ERRORS, *BODY_ERRORS),
    )
)
async def rollback(request: web.Request) -> web.Response:
    """Restore an earlier revision as the stable definition."""
    name = request.match_info["name"]
    _admin(request, name)
    body = await read_body(request, RollbackRequest) if request.can_read_body else None
    registry = service(request).registry
    entry = registry.entry(name)
    if entry.stable is None:
        raise Conflict(f"agent {name!r} has no stable version to roll back")
    stable_history = [r for r in registry.history(name) if r.variant == "stable"]
    if body is not None and body.to is not None:
        target = next((r for r in reversed(registry.history(name)) if r.revision == body.to), None)
        if target is None:
            raise NotFound(f"revision {body.to!r} is not in the history of agent {name!r}")
    else:
        older = [r for r in stable_history if r.revision != entry.stable.revision]
        if not older:
            raise Conflict(f"agent {name!r} has no earlier revision to roll back to")
        target = older[-1]
    factory = service(request).factories[entry.stable.factory]
    async with _refused_as("rollback"):
        await factory.write(name, "stable", target.agent.spec, entry.stable.source)
    by = _operator(request)
    details = {"by": by, "from": entry.stable.revision}
    service(request).notify(Notice("rollback", name, target.agent.spec.revision, details))
    await _until(registry, name, target.agent.spec.revision)
    return json(AgentStatus.model_validate(registry.status(name)))


@routes.add(
    Route(
        "POST",
        "/v1/agents/{name}/rollout/pause",
        "Take a serving canary out of traffic on every replica (admin key)",
        request=PauseRequest,
        request_required=False,
        response=AgentStatus,
        errors=(*ADMIN_ERRORS, *BODY_ERRORS),
    )
)
async def pause(request: web.Request) -> web.Response:
    """Take a serving canary out of traffic: writes ``rollout.paused`` into its document,
    named after the admin key (``operator`` with auth off), as the guard's pulls are."""
    name = request.match_info["name"]
    _admin(request, name)
    body = await read_body(request, PauseRequest) if request.can_read_body else None
    registry = service(request).registry
    canary = registry.entry(name).canary
    if canary is None:
        raise Conflict(f"agent {name!r} has no canary to pause")
    if not canary.serving:
        raise Conflict(f"the canary of agent {name!r} is already paused")
    by = _operator(request)
    reason = body.reason if body is not None and body.reason else PAUSE_REASON
    async with _refused_as("pause"):
        await service(request).decisions.pause(name, reason, by)

    def paused(current: Canary | None) -> bool:
        return current is None or not current.serving or current.agent is not canary.agent

    return await _served(registry, name, paused, "pause")


@routes.add(
    Route(
        "POST",
        "/v1/agents/{name}/rollout/resume",
        "Put a paused canary back into traffic (admin key)",
        response=AgentStatus,
        errors=ADMIN_ERRORS,
    )
)
async def resume(request: web.Request) -> web.Response:
    """Put a paused canary back into traffic: removes ``rollout.paused`` from its document."""
    name = request.match_info["name"]
    _admin(request, name)
    registry = service(request).registry
    canary = registry.entry(name).canary
    if canary is None:
        raise Conflict(f"agent {name!r} has no canary to resume")
    if canary.serving:
        raise Conflict(f"the canary of agent {name!r} is not paused")
    await service(request).decisions.resume(name, _operator(request))

    def serving(current: Canary | None) -> bool:
        return current is None or current.serving or current.agent is not canary.agent

    return await _served(registry, name, serving, "resume")


@routes.add(
    Route(
        "POST",
        "/v1/agents/{name}/rollout/approve",
        "Let a progressive rollout pass its rollout.approval step (admin key)",
        response=AgentStatus,
        errors=ADMIN_ERRORS,
    )
)
async def approve(request: web.Request) -> web.Response:
    """Write ``rollout.approved: {by, at, revision}`` into the canary's document, named
    after the admin key (``operator`` with auth off); 409 when there is nothing to approve."""
    name = request.match_info["name"]
    _admin(request, name)
    registry = service(request).registry
    canary = registry.entry(name).canary
    if canary is None:
        raise Conflict(f"agent {name!r} has no canary to approve")
    by = _operator(request)
    async with _refused_as("approve"):
        wrote = await service(request).decisions.approve(name, by)
    if not wrote:
        raise Conflict(f"canary {canary.agent.revision} of agent {name!r} is already approved")

    def approved(current: Canary | None) -> bool:
        return current is None or current.policy.approved is not None

    return await _served(registry, name, approved, "approval")


def _operator(request: web.Request) -> str:
    """Who a decision by hand is recorded as: the admin key's name (``operator`` with
    auth off)."""
    return caller(request).name[:200] if service(request).api_keys.enabled else "operator"


async def _served(
    registry: AgentRegistry, name: str, done: Callable[[Canary | None], bool], what: str
) -> web.Response:
    """Once this instance serves the written decision (``done`` of the canary it serves, or
    None when it has none), the agent's status; a 409 if it does not in time."""

    def applied(r: AgentRegistry) -> bool:
        return done(r.entry(name).canary if name in r else None)

    try:
        await registry.wait_for(applied, within=APPLY_TIMEOUT)
    except TimeoutError:
        raise Conflict(
            f"the {what} of {name!r}'s canary was written but is not served yet"
        ) from None
    return json(AgentStatus.model_validate(registry.status(name)))


@asynccontextmanager
async def _refused_as(action: str) -> AsyncIterator[None]:
    """A source that cannot write (a linked file, a read-only folder) says which action."""
    try:
        yield
    except Conflict as exc:
        raise Conflict(f"cannot {action}: {exc.message}") from None


async def _until(
    registry: AgentRegistry, name: str, spec_revision: str, *, canary_gone: bool = False
) -> None:
    def applied(r: AgentRegistry) -> bool:
        if name not in r:
            return False
        entry = r.entry(name)
        stable_done = entry.stable is not None and entry.stable.spec.revision == spec_revision
        return stable_done and (not canary_gone or entry.canary is None)

    try:
        await registry.wait_for(applied, within=APPLY_TIMEOUT)
    except TimeoutError:
        raise Conflict(
            f"the new definition of {name!r} was written but is not served yet; "
            "check the agent's status for last_error"
        ) from None


@routes.add(
    Route(
        "GET",
        "/v1/agents/{name}/rollout/history",
        "Every decision of the agent's rollout: who or what, when, from what to what",
        response=RolloutHistory,
        errors=AGENT_ERRORS,
    )
)
async def rollout_history(request: web.Request) -> web.Response:
    """The current canary's decisions as its document records them (the fleet's), and
    the last ended canary's as this replica saw them end."""
    name = request.match_info["name"]
    caller(request).check_agent(name)
    registry = service(request).registry
    canary = registry.entry(name).canary
    current = (
        {
            "revision": canary.agent.revision,
            "entries": [entry.model_dump() for entry in canary.policy.history],
        }
        if canary is not None
        else None
    )
    body = {"name": name, "canary": current, "ended": registry.rollouts.ended.get(name)}
    return json(RolloutHistory.model_validate(body))
