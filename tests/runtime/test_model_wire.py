"""What a model call puts on the wire (``models/_endpoint.py``).

The call is posted on aiohttp's client with plain JSON: the body the chat completions
API defines, the key, and the headers of HTTP itself. A client library's request
pipeline (the ``openai`` client's options models, httpx2 requests, its ``X-Stainless-*``
headers) cost more CPU per call than everything else a served run did; what the endpoint
receives is held here, whatever the body holds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from dynagent import ModelError
from dynagent.models import ClientPool, OpenAIModel
from dynagent.models.base import ModelRequest
from tests.support.served import served

HTTP_HEADERS = {"host", "content-length", "accept-encoding", "user-agent"}
"""What aiohttp's client adds to every request."""
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


@dataclass
class Endpoint:
    url: str
    seen: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    """A chat completions endpoint that keeps each request's headers and raw body."""
    found = Endpoint("")

    async def completions(request: web.Request) -> web.Response:
        found.seen.append((dict(request.headers), await request.read()))
        return web.json_response(ANSWER)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    async with served(app) as base:
        found.url = f"{base}/v1"
        yield found


@pytest.mark.parametrize(
    ("text", "settings"),
    [
        ("ping", {}),
        ("grüß dich, 你好 🙂", {}),  # sent as UTF-8, not as \\u escapes
        ("ping", {"seed": 2**70}),  # past 64 bits: orjson refuses it, json does not
        ('"quoted" \\ and \n newline', {"temperature": 0.5, "stop": ["\n"]}),
    ],
    ids=["ascii", "beyond-ascii", "big-integer", "escapes"],
)
async def test_a_model_call_sends_the_api_body_and_the_key_and_nothing_of_a_client_library(
    endpoint: Endpoint, text: str, settings: dict[str, Any]
) -> None:
    pool = ClientPool()
    try:
        model = OpenAIModel(pool.get(endpoint.url, "sk-test"), "m", retries=0)
        messages = ({"role": "system", "content": "be brief"}, {"role": "user", "content": text})
        response = await model.request(ModelRequest(messages, settings=settings))
    finally:
        await pool.aclose()

    assert (response.content, response.model) == ("ok", "m")
    [(headers, raw)] = endpoint.seen
    sent = {name.lower(): value for name, value in headers.items()}
    assert {name: sent[name] for name in sent.keys() - HTTP_HEADERS} == {
        "authorization": "Bearer sk-test",
        "content-type": "application/json",
        "accept": "application/json",
    }
    body = {"model": "m", "messages": list(messages), **settings}
    assert json.loads(raw) == body
    assert raw == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def test_text_that_is_not_unicode_goes_out_escaped_not_as_a_model_failure(
    endpoint: Endpoint,
) -> None:
    # A tool's output (any outside text) may hold an unpaired surrogate, which has no
    # UTF-8. It used to fail the call as "malformed response from the model endpoint".
    pool = ClientPool()
    try:
        model = OpenAIModel(pool.get(endpoint.url, "sk-test"), "m", retries=0)
        messages = ({"role": "tool", "tool_call_id": "c1", "content": "grüß \udc00"},)
        response = await model.request(ModelRequest(messages))
    finally:
        await pool.aclose()
    assert response.content == "ok"
    [(_, raw)] = endpoint.seen
    assert raw.isascii()
    assert json.loads(raw)["messages"] == list(messages)


@pytest.fixture
async def endless_error() -> AsyncIterator[str]:
    """An endpoint that answers 500 with a body that never ends."""

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=500, headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        block = b"x" * 65_536
        while True:
            await response.write(block)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    async with served(app, shutdown_timeout=0.1) as base:
        yield f"{base}/v1"


async def test_an_error_answer_is_read_only_up_to_a_bound_and_refused_by_its_status(
    endless_error: str,
) -> None:
    # Read whole, an endless error body was held until the model's timeout: memory grew
    # with it and the caller heard of a timeout, not of the status the endpoint sent.
    pool = ClientPool()
    try:
        model = OpenAIModel(pool.get(endless_error, "sk-test"), "m", retries=0, timeout=5)
        with pytest.raises(ModelError) as refused:
            await model.request(ModelRequest(({"role": "user", "content": "hi"},)))
    finally:
        await pool.aclose()

    assert (type(refused.value), refused.value.status, refused.value.retryable) == (
        ModelError,
        500,
        True,
    )
    assert refused.value.message == "the model endpoint answered 500: Error code: 500"
