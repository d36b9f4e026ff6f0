"""The OpenAPI 3.1 document of the HTTP API, built from the same pydantic models
that validate request bodies, so the two cannot drift apart. Schemathesis runs
the whole document against the service (tests/security/test_openapi_fuzz.py)."""

from __future__ import annotations

import functools
import json
from typing import Any

from a2a.types import (
    AgentCard,
    SendMessageRequest,
    SendMessageResponse,
    SendStreamingMessageRequest,
    SendStreamingMessageResponse,
)
from pydantic import BaseModel

from dynagent.http.api.feedback import FeedbackRequest, FeedbackResponse
from dynagent.http.api.schemas import (
    AgentList,
    AgentStatus,
    ErrorResponse,
    Health,
    InvokeRequest,
    InvokeResponse,
    McpServerList,
    PauseRequest,
    Readiness,
    RevisionHistory,
    RollbackRequest,
    Trace,
)
from dynagent.http.openai.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    ModelList,
    ModelObject,
    OpenAIError,
    ResponseObject,
    ResponsesRequest,
)
from dynagent.http.ops.ui_schemas import AgentSeries, RevisionDefinition, TraceList, WhoAmI

_MODELS: tuple[type[BaseModel], ...] = (
    InvokeRequest,
    InvokeResponse,
    ChatCompletionRequest,
    ChatCompletion,
    ResponsesRequest,
    ResponseObject,
    ModelList,
    ModelObject,
    OpenAIError,
    PauseRequest,
    RollbackRequest,
    FeedbackRequest,
    FeedbackResponse,
    ErrorResponse,
    AgentStatus,
    AgentList,
    RevisionHistory,
    Trace,
    McpServerList,
    Health,
    Readiness,
    WhoAmI,
    TraceList,
    AgentSeries,
    RevisionDefinition,
    AgentCard,
    SendMessageRequest,
    SendStreamingMessageRequest,
    SendMessageResponse,
    SendStreamingMessageResponse,
)
"""Request and answer shapes; the A2A ones are ``a2a-sdk``'s own (protocol 0.3)."""
_ERRORS = {
    "400": "Bad request body, header or parameter",
    "401": "Missing or unknown API key",
    "403": "The API key may not use this agent (or is no admin key)",
    "404": "Unknown agent, trace or revision",
    "408": "The body did not arrive in time",
    "409": "The agent's state does not allow this (no canary, no earlier revision …)",
    "413": "Body too large",
    "415": "The body is not application/json",
    "422": "The answer failed the agent's output schema",
    "429": "A call limit was reached",
    "502": "The model endpoint failed",
    "503": "The agent has no valid version",
    "504": "The run or a model call timed out",
}
_BODY_ERRORS = ("400", "408", "413", "415")
_RUN_ERRORS = ("401", "403", "404", *_BODY_ERRORS, "422", "429", "502", "503", "504")
_OPEN: list[dict[str, list[str]]] = []
"""``security`` of the paths that need no key."""


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(model)}}


def _ok(model: type[BaseModel], description: str = "OK", **more: Any) -> dict[str, Any]:
    return {"description": description, "content": {**_json(model), **more}}


def _op(summary: str, ok: dict[str, Any], *codes: str, **fields: Any) -> dict[str, Any]:
    errors = {c: {"description": _ERRORS[c], "content": _json(ErrorResponse)} for c in codes}
    return {"summary": summary, **fields, "responses": {"200": ok, **errors}}


def _path(name: str, pattern: str | None = None) -> dict[str, Any]:
    schema = {"type": "string", "minLength": 1}
    return {"name": name, "in": "path", "required": True, "schema": schema | _pattern(pattern)}


def _pattern(pattern: str | None) -> dict[str, str]:
    return {"pattern": pattern} if pattern else {}


def _header(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "header", "description": description, "schema": schema}


_NAME = _path("name", "^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
_ROUTING = [
    _header(
        "X-Agent-Variant",
        "Pin the stable or the canary version",
        {"type": "string", "enum": ["stable", "canary"]},
    ),
    _header("X-Canary-Key", "Keeps a caller on one variant", {"type": "string"}),
]
_SERVED_BY = {
    header: {"description": description, "required": True, "schema": {"type": "string"}}
    for header, description in (
        ("X-Agent-Revision", "The revision that served"),
        ("X-Agent-Variant", "stable or canary"),
        ("X-Trace-Id", "GET /v1/traces/{trace_id} shows the run"),
    )
}
_EVENT = {
    "type": "object",
    "description": "One server-sent event: the event type, and its JSON as data",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
    "required": ["data"],
}
_EVENTS = {"text/event-stream": {"schema": _EVENT}}


def _body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": _json(model)}


def _run(summary: str, result: type[BaseModel], body: type[BaseModel]) -> dict[str, Any]:
    ok = _ok(result, "The run's result, or its events with stream: true", **_EVENTS)
    return _op(summary, {**ok, "headers": _SERVED_BY}, *_RUN_ERRORS, requestBody=_body(body))


def _paths() -> dict[str, Any]:
    return {
        **_service_paths(),
        **_agent_paths(),
        **_trace_paths(),
        **_openai_paths(),
        **_a2a_paths(),
        **_page_paths(),
    }


def _service_paths() -> dict[str, Any]:
    text = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    document = {
        "description": "OK",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
    return {
        "/healthz": {"get": _op("Liveness", _ok(Health), security=_OPEN)},
        "/readyz": {"get": _op("Readiness", _ok(Readiness), "503", security=_OPEN)},
        "/metrics": {"get": _op("Prometheus metrics (admin or metrics key)", text, "401", "403")},
        "/openapi.json": {"get": _op("This document", document, security=_OPEN)},
    }


def _agent_paths() -> dict[str, Any]:
    agent = ("401", "403", "404")
    admin = (*agent, "409")
    invoke = _run("Run an agent", InvokeResponse, InvokeRequest)
    return {
        "/v1/agents": {
            "get": _op("The status of every agent the key may use", _ok(AgentList), "401")
        },
        "/v1/agents/{name}": {
            "get": _op("An agent's status", _ok(AgentStatus), *agent, parameters=[_NAME])
        },
        "/v1/agents/{name}/invoke": {"post": {**invoke, "parameters": [_NAME, *_ROUTING]}},
        "/v1/agents/{name}/revisions": {
            "get": _op(
                "The revisions an agent served", _ok(RevisionHistory), *agent, parameters=[_NAME]
            )
        },
        "/v1/agents/{name}/promote": {
            "post": _op(
                "Make the canary the stable version (admin key)",
                _ok(AgentStatus),
                *admin,
                parameters=[_NAME],
            )
        },
        "/v1/agents/{name}/rollback": {
            "post": _op(
                "Restore an earlier revision as the stable version (admin key)",
                _ok(AgentStatus),
                *admin,
                *_BODY_ERRORS,
                parameters=[_NAME],
                requestBody=_body(RollbackRequest, required=False),
            )
        },
        "/v1/agents/{name}/rollout/pause": {
            "post": _op(
                "Take a serving canary out of traffic on every replica (admin key)",
                _ok(AgentStatus),
                *admin,
                *_BODY_ERRORS,
                parameters=[_NAME],
                requestBody=_body(PauseRequest, required=False),
            )
        },
        "/v1/agents/{name}/rollout/resume": {
            "post": _op(
                "Put a paused canary back into traffic (admin key)",
                _ok(AgentStatus),
                *admin,
                parameters=[_NAME],
            )
        },
    }


def _trace_paths() -> dict[str, Any]:
    agent = ("401", "403", "404")
    return {
        "/v1/traces/{trace_id}": {
            "get": _op(
                "The events of a recent run",
                _ok(Trace),
                *agent,
                parameters=[_path("trace_id")],
            )
        },
        "/v1/traces/{trace_id}/feedback": {
            "post": _op(
                "Rate a recent run (score 0-1 or thumbs up/down)",
                _ok(FeedbackResponse),
                *agent,
                "409",
                *_BODY_ERRORS,
                parameters=[_path("trace_id")],
                requestBody=_body(FeedbackRequest),
            )
        },
        "/v1/mcp/servers": {
            "get": _op("The MCP servers agents use, and their state", _ok(McpServerList), "401")
        },
    }


def _openai_op(summary: str, ok: dict[str, Any], *codes: str, **fields: Any) -> dict[str, Any]:
    """An OpenAI route: its errors come in OpenAI's shape (``message, type, param, code``)."""
    errors = {c: {"description": _ERRORS[c], "content": _json(OpenAIError)} for c in codes}
    return {"summary": summary, **fields, "responses": {"200": ok, **errors}}


def _openai_run(summary: str, result: type[BaseModel], body: type[BaseModel]) -> dict[str, Any]:
    ok = _ok(result, "The answer, or its stream of events with stream: true", **_EVENTS)
    return _openai_op(
        summary,
        {**ok, "headers": {**_SERVED_BY, **_IGNORED}},
        *_RUN_ERRORS,
        requestBody=_body(body),
        parameters=_ROUTING,
    )


_IGNORED = {
    "X-Ignored-Fields": {
        "description": "Request fields that were ignored (unknown, or settings the "
        "agent's model.caller_settings does not allow)",
        "schema": {"type": "string"},
    }
}


def _openai_paths() -> dict[str, Any]:
    model_id = _path("model_id", "^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(@(stable|canary))?$")
    return {
        "/v1/chat/completions": {
            "post": _openai_run(
                "OpenAI-compatible chat completion", ChatCompletion, ChatCompletionRequest
            )
        },
        "/v1/responses": {
            "post": _openai_run("OpenAI Responses API", ResponseObject, ResponsesRequest)
        },
        "/v1/responses/{response_id}": {
            "get": _openai_op(
                "A stored response (created with store: true by the same key)",
                _ok(ResponseObject),
                "401",
                "404",
                parameters=[_path("response_id")],
            )
        },
        "/v1/models": {
            "get": _openai_op("The agents the key may use, as models", _ok(ModelList), "401")
        },
        "/v1/models/{model_id}": {
            "get": _openai_op(
                "One agent as a model",
                _ok(ModelObject),
                "400",
                "401",
                "403",
                "404",
                parameters=[model_id],
            )
        },
    }


def _a2a_paths() -> dict[str, Any]:
    """The agents as A2A servers. JSON-RPC answers a bad request in-band: HTTP 200 with
    a JSON-RPC error (-32700 not JSON, -32600 not a request, -32601 another method,
    -32602 bad params, -32603 the run failed with ``data.type`` our error type)."""
    agent = ("401", "403", "404")
    rpc = {"anyOf": [_ref(SendMessageRequest), _ref(SendStreamingMessageRequest)]}
    streamed = {
        **_EVENT,
        "description": "One server-sent event; its data is a SendStreamingMessageResponse",
    }
    answers = {
        "description": "message/send: a JSON-RPC response (the reply Message, or an error); "
        "message/stream: server-sent events, each a JSON-RPC response",
        "content": {**_json(SendMessageResponse), "text/event-stream": {"schema": streamed}},
    }
    return {
        "/a2a/{name}/.well-known/agent-card.json": {
            "get": _op(
                "The agent's A2A card: version = revision, streaming, bearer security",
                _ok(AgentCard),
                *agent,
                parameters=[_NAME],
            )
        },
        "/a2a/{name}": {
            "post": _op(
                "A2A JSON-RPC message/send and message/stream (the same run path as invoke)",
                answers,
                *agent,
                "400",
                "408",
                "413",
                parameters=[_NAME],
                requestBody={"required": True, "content": {"application/json": {"schema": rpc}}},
            )
        },
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": schema}


def _trace_filters(variant: dict[str, Any]) -> list[dict[str, Any]]:
    limit = {"type": "integer", "minimum": 1, "maximum": 500}
    status = {"type": "string", "enum": ["ok", "error", "unfinished"]}
    return [
        _query("agent", "Only runs of this agent", {"type": "string"}),
        _query("variant", "Only runs of this variant", variant),
        _query("status", "Only runs that ended so", status),
        _query("session_id", "Only runs of this session", {"type": "string"}),
        _query("limit", "At most this many (default 100)", limit),
    ]


def _page_paths() -> dict[str, Any]:
    """What the operations page (``/ui/``) reads; usable by anyone with a key."""
    agent = ("401", "403", "404")
    html = {"description": "The page", "content": {"text/html": {"schema": {"type": "string"}}}}
    variant = {"type": "string", "enum": ["stable", "canary"]}
    filters = _trace_filters(variant)
    watch = _query(
        "max_seconds",
        "End the stream after this long (default 300)",
        {"type": "integer", "minimum": 1, "maximum": 3600},
    )
    revision = [_NAME, _path("revision"), _query("variant", "Of this variant", variant)]
    return {
        "/ui/": {"get": _op("The operations page (no key: it asks for one)", html, security=_OPEN)},
        "/v1/whoami": {"get": _op("What the caller's key may do", _ok(WhoAmI), "401")},
        "/v1/traces": {
            "get": _op(
                "Recent runs, newest first", _ok(TraceList), "400", "401", parameters=filters
            )
        },
        "/v1/agents/{name}/series": {
            "get": _op(
                "Requests, errors, mean latency per 30 s, last 15 min",
                _ok(AgentSeries),
                *agent,
                parameters=[_NAME],
            )
        },
        "/v1/agents/{name}/revisions/{revision}": {
            "get": _op(
                "One revision's definition, credentials masked",
                _ok(RevisionDefinition),
                "400",
                *agent,
                parameters=revision,
            )
        },
        "/v1/watch/agents": {
            "get": _op(
                "The agents' status as server-sent events: snapshot, then updates",
                {"description": "snapshot and update events", "content": _EVENTS},
                "400",
                "401",
                parameters=[watch],
            )
        },
    }


@functools.cache
def openapi_json() -> bytes:
    """The document as served: built once (pydantic writes its schemas in ~40 ms, which
    held the event loop on every request to ``/openapi.json``)."""
    return json.dumps(openapi_document()).encode()


def openapi_document() -> dict[str, Any]:
    components: dict[str, Any] = {}
    for model in _MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    return {
        "openapi": "3.1.0",
        "info": {"title": "Dynagent", "version": "1"},
        "paths": _paths(),
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
