"""The OpenAPI 3.1 document of the HTTP API, built from the same pydantic models
that validate request bodies, so the two cannot drift apart."""

from __future__ import annotations

from typing import Any

from .schemas import ChatCompletionRequest, ErrorResponse, InvokeRequest, InvokeResponse

_ERRORS = {
    "400": "Bad request body or parameters",
    "401": "Missing or unknown API key",
    "403": "The API key may not use this agent",
    "404": "Unknown agent",
    "413": "Body too large",
    "422": "The answer failed the agent's output schema",
    "429": "A call limit was reached",
    "502": "The model endpoint failed",
    "503": "The agent has no valid version",
    "504": "The run timed out",
}


def _schema(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema(ref_template="#/components/schemas/{model}")
    return schema


def _json(ref: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"description": _ERRORS[c], "content": _json("ErrorResponse")} for c in codes}


def _op(summary: str, ok: dict[str, Any], *codes: str, body: str | None = None) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {"200": ok, **_errors(*codes)},
    }
    if body:
        operation["requestBody"] = {"required": True, "content": _json(body)}
    return operation


_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$"},
}
_ANY_JSON = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}


def openapi_document() -> dict[str, Any]:
    components: dict[str, Any] = {}
    for model in (InvokeRequest, InvokeResponse, ChatCompletionRequest, ErrorResponse):
        schema = _schema(model)
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    run_errors = ("400", "401", "403", "404", "413", "422", "429", "502", "503", "504")
    invoke = _op(
        "Run an agent",
        {
            "description": "The run's result (or text/event-stream)",
            "content": _json("InvokeResponse"),
        },
        *run_errors,
        body="InvokeRequest",
    )
    invoke["parameters"] = [_NAME]
    agent = _op("An agent's status", _ANY_JSON, "401", "403", "404")
    agent["parameters"] = [_NAME]
    trace = _op("The events of a recent run", _ANY_JSON, "401", "403", "404")
    trace["parameters"] = [
        {"name": "trace_id", "in": "path", "required": True, "schema": {"type": "string"}}
    ]
    text = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Dynagent", "version": "1"},
        "paths": {
            "/healthz": {"get": _op("Liveness", _ANY_JSON)},
            "/readyz": {"get": _op("Readiness", _ANY_JSON, "503")},
            "/v1/agents": {"get": _op("Every agent's status", _ANY_JSON, "401")},
            "/v1/agents/{name}": {"get": agent},
            "/v1/agents/{name}/invoke": {"post": invoke},
            "/v1/chat/completions": {
                "post": _op(
                    "OpenAI-compatible chat completion",
                    _ANY_JSON,
                    *run_errors,
                    body="ChatCompletionRequest",
                )
            },
            "/v1/traces/{trace_id}": {"get": trace},
            "/metrics": {"get": _op("Prometheus metrics", text, "401")},
            "/openapi.json": {"get": _op("This document", _ANY_JSON)},
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
