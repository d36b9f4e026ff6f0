"""``POST /v1/chat/completions``: any OpenAI client calls an agent by name.

``model`` is the agent name; ``name@stable`` / ``name@canary`` pin a variant.
The agent's definition decides model, prompt and its tools; what a caller may
add (client tools, a response format, sampling settings) is in ``openai_options``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from dynagent.core.routing import RunRequest, split_model_name
from dynagent.events import ErrorEvent, Event, RunFinished, Usage
from dynagent.exceptions import ErrorKind
from dynagent.http._routes import ROUTING, RUN_ERRORS, SERVED_BY, SSE, Route, Routes
from dynagent.http.api.bodies import read_body
from dynagent.http.middleware.errors import STATUS, openai_error_body
from dynagent.http.openai.answer import AnswerText
from dynagent.http.openai.options import IGNORED_HEADER, chat_run, ignored_fields
from dynagent.http.openai.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    OpenAIError,
)
from dynagent.http.runs import agent_headers, pinned_variant, run_agent, stream_agent
from dynagent.http.sse import (
    SSE_HEADERS,
    EventStream,
    compact_json_value,
    encoded,
    json,
    open_stream,
)
from dynagent.runtime.agent import Agent, RunResult

routes = Routes("openai", error_body=OpenAIError)
"""OpenAI's routes answer errors in OpenAI's shape (``message, type, param, code``)."""
IGNORED = {
    IGNORED_HEADER: {
        "description": "Request fields that were ignored (unknown, or settings the "
        "agent's model.caller_settings does not allow)",
        "schema": {"type": "string"},
    }
}
"""The header of an answer that names what the request asked for in vain."""


def usage_body(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


def tool_call_body(call: dict[str, str]) -> dict[str, Any]:
    return {
        "id": call["id"],
        "type": "function",
        "function": {"name": call["name"], "arguments": call["arguments"]},
    }


def answer_of(agent: Agent, run: RunRequest) -> AnswerText:
    options = run.options
    structured = agent.spec.output is not None or bool(options and options.output_schema)
    return AnswerText(structured, options.client_names if options else frozenset())


def headers_of(
    agent: Agent, variant: Any, trace_id: str, body: Any, run: RunRequest
) -> dict[str, str]:
    headers = agent_headers(agent, variant, trace_id)
    refused = run.options.refused_settings(agent.spec) if run.options else []
    ignored = ignored_fields(body, refused)
    if ignored:
        headers[IGNORED_HEADER] = ignored
    return headers


def _completion(model: str, result: RunResult, answer: AnswerText) -> dict[str, Any]:
    """The answer as ``ChatCompletion``'s fields, in its order."""
    content = answer.text(result.events)
    calls = answer.client_calls()
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if calls:
        message["tool_calls"] = [tool_call_body(call) for call in calls]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return {
        "id": f"chatcmpl-{result.trace_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage_body(result.usage),
    }


@routes.add(
    Route(
        "POST",
        "/v1/chat/completions",
        "OpenAI-compatible chat completion",
        runs=True,
        parameters=ROUTING,
        request=ChatCompletionRequest,
        response=ChatCompletion,
        description="The answer, or its stream of events with stream: true",
        streams=(SSE,),
        headers={**SERVED_BY, **IGNORED},
        errors=RUN_ERRORS,
    )
)
async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, ChatCompletionRequest)
    name, variant_in_name = split_model_name(body.model)
    run = await chat_run(body, name, pinned_variant(request, variant_in_name))
    if not body.stream:
        agent, result = await run_agent(request, run)
        completion = _completion(body.model, result, answer_of(agent, run))
        headers = headers_of(agent, result.variant, result.trace_id, body, run)
        try:
            return compact_json_value(completion, headers=headers)
        except TypeError:  # an unpaired surrogate in the answer: escaped by the schema's
            return json(ChatCompletion.model_validate(completion), headers=headers, compact=True)
    agent, variant, trace_id, events = await stream_agent(request, run, hold=True)
    headers = {**SSE_HEADERS, **headers_of(agent, variant, trace_id, body, run)}
    response = await open_stream(request, headers, first_event_ready=True)
    usage = bool(body.stream_options and body.stream_options.include_usage)
    chunks = _chunks(body.model, trace_id, events, answer_of(agent, run), usage)
    stream = EventStream(response)
    async for chunk, last in chunks:
        await stream.write(b"data: " + encoded(chunk) + b"\n\n", held=last)
    await stream.end(b"data: [DONE]\n\n")
    return response


async def _chunks(
    model: str, trace_id: str, events: AsyncIterator[Event], answer: AnswerText, usage: bool
) -> AsyncIterator[tuple[dict[str, Any], bool]]:
    """Chat completion chunks: role, text deltas, client tool calls, a finish chunk,
    and the usage chunk when ``stream_options.include_usage`` asked for it; each with
    whether it is one of the answer's last (``EventStream``)."""
    base: dict[str, Any] = {
        "id": f"chatcmpl-{trace_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    if usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""}), False
    async for event in events:
        text = answer.feed(event)
        if text:
            yield chunk({"content": text}), False
        elif isinstance(event, ErrorEvent):
            kind: ErrorKind = event.error_type  # type: ignore[assignment]
            yield openai_error_body(kind, event.message, STATUS.get(kind, 502)), True
            async for _ in events:  # run_finished: the run is recorded before the answer ends
                pass
            return
        elif isinstance(event, RunFinished):
            calls = answer.client_calls()
            for index, call in enumerate(calls):
                yield chunk({"tool_calls": [{"index": index, **tool_call_body(call)}]}), True
            yield chunk({}, "tool_calls" if calls else "stop"), True
            if usage:
                yield {**base, "choices": [], "usage": usage_body(event.usage)}, True
