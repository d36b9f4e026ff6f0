"""Every agent as an A2A server (protocol 0.3, the ``a2a-sdk`` package's types).

``GET /a2a/{name}/.well-known/agent-card.json`` describes the agent (version = its
revision, one skill, streaming, bearer auth); ``POST /a2a/{name}`` answers JSON-RPC
``message/send`` and ``message/stream`` (SSE). Both go through the same API keys and
scopes and the same run path as ``/v1/agents/{name}/invoke``: routing, canaries,
metrics and traces. A message's ``contextId`` is the run's session; prompt variables
come as ``metadata.variables`` (a JSON object of strings) of the params or the message.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

from a2a.types import (
    A2ARequest,
    InternalError,
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
    SendMessageSuccessResponse,
    SendStreamingMessageRequest,
    SendStreamingMessageSuccessResponse,
    TextPart,
)
from aiohttp import web
from pydantic import BaseModel, ValidationError

from ..a2a_card import agent_card
from ..events import ErrorEvent, FinalOutput
from ..exceptions import ConfigError, DynagentError
from ..sources._nacos_a2a import NacosA2aRegistrar
from .bodies import read_raw
from .runs import RunRequest, agent_headers, run_agent, stream_agent
from .state import A2A_REGISTRAR, CONFIG, REGISTRY, caller

routes = web.RouteTableDef()


async def start_registrar(app: web.Application) -> NacosA2aRegistrar | None:
    """With ``a2a.register``: the Nacos A2A registry told of every agent, now and on
    each change (a ``ConfigError`` when ``a2a.url`` is missing)."""
    config, registry = app[CONFIG], app[REGISTRY]
    if not config.a2a.register_:
        return None
    if not config.a2a.url:
        raise ConfigError(
            "a2a.register needs a2a.url: the address callers reach this service at",
            source="service config",
        )
    work_dir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="dynagent-a2a-"))
    registrar = NacosA2aRegistrar(config.nacos, config.a2a.url, work_dir)
    await registrar.start([entry.stable for entry in registry if entry.stable is not None])

    def tell(name: str, what: str) -> None:
        if what == "swapped" and name in registry:
            registrar.changed_agent(name, registry.entry(name).stable)
        elif what == "removed":
            registrar.changed_agent(name, None)

    registry.listeners.append(tell)
    app[A2A_REGISTRAR] = registrar
    return registrar


async def withdraw_registration(app: web.Application) -> None:
    """On shutdown, before running requests drain: the Nacos A2A registry stops handing
    out this service's endpoints (``on_shutdown``; the registrar closes at cleanup)."""
    registrar = app.get(A2A_REGISTRAR)
    if registrar is not None:
        await registrar.withdraw()


KNOWN_METHODS = frozenset({"message/send", "message/stream"})


def endpoint_url(request: web.Request, name: str) -> str:
    return str(request.url.with_path(f"/a2a/{name}").with_query(None))


@routes.get("/a2a/{name}/.well-known/agent-card.json")
async def get_agent_card(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    caller(request).check_agent(name)
    agent = request.app[REGISTRY].get(name)
    card = agent_card(agent, endpoint_url(request, name))
    return web.json_response(_wire(card))


@routes.post("/a2a/{name}")
async def a2a_rpc(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    caller(request).check_agent(name)
    parsed = _parse(await read_raw(request))
    if isinstance(parsed, JSONRPCErrorResponse):
        return web.json_response(_wire(parsed))
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
        return web.json_response(_wire(_error(parsed.id, _run_error(exc))))
    reply = _reply(result.output, parsed.params.message, result.trace_id)
    answer = SendMessageSuccessResponse(id=parsed.id, result=reply)
    return web.json_response(
        _wire(answer), headers=agent_headers(agent, result.variant, result.trace_id)
    )


async def _stream(
    request: web.Request, parsed: SendStreamingMessageRequest, run: RunRequest
) -> web.StreamResponse:
    try:
        agent, variant, trace_id, events = await stream_agent(request, run)
    except DynagentError as exc:
        return web.json_response(_wire(_error(parsed.id, _run_error(exc))))
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            **agent_headers(agent, variant, trace_id),
        }
    )
    await response.prepare(request)
    async for event in events:
        answer: BaseModel | None = None
        if isinstance(event, FinalOutput):
            reply = _reply(event.output, parsed.params.message, trace_id)
            answer = SendStreamingMessageSuccessResponse(id=parsed.id, result=reply)
        elif isinstance(event, ErrorEvent):
            answer = _error(parsed.id, InternalError(message=event.message))
        if answer is not None:
            await response.write(f"data: {json.dumps(_wire(answer))}\n\n".encode())
    await response.write_eof()
    return response


def _parse(raw: bytes) -> SendMessageRequest | SendStreamingMessageRequest | JSONRPCErrorResponse:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _error(None, JSONParseError())
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
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
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
