"""A real ``dynagent serve`` with ``listen.lame_duck_seconds`` on SIGTERM: it goes on
serving with ``/readyz`` at 503 and every response closing its connection (a balancer holding
kept-alive connections drops them instead of sending on one the service is about to close),
until the time is up or a second signal comes; then it closes its port, serves a request still
coming on a connection it holds (one opened late, one kept idle all through, one kept after a
stream begun before the signal), drains and exits 0."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import Reply, ScriptedModelServer, Slow
from tests.support.process import ServedProcess, free_port, serve_process, write_config
from tests.support.service import agent_document, write_agent

from .test_lifecycle import connection_refused

WAITING = "stopping: the port is closed; 1 open connection(s) may still get a request"


def lame_duck_service(tmp_path: Path, server: ScriptedModelServer, seconds: float) -> Path:
    agents = tmp_path / "agents"
    agents.mkdir()
    write_agent(agents, agent_document("bot", server))
    return write_config(
        tmp_path,
        {
            "listen": {"lame_duck_seconds": seconds, "drain_seconds": 10},
            "factories": {"default": {"directory": str(agents)}},
            "sessions": {"store": "memory"},
        },
    )


async def ask(http: aiohttp.ClientSession, url: str, path: str, **body: Any) -> tuple[Any, ...]:
    """Status, body and ``Connection`` header of a call on the session's kept connection."""
    method = http.post if body else http.get
    async with method(f"{url}{path}", json=body or None) as response:
        answer = await response.json()
        return response.status, answer, response.headers.get("Connection")


async def test_a_stopping_service_serves_unready_closing_each_connection_until_its_port_closes(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.script("gpt-main", [Reply("before"), Reply("while stopping")])
    # Longer than any test: the second signal below is what ends it.
    config = lame_duck_service(tmp_path, model_server, seconds=600)
    async with serve_process(config, free_port()) as served, aiohttp.ClientSession() as http:
        invoke = "/v1/agents/bot/invoke"
        before = await ask(http, served.url, invoke, input="hi")
        ready = await ask(http, served.url, "/readyz")
        served.terminate()
        await served.wait_log("stopping: /readyz answers 503; requests are served for 600 s more")
        unready = await ask(http, served.url, "/readyz")
        during = await ask(http, served.url, invoke, input="hi")
        open_while_stopping = not await connection_refused(served.port)
        served.terminate()  # a second signal: stop now
        await served.wait_log("stopping: no new connections")
        refused = await connection_refused(served.port)
        code = await served.exit_code(within=10)

    assert (before[0], before[1]["output"], before[2]) == (200, "before", None)
    assert ready == (200, {"status": "ready", "agents": 1, "degraded": {}}, None)
    assert unready == (503, {"status": "stopping", "agents": 1, "degraded": {}}, "close")
    assert (during[0], during[1]["output"], during[2]) == (200, "while stopping", "close")
    assert (open_while_stopping, refused, code) == (True, True, 0)


async def test_a_connection_opened_while_stopping_is_served_when_its_request_comes_late(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    # A balancer opened the connection during the lame duck and sends its request only
    # after the port has closed: closing the connection then would drop that request.
    model_server.script("gpt-main", [Reply("served late")])
    config = lame_duck_service(tmp_path, model_server, seconds=2)
    async with serve_process(config, free_port()) as served:
        served.terminate()
        await served.wait_log("stopping: /readyz answers 503")
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        await served.wait_log(WAITING)
        refused = await connection_refused(served.port)
        body = b'{"input": "hi"}'
        writer.write(
            b"POST /v1/agents/bot/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        answer = await reader.read()  # to the end: the service closes the connection
        writer.close()
        code = await served.exit_code(within=10)

    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 200 OK", answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(payload)["output"] == "served late"
    assert (refused, code) == (True, 0)


async def read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One answer off a kept connection, whole or chunked: its head and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        return head, await reader.readuntil(b"\r\n0\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


def invoke_bytes(text: str, *, stream: bool = False) -> bytes:
    body = json.dumps({"input": text, "stream": stream}).encode()
    return (
        b"POST /v1/agents/bot/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


async def second_request(
    served: ServedProcess,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    within: float,
) -> tuple[bytes, bytes, bool, int]:
    """A second request on a connection the stopping service holds: the answer's head and
    body, whether the service closed the connection after it, and its exit code."""
    writer.write(invoke_bytes("second"))
    head, body = await read_answer(reader)
    closed = await reader.read() == b""
    writer.close()
    return head, body, closed, await served.exit_code(within=within)


async def test_a_connection_kept_by_a_stream_begun_before_stopping_serves_its_next_request(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    # The stream's headers left before SIGTERM, so they could not say "Connection:
    # close", and it ends after the port has closed: a balancer keeps the connection and
    # may send on it at once. Closing it straight after the stream would drop that request.
    model_server.script("gpt-main", [Slow(4.0, Reply("begun before")), Reply("sent after")])
    config = lame_duck_service(tmp_path, model_server, seconds=3)
    async with serve_process(config, free_port()) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(invoke_bytes("first", stream=True))
        await model_server.wait_for_requests(1)
        served.terminate()
        await served.wait_log(WAITING)
        first_head, first = await read_answer(reader)
        second_head, second, closed, code = await second_request(served, reader, writer, within=15)

    assert b"connection: close" not in first_head.lower()
    assert b'"begun before"' in first and b"event: run_finished" in first
    assert b"connection: close" in second_head.lower()
    assert json.loads(second)["output"] == "sent after"
    assert (closed, code) == (True, 0)


async def test_a_connection_kept_idle_through_the_lame_duck_serves_a_request_sent_after(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    # A balancer keeps idle connections and picks the most recently used first: one kept
    # since before SIGTERM may go unused all through the lame duck and be picked just as
    # the port closes. Closing it with the rest would reset the request sent on it.
    model_server.script("gpt-main", [Reply("before"), Reply("sent after")])
    config = lame_duck_service(tmp_path, model_server, seconds=2)
    async with serve_process(config, free_port()) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(invoke_bytes("first"))
        first_head, first = await read_answer(reader)
        served.terminate()
        await served.wait_log(WAITING)
        second_head, second, closed, code = await second_request(served, reader, writer, within=10)

    assert b"connection: close" not in first_head.lower()
    assert json.loads(first)["output"] == "before"
    assert b"connection: close" in second_head.lower()
    assert json.loads(second)["output"] == "sent after"
    assert (closed, code) == (True, 0)


async def test_a_connection_never_used_again_is_closed_when_the_time_is_up(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    # The wait for a kept connection's request is bounded: a client that keeps one and
    # never sends does not hold the stop beyond a second lame duck.
    model_server.script("gpt-main", [Reply("before")])
    config = lame_duck_service(tmp_path, model_server, seconds=1)
    async with serve_process(config, free_port()) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(invoke_bytes("first"))
        await read_answer(reader)
        served.terminate()
        await served.wait_log(WAITING)
        closed = await asyncio.wait_for(reader.read(), timeout=10) == b""
        writer.close()
        code = await served.exit_code(within=10)

    assert (closed, code) == (True, 0)
