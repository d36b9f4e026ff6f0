"""Each way of failing to talk to a model endpoint reaches the caller as its own error:
a refused connection, a host that does not resolve, a TLS failure, a connection closed
before the answer or in the middle of it, a timeout, a 4xx, a 5xx. The transport under
the ``openai`` client reports every connection failure as a timeout; a refused connection
was answered in milliseconds as "did not answer within model.timeout"."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import BrokenStream, Fail, Reply, ScriptedModelServer, Slow
from tests.support.service import agent_document, parse_sse

from .conftest import Serve

NO_WAIT = {"retry-after-ms": "0"}

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def tcp_server(handler: Handler) -> AsyncIterator[int]:
    """A bare TCP server on loopback doing ``handler`` with each connection: its port."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _resets(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")  # the request's head, then an abortive close
    writer.transport.abort()


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@dataclass(frozen=True)
class Failure:
    base_url: str
    """``{model}``: the scripted model server; ``{reset}``: a server that resets; ``{free}``."""
    steps: list[Any]
    status: int
    type: str
    message: str


MODEL = "{model}"
FAILURES = {
    "connection refused": Failure(
        "http://127.0.0.1:{free}/v1",
        [],
        502,
        "model_error",
        "the model endpoint at 127.0.0.1:{free} refused the connection (nothing listens "
        "there: check model.base_url)",
    ),
    "dns failure": Failure(
        "http://model-endpoint.invalid/v1",
        [],
        502,
        "model_error",
        "could not resolve the host of the model endpoint at model-endpoint.invalid:80: ",
    ),
    "tls failure": Failure(
        "https://127.0.0.1:{port}/v1",
        [],
        502,
        "model_error",
        "the TLS handshake with the model endpoint at 127.0.0.1:{port} failed: "
        "WRONG_VERSION_NUMBER (does it speak https?)",
    ),
    "reset before the answer": Failure(
        "http://127.0.0.1:{reset}/v1",
        [],
        502,
        "model_error",
        "the connection to the model endpoint at 127.0.0.1:{reset} broke before the answer "
        "was complete",
    ),
    "timeout": Failure(
        MODEL,
        [Slow(30, Reply("late"))] * 2,
        504,
        "timeout",
        "the model endpoint did not answer within model.timeout = 0.3 s",
    ),
    "4xx": Failure(
        MODEL,
        [Fail(401)],
        502,
        "model_error",
        "the model endpoint answered 401: Error code: 401 - scripted failure 401 "
        "(check model.api_key)",
    ),
    "5xx": Failure(
        MODEL,
        [Fail(503, headers=NO_WAIT)] * 2,
        502,
        "model_error",
        "the model endpoint answered 503: Error code: 503 - scripted failure 503",
    ),
}


@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES.keys())
async def test_each_model_transport_failure_is_its_own_error(
    serve: Serve, model_server: ScriptedModelServer, failure: Failure
) -> None:
    if failure.steps:
        model_server.script("gpt-main", failure.steps)
    async with tcp_server(_resets) as reset:
        where = {"model": model_server.base_url, "free": free_port(), "reset": reset}
        where["port"] = model_server.address.rsplit(":", 1)[1]
        base_url = failure.base_url.format(**where)
        model = {"base_url": base_url, "timeout": 0.3, "retries": 1}
        async with serve(agent_document("bot", model_server, model=model)) as service:
            response = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
            body = await response.json()

    body["error"].pop("trace_id")
    message = failure.message.format(**where)
    got = body["error"]["message"]
    if message.endswith(": "):  # the resolver's own words follow (they differ by system)
        body["error"]["message"] = got[: len(message)] if got.startswith(message) else got
    assert (response.status, body) == (
        failure.status,
        {"error": {"type": failure.type, "message": message}},
    )


async def test_a_connection_reset_mid_answer_is_a_broken_connection_not_a_timeout(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [BrokenStream("partial answer that never ends")])
    async with serve(agent_document("bot", model_server, model={"retries": 2})) as service:
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi", "stream": True}
        )
        events = parse_sse(await response.text())

    error = next(data for name, data in events if name == "error")
    where = model_server.address
    assert (error["error_type"], error["message"]) == (
        "model_error",
        f"the connection to the model endpoint at {where} broke before the answer was "
        "complete after part of the answer was streamed",
    )
