"""Hostile HTTP input on a real loopback socket: every answer is a 4xx in the JSON error
shape, never a 5xx or a stack trace, and nothing holds a request forever. A request
aiohttp cannot parse is answered before any handler: in the test server with aiohttp's
own 400, and by ``dynagent serve`` in the JSON error shape too."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from loguru import logger

from dynagent.http.api import bodies
from dynagent.http.app import create_app
from tests.support.process import free_port, serve_process, write_config
from tests.support.service import RunningService, agent_document, running_service, service_config

MAX_BODY = 16_384
INVOKE = "/v1/agents/bot/invoke"


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    (agents_dir / "bot.yaml").write_text(json.dumps(agent_document("bot")), encoding="utf-8")
    config = service_config(agents_dir, state_dir, listen={"max_body_bytes": MAX_BODY})
    async with running_service(config) as running:
        yield running


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lines.append, level="DEBUG", format="{level} {message}")
    yield lines
    logger.remove(sink)


async def exchange(service: RunningService, raw: bytes) -> bytes:
    """Send ``raw`` on a fresh connection and read one answer."""
    port = service.client.server.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await answer_of(reader)
    finally:
        writer.close()


async def answer_of(reader: asyncio.StreamReader, within: float = 5.0) -> bytes:
    """One HTTP/1.1 answer: its head, then as many bytes as its Content-Length says."""
    async with asyncio.timeout(within):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return head + await reader.readexactly(length)


def request(method: str, path: str, body: bytes = b"", /, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", "Connection: close"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    if body and "Transfer_Encoding" not in headers:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def parsed(answer: bytes) -> tuple[int, str, str]:
    """(status, content type, body) of a raw HTTP/1.1 answer."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    text = body.decode("utf-8", "replace")
    assert "Traceback" not in text and 'File "' not in text
    return int(status_line.split()[1]), headers.get("Content-Type", ""), text


def json_error(answer: bytes) -> tuple[int, str]:
    """(status, error type); an OpenAI-shaped body (``param``, ``code``) answers with its
    code, or its type when it has none."""
    status, content_type, text = parsed(answer)
    assert content_type.startswith("application/json"), text
    body = json.loads(text)
    assert set(body) == {"error"}
    if set(body["error"]) == {"message", "type", "param", "code"}:
        return status, body["error"]["code"] or body["error"]["type"]
    assert set(body["error"]) == {"type", "message"}
    return status, body["error"]["type"]


JSON = {"Content_Type": "application/json"}
OPENAI_KINDS = {"bad_request": "invalid_request_error", "not_found": "model_not_found"}
"""What ``json_error`` reads on an OpenAI route (its ``code``, else its ``type``) for a kind."""


def kind_on(path: str, kind: str) -> str:
    return OPENAI_KINDS.get(kind, kind) if path.startswith("/v1/chat/") else kind


async def test_a_body_over_the_limit_is_413_with_or_without_a_length(
    service: RunningService,
) -> None:
    big = json.dumps({"input": "x" * MAX_BODY}).encode()
    assert json_error(await exchange(service, request("POST", INVOKE, big, **JSON))) == (
        413,
        "too_large",
    )
    chunk = b"%x\r\n%s\r\n" % (len(big), big)
    chunked = request("POST", INVOKE, chunk + b"0\r\n\r\n", Transfer_Encoding="chunked", **JSON)
    assert json_error(await exchange(service, chunked)) == (413, "too_large")
    bomb = gzip.compress(json.dumps({"input": "a" * 50_000_000}).encode())
    zipped = request("POST", INVOKE, bomb, Content_Encoding="gzip", **JSON)
    assert json_error(await exchange(service, zipped)) == (413, "too_large")


BAD_BODIES = {
    "deep JSON": (b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}", "application/json"),
    "JSON nested past 64": (
        b'{"input": "x", "variables": ' + b"[" * 70 + b"]" * 70 + b"}",
        "application/json",
    ),
    "invalid UTF-8": (b'{"input": "\xc3\x28 \xff"}', "application/json"),
    "not JSON at all": (b"input=hello", "application/json"),
    "JSON but not an object": (b'"hello"', "application/json"),
    "empty": (b"", "application/json"),
}


@pytest.mark.parametrize("path", [INVOKE, "/v1/chat/completions"])
@pytest.mark.parametrize("raw,content_type", BAD_BODIES.values(), ids=list(BAD_BODIES))
async def test_bodies_that_are_not_the_json_asked_for_are_400(
    service: RunningService, path: str, raw: bytes, content_type: str
) -> None:
    answer = await exchange(service, request("POST", path, raw, Content_Type=content_type))
    assert json_error(answer) == (400, kind_on(path, "bad_request"))


UNPAIRED = {  # valid JSON, each escaping a UTF-16 surrogate without its pair
    INVOKE: b'{"input": [{"role": "user", "content": "hi \\ud800"}]}',
    "/v1/chat/completions": b'{"model": "bot", "messages": [{"role": "user", '
    b'"content": "\\uDFFF"}]}',
    "/v1/responses": b'{"model": "bot", "input": [{"role": "user", "content": "a\\udc00b"}]}',
}


@pytest.mark.parametrize("path", list(UNPAIRED))
async def test_text_that_is_not_unicode_is_400_not_a_model_failure(
    service: RunningService, path: str
) -> None:
    # It parses, but no model (nor store) can take it: before, chat completions sent it on
    # and answered 502, blaming the model endpoint for the caller's body.
    answer = await exchange(service, request("POST", path, UNPAIRED[path], **JSON))
    kind = "bad_request" if path == INVOKE else "invalid_request_error"  # OpenAI's shape
    assert json_error(answer) == (400, kind)
    assert "which is not valid Unicode" in parsed(answer)[2]
    # A surrogate pair escaped (an emoji) is text like any other.
    paired = UNPAIRED[path].replace(b"\\ud800", b"\\ud83d\\ude00")
    if paired != UNPAIRED[path]:
        assert parsed(await exchange(service, request("POST", path, paired, **JSON)))[0] == 200


WRONG_CONVERSATIONS = {  # each parses and validates, but no model endpoint takes it
    INVOKE: b'{"input": [{"role": "user", "content": null}]}',
    "/v1/chat/completions": b'{"model": "bot", "messages": [{"role": "tool", "content": "x"}]}',
    "/v1/responses": b'{"model": "bot", "input": [{"type": "function_call_output", '
    b'"call_id": "c1", "output": "x"}]}',
}


@pytest.mark.parametrize("path", list(WRONG_CONVERSATIONS))
async def test_a_conversation_no_model_takes_is_400_not_a_model_failure(
    service: RunningService, path: str
) -> None:
    # Sent on, the endpoint refused it, and the caller got a 502 blaming the endpoint.
    answer = await exchange(service, request("POST", path, WRONG_CONVERSATIONS[path], **JSON))
    kind = "bad_request" if path == INVOKE else "invalid_request_error"
    assert json_error(answer) == (400, kind)


NOT_FINITE = [
    (
        "/v1/chat/completions",
        b'{"model": "bot", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
    ),
    ("/v1/responses", b'{"model": "bot", "input": "hi", "top_p": -Infinity}'),
    ("/v1/traces/0123/feedback", b'{"score": NaN}'),
]


@pytest.mark.parametrize(("path", "raw"), NOT_FINITE, ids=[p for p, _ in NOT_FINITE])
async def test_a_number_that_is_not_finite_is_400_saying_so(
    service: RunningService, path: str, raw: bytes
) -> None:
    # JSON has no NaN, but parsers take it: it is refused as what it is, not by a bound.
    answer = await exchange(service, request("POST", path, raw, **JSON))
    status, _, text = parsed(answer)
    assert status == 400
    assert "finite number" in text


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_that_does_not_decode_is_400(service: RunningService, encoding: str) -> None:
    raw = request("POST", INVOKE, b"not compressed", Content_Encoding=encoding, **JSON)
    assert json_error(await exchange(service, raw)) == (400, "bad_request")


CONTENT_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json-patch+json",
    "application/xml",
]


@pytest.mark.parametrize("path", [INVOKE, "/v1/chat/completions", "/v1/agents/bot/rollback"])
@pytest.mark.parametrize("content_type", CONTENT_TYPES)
async def test_other_content_types_are_415(
    service: RunningService, path: str, content_type: str
) -> None:
    raw = request("POST", path, b'{"input": "hi"}', Content_Type=content_type)
    assert json_error(await exchange(service, raw)) == (
        415,
        kind_on(path, "unsupported_media_type"),
    )


UNPARSABLE = [
    request("GET", "/v1/agents", X_Big="a" * 8191),  # one field over aiohttp's 8190 bytes
    request("GET", "/v1/agents", **{f"X_{i}": "a" for i in range(200)}),
    request("GET", "/v1/agents/" + "a" * 9000),
    b"GET /v1/agents HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",
    b"POST /v1/agents/bot/invoke HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/agents/bot/invoke HTTP/1.1\r\nContent-Length: 2\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
]


@pytest.mark.parametrize(
    "raw",
    UNPARSABLE,
    ids=[
        "huge header",
        "too many headers",
        "huge URL",
        "NUL in a header",
        "bad length",
        "smuggling",
    ],
)
async def test_requests_aiohttp_cannot_parse_are_400_and_the_server_goes_on(
    service: RunningService, raw: bytes
) -> None:
    status, _, text = parsed(await exchange(service, raw))
    assert status == 400, text
    assert (await service.client.get("/healthz")).status == 200


async def test_dynagent_serve_answers_what_it_cannot_parse_in_its_json_error_shape(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "bot.yaml").write_text(json.dumps(agent_document("bot")), encoding="utf-8")
    config = write_config(tmp_path, {"factories": {"default": {"directory": str(agents)}}})
    async with serve_process(config, free_port()) as served:
        for raw in [*UNPARSABLE, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"]:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            try:
                writer.write(raw)
                await writer.drain()
                assert json_error(await answer_of(reader)) == (400, "bad_request"), raw[:60]
            finally:
                writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(request("GET", "/healthz"))
        assert parsed(await answer_of(reader))[0] == 200
        writer.close()
        await served.wait_log("an unreadable request from 127.0.0.1 answered 400: LineTooLong")
    assert not [line for line in served.log if "Traceback" in line]


TRAVERSALS = [
    "/v1/agents/..%2F..%2Fetc%2Fpasswd",
    "/v1/agents/%2e%2e%2f%2e%2e%2fetc%2fpasswd/invoke",
    "/v1/agents/..%5C..%5Cbot",
    "/v1/agents/bot%00.yaml",
    "/v1/agents/....//....//etc/passwd",
    "/v1/traces/..%2F..%2Fetc%2Fpasswd",
    "/v1/agents/%252e%252e%252fbot/revisions",
]


@pytest.mark.parametrize("path", TRAVERSALS)
async def test_path_traversal_in_names_finds_nothing(service: RunningService, path: str) -> None:
    method = "POST" if path.endswith("/invoke") else "GET"
    answer = await exchange(service, request(method, path, b'{"input": "x"}', **JSON))
    status, kind = json_error(answer)
    assert (status, kind) in {(404, "not_found"), (405, "method_not_allowed")}
    assert b"root:" not in answer


async def test_a_model_name_that_is_a_path_finds_nothing(service: RunningService) -> None:
    body = {"model": "../../etc/passwd", "messages": [{"role": "user", "content": "x"}]}
    raw = request("POST", "/v1/chat/completions", json.dumps(body).encode(), **JSON)
    assert json_error(await exchange(service, raw)) == (404, "model_not_found")


@pytest.mark.parametrize(
    "method,path,allowed",
    [
        ("DELETE", "/v1/agents/bot", "GET,HEAD"),
        ("GET", INVOKE, "POST"),
        ("PUT", "/v1/chat/completions", "POST"),
        ("GET", "/v1/agents/bot/promote", "POST"),
        ("PATCH", "/healthz", "GET,HEAD"),
    ],
)
async def test_a_method_not_allowed_is_405_naming_the_allowed_ones(
    service: RunningService, method: str, path: str, allowed: str
) -> None:
    async with service.client.request(method, path) as response:
        assert response.status == 405
        assert sorted(response.headers["Allow"].split(",")) == sorted(allowed.split(","))
        error = (await response.json())["error"]
        assert error.get("code", error["type"]) == "method_not_allowed"


def partial_body_head(length: int = 1000) -> bytes:
    return (
        f"POST {INVOKE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode() + b'{"input": "'


async def test_a_body_that_never_ends_is_408_while_others_are_served(
    service: RunningService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bodies, "BODY_TIMEOUT", 0.5)
    port = service.client.server.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(partial_body_head())
        await writer.drain()
        assert (await service.client.get("/healthz")).status == 200  # not held up
        answer = await answer_of(reader, within=5.0)
    finally:
        writer.close()
    assert json_error(answer) == (408, "request_timeout")
    assert "the body did not arrive within 0.5 s" in parsed(answer)[2]


async def test_a_client_leaving_mid_body_is_no_server_error(
    agents_dir: Path, state_dir: Path, logged: list[str]
) -> None:
    (agents_dir / "bot.yaml").write_text(json.dumps(agent_document("bot")), encoding="utf-8")
    app = create_app(service_config(agents_dir, state_dir))
    finished: asyncio.Queue[int] = asyncio.Queue()

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        finished.put_nowait(response.status)
        return response

    app.middlewares.insert(0, record)
    # As under ``dynagent serve``: aiohttp does not cancel a handler whose client left
    # (its test server does), so the handler meets the broken body itself.
    runner = web.AppRunner(app, handler_cancellation=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        _, writer = await asyncio.open_connection(*runner.addresses[0][:2])
        writer.write(partial_body_head())
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        async with asyncio.timeout(5):
            status = await finished.get()
    finally:
        await runner.cleanup()
    assert status == 400
    assert [line for line in logged if "unhandled error" in line or "ERROR" in line] == []


async def test_a_header_block_that_never_ends_is_dropped_after_keepalive_timeout(
    agents_dir: Path, state_dir: Path
) -> None:
    """aiohttp bounds an unfinished request head by ``keepalive_timeout`` only (75 s under
    ``dynagent serve``, as in aiohttp's ``run_app``); here it is 0.5 s."""
    app = create_app(service_config(agents_dir, state_dir))
    server = TestServer(app)
    await server.start_server(keepalive_timeout=0.5)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        await writer.drain()
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed by the server, nothing answered
        writer.close()
    finally:
        await server.close()
