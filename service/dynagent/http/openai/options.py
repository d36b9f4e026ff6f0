"""What the OpenAI routes make of a request body, field by field, shared by chat
completions and the Responses API.

Honoured: ``model``, ``messages``/``input``, ``stream``, ``stream_options``,
``tools`` (client tools), ``tool_choice``, ``response_format``/``text.format``,
``user`` (sticky key), ``metadata.session_id``/``metadata.variables``, the extra
fields ``session_id`` and ``variables``, and the sampling settings the agent's
``model.caller_settings`` allows. Refused (400): ``n`` other than 1, tools on an
agent with ``client_tools: false``, a tool name clash, a schema that cannot hold
together with the agent's own (``runtime/_schema_pair.py``). Everything else is
ignored and named in ``X-Ignored-Fields``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dynagent.core.conversation import check_conversation
from dynagent.core.routing import RunRequest
from dynagent.exceptions import BadRequest
from dynagent.http.openai.schemas import (
    ChatCompletionRequest,
    ResponsesRequest,
    SchemaResponseFormat,
    SchemaTextFormat,
)
from dynagent.models.base import ToolDefinition
from dynagent.runtime.agent import AgentInput
from dynagent.runtime.options import RunOptions
from dynagent.spec._schemas import check_schema

IGNORED_HEADER = "X-Ignored-Fields"
SAMPLING = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")
_HONOURED_EXTRAS = frozenset({"session_id", "variables"})
_JSON_OBJECT = {"type": "object"}


def _settings(body: ChatCompletionRequest | ResponsesRequest) -> dict[str, Any]:
    settings = {name: getattr(body, name) for name in SAMPLING if getattr(body, name) is not None}
    if isinstance(body, ChatCompletionRequest):
        tokens = body.max_completion_tokens or body.max_tokens
        if body.stop is not None:
            settings["stop"] = [body.stop] if isinstance(body.stop, str) else body.stop
    else:
        tokens = body.max_output_tokens
    if tokens is not None:
        settings["max_tokens"] = tokens
    return settings


async def output_schema(kind: str | None, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The caller's JSON Schema for ``json_object`` / ``json_schema``; None for text.

    Checked in a thread: compiling its patterns holds the GIL for each one (bounded by
    ``_schemas``), and the loop runs between them rather than after them all."""
    if kind == "json_object":
        return _JSON_OBJECT
    if kind != "json_schema":
        return None
    if schema is None:
        raise BadRequest("json_schema needs a 'schema'", param="response_format")
    try:
        await asyncio.to_thread(check_schema, schema)
    except ValueError as exc:
        raise BadRequest(
            f"the response format's schema is refused: {exc}", param="response_format"
        ) from None
    return schema


def _session(body: ChatCompletionRequest | ResponsesRequest) -> tuple[str | None, dict[str, str]]:
    metadata = body.metadata or {}
    variables = dict(body.variables or {})
    raw = metadata.get("variables")
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
            raise BadRequest(
                "metadata.variables must be a JSON object of strings, as text",
                param="metadata",
            )
        variables = {**parsed, **variables}
    return body.session_id or metadata.get("session_id"), variables


def ignored_fields(body: ChatCompletionRequest | ResponsesRequest, refused: Sequence[str]) -> str:
    """The header naming what this request asked for and did not get."""
    if not (body.model_extra or refused or body.parallel_tool_calls is not None):
        return ""  # the common case: nothing asked for that is not honoured
    extras = set(body.model_extra or {}) - _HONOURED_EXTRAS
    if body.parallel_tool_calls is not None:
        extras.add("parallel_tool_calls")
    return ", ".join(sorted({*extras, *refused}))


async def chat_run(body: ChatCompletionRequest, name: str, pin: Any) -> RunRequest:
    fmt = body.response_format
    schema = None
    if fmt is not None:  # most requests ask for none: no coroutine for them
        inner = fmt.json_schema.schema_ if isinstance(fmt, SchemaResponseFormat) else None
        schema = await output_schema(fmt.type, inner)
    tools = tuple(
        ToolDefinition(t.function.name, t.function.description, t.function.parameters)
        for t in body.tools or ()
    )
    return _run_request(
        body, name, pin, [m.wire() for m in body.messages], tools=tools, schema=schema
    )


async def responses_run(
    body: ResponsesRequest, name: str, pin: Any, input: AgentInput, endpoint: str = "responses"
) -> RunRequest:
    fmt = body.text.format if body.text else None
    schema = await output_schema(
        fmt.type if fmt else None, fmt.schema_ if isinstance(fmt, SchemaTextFormat) else None
    )
    empty = {"type": "object", "properties": {}}
    tools = tuple(
        ToolDefinition(t.name, t.description or "", t.parameters or empty) for t in body.tools or ()
    )
    return _run_request(body, name, pin, input, tools=tools, schema=schema, endpoint=endpoint)


def _run_request(
    body: ChatCompletionRequest | ResponsesRequest,
    name: str,
    pin: Any,
    input: AgentInput,
    *,
    tools: tuple[ToolDefinition, ...],
    schema: dict[str, Any] | None,
    endpoint: str = "chat_completions",
) -> RunRequest:
    _unique(tools)
    session_id, variables = _session(body)
    choice = body.tool_choice
    if isinstance(choice, dict) and "name" in choice:  # the Responses API's shape
        choice = {"type": "function", "function": {"name": choice["name"]}}
    settings = _settings(body)
    asked = tools or choice is not None or schema is not None or settings
    options = (
        RunOptions(tools, tool_choice=choice, output_schema=schema, settings=settings)
        if asked
        else None  # the common case: the agent's definition alone decides
    )
    if not isinstance(input, str):
        chat = endpoint == "chat_completions"
        field = "messages" if chat else "input"
        check_conversation(input, field=field, continued=session_id is not None, indexed=chat)
    run = RunRequest(name, input, session_id, variables, pin, endpoint, options, body.user)
    return replace(run, metadata=body.metadata) if body.metadata else run


def _unique(tools: tuple[ToolDefinition, ...]) -> None:
    if len(tools) < 2:
        return
    names = [tool.name for tool in tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadRequest(f"tools listed twice: {', '.join(twice)}", param="tools")
