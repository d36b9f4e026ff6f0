"""A caller's conversations: ``GET`` and ``DELETE /v1/agents/{name}/sessions/{id}``.

A session is reached the way a run reaches it (``session_key``): under the caller's
identity, the agent and the id, so a key only ever finds its own sessions; another key's
session of the same id is another conversation, and one never started is not found (404)
either way. A delete waits for a run that holds the session to finish, so that run's turn
goes too; with the sessions in Redis it holds for the whole fleet.
"""

from __future__ import annotations

from aiohttp import web

from dynagent.exceptions import BadRequest, NotFound, SessionStoreUnavailable
from dynagent.http._routes import AGENT_ERRORS, Route, Routes
from dynagent.http.api.schemas import SessionDeleted, SessionHistory
from dynagent.http.sse import json
from dynagent.http.state import caller, service
from dynagent.sessions.base import SessionStore
from dynagent.sessions.scope import MAX_SESSION_ID, session_key

routes = Routes("agents")

_PATH = "/v1/agents/{name}/sessions/{session_id}"
_ERRORS = (400, *AGENT_ERRORS, 503)


def _session(request: web.Request) -> tuple[SessionStore, str, str, str]:
    """The store, the session's key, the agent and the session id asked for."""
    name, session_id = request.match_info["name"], request.match_info["session_id"]
    who = caller(request)
    who.check_agent(name)
    if len(session_id) > MAX_SESSION_ID:
        raise BadRequest(
            f"a session id has at most {MAX_SESSION_ID} characters", param="session_id"
        )
    store = service(request).sessions
    if store is None:
        raise SessionStoreUnavailable("the session store is not open: the service is stopping")
    return store, session_key(who.principal, name, session_id), name, session_id


def _not_found(name: str, session_id: str) -> NotFound:
    return NotFound(f"no session {session_id!r} of agent {name!r} for this API key")


@routes.add(
    Route(
        "GET",
        _PATH,
        "The caller's conversation in a session: what the agent reads next turn",
        response=SessionHistory,
        errors=_ERRORS,
    )
)
async def get_session(request: web.Request) -> web.Response:
    store, key, name, session_id = _session(request)
    messages = await store.load(key)
    if not messages:
        raise _not_found(name, session_id)
    shown = service(request).redactor.value(messages)
    return json(SessionHistory(agent=name, session_id=session_id, messages=shown))


@routes.add(
    Route(
        "DELETE",
        _PATH,
        "Delete the caller's conversation in a session (after a run holding it ends)",
        response=SessionDeleted,
        errors=_ERRORS,
    )
)
async def delete_session(request: web.Request) -> web.Response:
    store, key, name, session_id = _session(request)
    if not await store.delete(key):
        raise _not_found(name, session_id)
    return json(SessionDeleted(agent=name, session_id=session_id, deleted=True))
