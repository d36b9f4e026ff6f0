"""Every agent as an A2A server (protocol 0.3, the ``a2a-sdk`` package's types).

``GET /a2a/{name}/.well-known/agent-card.json`` describes the agent (version = its
revision, one skill, streaming, bearer auth); ``POST /a2a/{name}`` answers JSON-RPC
``message/send`` (the reply as one message) and ``message/stream`` (SSE: a task, then its
status and artifact updates as the run goes, ``a2a/updates.py``). Both go through the
same API keys and scopes and the same run path as ``/v1/agents/{name}/invoke``: routing,
canaries, metrics and traces. A message's ``contextId`` is the run's session; prompt variables
come as ``metadata.variables`` (a JSON object of strings) of the params or the message.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from a2a.types import (
    A2ARequest,
    AgentCard,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    JSONRPCError,
    JSONRPCErrorResponse,
    Message,
    MethodNotFoundError,
    Part,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    SendMessageSuccessResponse,
    SendStreamingMessageRequest,
    SendStreamingMessageResponse,
    SendStreamingMessageSuccessResponse,
    Task,
    TextPart,
)
from aiohttp import web
from pydantic import BaseModel, ValidationError

from dynagent.a2a.card import agent_card
from dynagent.a2a.updates import TaskUpdates, Update, answer_text
from dynagent.core.routing import RunRequest
from dynagent.exceptions import DynagentError
from dynagent.http import sse
from dynagent.http._routes import AGENT_ERRORS, SSE, Route, Routes
from dynagent.http.api.bodies import read_raw, unpaired_surrogate
from dynagent.http.runs import agent_headers, run_agent, stream_agent
from dynagent.http.state import caller, service

routes = Routes("a2a")


KNOWN_METHODS = frozenset({"message/send", "message/stream"})


def endpoint_url(request: web.Request, name: str) -> str:
    """Where the card sends callers: ``a2a.public_url``, else the address this
    connection reached. Never the ``Host`` header, which the caller writes: a card
    built from it sent other callers to a host of an attacker's choosing."""
    public = service(request).config.a2a.public_url
    if public:
        return f"{public.rstrip('/')}/a2a/{name}"
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    host, port = (sockname[0], sockname[1]) if sockname else ("127.0.0.1", 0)
    host = f"[{host}]" if ":" in host else host
    scheme = (
        "https" if request.transport and request.transport.get_extra_info("sslcontext") else "http"
    )
    return f"{scheme}://{host}:{port}/a2a/{name}"


@routes.add(
    Route(
        "GET",
        "/a2a/{name}/.well-known/agent-card.json",
        "The agent's A2A card: version = revision, streaming, bearer security",
        response=AgentCard,
        errors=AGENT_ERRORS,
    )
)
async def get_agent_card(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    caller(request).check_agent(name)
    agent = service(request).registry.get(name)
    card = agent_card(agent, endpoint_url(request, name))
    return sse.json(card, omit="none")


# JSON-RPC answers a bad request in-band: HTTP 200 with a JSON-RPC error (-32700 not
# JSON, -32600 not a request, -32601 another method, -32602 bad params, -32603 the run
# failed with ``data.type`` our error type).
@routes.add(
    Route(
        "POST",
        "/a2a/{name}",
        "A2A JSON-RPC message/send and message/stream (the same run path as invoke)",
        runs=True,
        request=(SendMessageRequest, SendStreamingMessageRequest),
        response=SendMessageResponse,
        description="message/send: a JSON-RPC response (the reply Message, or an error); "
        "message/stream: server-sent events, each a JSON-RPC response",
        streams=(SSE,),
        stream_item=SendStreamingMessageResponse,
        errors=(*AGENT_ERRORS, 400, 408, 413),
    )
)
async def a2a_rpc(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    caller(request).check_agent(name)
    parsed = _parse(await read_raw(request))
    if isinstance(parsed, JSONRPCErrorResponse):
        return sse.json(parsed, omit="none")
    run = RunRequest(
        name=name,
        input=_text_of(parsed.params.message),
        session_id=parsed.params.message.context_id,
        variables=_variables(parsed) or {},
        pin=None,
        endpoint="a2a",
    )
    if isinstance(parsed, SendStreamingMessageRequest):
        return await _stream(request, parsed, run)
    try:
        agent, result = await run_agent(request, run)
    except DynagentError as exc:
        return sse.json(_error(parsed.id, _run_error(exc)), omit="none")
    reply = _reply(result.output, parsed.params.message, result.trace_id)
    answer = SendMessageSuccessResponse(id=parsed.id, result=reply)
    headers = agent_headers(agent, result.variant, result.trace_id)
    return sse.json(answer, headers=headers, omit="none")


async def _stream(
    request: web.Request, parsed: SendStreamingMessageRequest, run: RunRequest
) -> web.StreamResponse:
    try:
        agent, variant, trace_id, events = await stream_agent(request, run)
    except DynagentError as exc:
        return sse.json(_error(parsed.id, _run_error(exc)), omit="none")
    headers = {**sse.SSE_HEADERS, **agent_headers(agent, variant, trace_id)}
    response = await sse.open_stream(request, headers, first_event_ready=True)
    asked = parsed.params.message
    updates = TaskUpdates(uuid.uuid4().hex, asked.context_id or uuid.uuid4().hex, trace_id)
    stream = sse.EventStream(response)
    await stream.write(_event(parsed.id, updates.task(asked)))
    async for event in events:
        for update in updates.of(event):  # the final ones leave with the stream's end
            await stream.write(_event(parsed.id, update), held=updates.done)
    await stream.end()
    return response


def _event(request_id: Any, result: Task | Update) -> bytes:
    """One server-sent event: a JSON-RPC response carrying ``result``."""
    answer = SendStreamingMessageSuccessResponse(id=request_id, result=result)
    return b"data: " + sse.encoded(_wire(answer)) + b"\n\n"


def _parse(raw: bytes) -> SendMessageRequest | SendStreamingMessageRequest | JSONRPCErrorResponse:
    data = _decoded(raw)
    if isinstance(data, JSONRPCErrorResponse):
        return data
    refused = _envelope_error(data)
    if refused is not None:
        return refused
    request_id = data.get("id")
    try:
        request = A2ARequest.model_validate(data).root
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        return _error(request_id, InvalidParamsError(message=f"{where}: {first['msg']}"))
    assert isinstance(request, SendMessageRequest | SendStreamingMessageRequest)
    if not _text_of(request.params.message):
        return _error(request_id, InvalidParamsError(message="the message has no text part"))
    if _variables(request) is None:
        return _error(
            request_id,
            InvalidParamsError(
                message=f"metadata.variables must be an object of at most {MAX_VARIABLES} strings"
            ),
        )
    return request


def _decoded(raw: bytes) -> Any:
    """The body's JSON, or the -32700 answer: not JSON, or JSON whose text is not Unicode
    (an unpaired surrogate parses, but no model takes it; no id is read from either)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _error(None, JSONParseError())
    unpaired = unpaired_surrogate(raw)
    if unpaired is not None:
        path, bad = unpaired
        message = f"{path or 'the request'} holds {bad}, which is not valid Unicode"
        return _error(None, JSONParseError(message=message))
    return data


MAX_VARIABLES = 100
"""As many prompt variables as ``/v1/agents/{name}/invoke`` takes."""


def _variables(request: SendMessageRequest | SendStreamingMessageRequest) -> dict[str, str] | None:
    """The prompt variables in ``metadata.variables`` (the message's over the params');
    None when they are not an object of strings."""
    found: dict[str, str] = {}
    for metadata in (request.params.metadata, request.params.message.metadata):
        value = (metadata or {}).get("variables", {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            return None
        found.update(value)
    return found if len(found) <= MAX_VARIABLES else None


def _envelope_error(data: Any) -> JSONRPCErrorResponse | None:
    """The answer to a body that is no JSON-RPC request of ours (its params aside)."""
    if not isinstance(data, dict):
        return _error(None, InvalidRequestError())
    request_id = data.get("id")
    if not _valid_id(request_id):
        return _error(None, InvalidRequestError(message="'id' must be a string or an integer"))
    if data.get("jsonrpc") != "2.0" or "method" not in data:
        return _error(request_id, InvalidRequestError())
    if data["method"] not in KNOWN_METHODS:
        return _error(request_id, MethodNotFoundError())
    return None


def _valid_id(value: Any) -> bool:
    """JSON-RPC: an id is a string or a number (an integer here, as ``a2a-sdk`` has it)."""
    return value is None or isinstance(value, str) or type(value) is int


def _text_of(message: Message) -> str:
    return "\n".join(p.root.text for p in message.parts if isinstance(p.root, TextPart))


def _reply(output: Any, asked: Message, trace_id: str) -> Message:
    text = answer_text(output)
    return Message(
        role=Role.agent,
        message_id=uuid.uuid4().hex,
        context_id=asked.context_id,
        parts=[Part(root=TextPart(text=text))],
        metadata={"trace_id": trace_id},
    )


def _run_error(error: DynagentError) -> JSONRPCError:
    """A run that failed, as a JSON-RPC error carrying our error type."""
    return JSONRPCError(code=-32603, message=error.message, data={"type": error.kind})


def _error(request_id: Any, error: Any) -> JSONRPCErrorResponse:
    return JSONRPCErrorResponse(id=request_id, error=error)


def _wire(model: BaseModel) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
