"""How a whole (not streamed) model answer is read: in one read when its length is known,
within the limit and not compressed; as it arrives, refused at the limit, otherwise (a
chunked body, a compressed one whatever its length, one longer than the limit). Every
shape gives the same answer or the same failure either way."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from dynagent import ModelError
from dynagent.models import ClientPool, OpenAIModel, _sse
from dynagent.models.base import ModelRequest
from tests.support.served import served

ANSWER = {
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}
MAX_CHARS = 1000
LIMIT = 6 * MAX_CHARS + (1 << 20)
"""Bytes of a whole answer the model below accepts."""
BIG = {**ANSWER, "padding": " " * (LIMIT + 10)}


async def _plain(request: web.Request) -> web.StreamResponse:
    return web.json_response(ANSWER)


async def _chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    data = json.dumps(ANSWER).encode()
    for start in range(0, len(data), 7):
        await response.write(data[start : start + 7])
    await response.write_eof()
    return response


async def _gzip(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=gzip.compress(json.dumps(ANSWER).encode()),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )


async def _gzip_bomb(request: web.Request) -> web.StreamResponse:
    # Small on the wire, past the limit once inflated.
    return web.Response(
        body=gzip.compress(json.dumps(BIG).encode()),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )


async def _too_long(request: web.Request) -> web.StreamResponse:
    return web.json_response(BIG)


async def _cut_short(request: web.Request) -> web.StreamResponse:
    data = json.dumps(ANSWER).encode()
    response = web.StreamResponse(
        headers={"Content-Type": "application/json", "Content-Length": str(len(data) + 50)}
    )
    await response.prepare(request)
    await response.write(data)
    assert request.transport is not None
    request.transport.close()
    return response


HANDLERS: dict[str, Callable[[web.Request], Any]] = {
    "plain": _plain,
    "chunked": _chunked,
    "gzip": _gzip,
    "gzip_bomb": _gzip_bomb,
    "too_long": _too_long,
    "cut_short": _cut_short,
}


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    app = web.Application()
    for name, handler in HANDLERS.items():
        app.router.add_post(f"/{name}/chat/completions", handler)
    async with served(app) as base:
        yield base


@pytest.fixture
def paced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many bodies were read block by block as they arrived."""
    reads: list[int] = []
    original = _sse.paced_blocks

    def counted(response: Any) -> Any:
        reads.append(1)
        return original(response)

    monkeypatch.setattr(_sse, "paced_blocks", counted)
    return reads


async def _ask(base_url: str, shape: str) -> str | None:
    pool = ClientPool()
    model = OpenAIModel(pool.get(f"{base_url}/{shape}", "k"), "m", retries=0, max_chars=MAX_CHARS)
    try:
        response = await model.request(ModelRequest(messages=({"role": "user", "content": "hi"},)))
        return response.content
    finally:
        await pool.aclose()


@pytest.mark.parametrize(
    ("shape", "read_as_it_arrives"), [("plain", False), ("chunked", True), ("gzip", True)]
)
async def test_a_whole_answer_is_read_at_once_only_when_its_length_bounds_it(
    base_url: str, paced: list[int], shape: str, read_as_it_arrives: bool
) -> None:
    assert await _ask(base_url, shape) == "ok"
    assert bool(paced) is read_as_it_arrives


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("gzip_bomb", f"went past {LIMIT} bytes"),
        ("too_long", f"went past {LIMIT} bytes"),
        ("cut_short", "connect"),
    ],
)
async def test_a_whole_answer_past_the_limit_or_cut_short_fails(
    base_url: str, shape: str, message: str
) -> None:
    with pytest.raises(ModelError) as caught:
        await _ask(base_url, shape)
    assert message in str(caught.value).lower()
