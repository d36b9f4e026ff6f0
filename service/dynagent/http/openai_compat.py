"""``POST /v1/chat/completions``: any OpenAI client calls an agent by name.

``model`` is the agent name; ``name@stable`` / ``name@canary`` pin a variant.
The agent's own definition decides model, prompt, tools and sampling.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ..agent import RunResult
from ..events import Event, JsonValue
from ..exceptions import ErrorKind
from .bodies import read_body
from .errors import STATUS, error_body
from .runs import (
    RunRequest,
    agent_headers,
    pinned_variant,
    run_agent,
    split_model_name,
    stream_agent,
)
from .schemas import ChatCompletionRequest

routes = web.RouteTableDef()


def _text(output: JsonValue) -> str:
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _completion(model: str, result: RunResult) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{result.trace_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": _text(result.output)},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": result.usage.input_tokens,
            "completion_tokens": result.usage.output_tokens,
            "total_tokens": result.usage.total_tokens,
        },
    }


@routes.post("/v1/chat/completions")
async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, ChatCompletionRequest)
    name, variant_in_name = split_model_name(body.model)
    run = RunRequest(
        name=name,
        input=[m.wire() for m in body.messages],
        session_id=None,
        variables={},
        pin=pinned_variant(request, variant_in_name),
        endpoint="chat_completions",
    )
    if not body.stream:
        agent, result = await run_agent(request, run)
        return web.json_response(
            _completion(body.model, result),
            headers=agent_headers(agent, result.variant, result.trace_id),
        )
    agent, variant, trace_id, events = await stream_agent(request, run)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            **agent_headers(agent, variant, trace_id),
        }
    )
    await response.prepare(request)
    structured = agent.spec.output is not None
    async for chunk in _chunks(body.model, trace_id, events, structured):
        await response.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _chunks(
    model: str, trace_id: str, events: AsyncIterator[Event], structured: bool
) -> AsyncIterator[dict[str, Any]]:
    """Chat completion chunks: role, text deltas, a finish chunk, usage.

    With an output schema the answer is sent whole once validated, since
    attempts the model must fix would otherwise reach the caller.
    """
    base = {
        "id": f"chatcmpl-{trace_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    async for event in events:
        if event.type == "model_delta" and not structured:
            yield chunk({"content": event.text})
        elif event.type == "final_output" and structured:
            yield chunk({"content": _text(event.output)})
        elif event.type == "error":
            kind: ErrorKind = event.error_type  # type: ignore[assignment]
            yield {**error_body(kind, event.message), "status": STATUS.get(kind, 502)}
            return
        elif event.type == "run_finished":
            yield chunk({}, "stop")
            yield {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": event.usage.input_tokens,
                    "completion_tokens": event.usage.output_tokens,
                    "total_tokens": event.usage.total_tokens,
                },
            }
