"""Each way an HTTP tool's call can fail reaches the model as its own ``TOOL_ERROR``:
a refused connection, a host that does not resolve, a TLS failure, a connection reset
before the answer, a timeout, a 4xx and a 5xx; the transient ones (the same call may
succeed if sent again) say so to the ``retry`` interceptor."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from dynagent import ToolCallError
from tests.support import AgentFactory


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
async def resetting() -> AsyncIterator[int]:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.transport.abort()

    server = await asyncio.start_server(reset, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.fixture
async def api(aiohttp_server: AiohttpServer) -> int:
    async def answer(request: web.Request) -> web.Response:
        if request.path == "/slow":
            await asyncio.sleep(5)  # the server's side of a timeout: the tool gives up at 0.5 s
            return web.json_response({})
        status = int(request.path.strip("/"))
        return web.json_response({"status": status}, status=status)

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    server = await aiohttp_server(app, host="127.0.0.1")
    assert server.port is not None
    return server.port


async def failure(make_agent: AgentFactory, url: str, **extra: Any) -> ToolCallError:
    spec = {
        "type": "http",
        "name": "call_api",
        "url": url,
        "parameters": {"type": "object", "properties": {}},
        "allow_hosts": ["127.0.0.1", "tool-host.invalid"],
        "allow_private": True,
        "timeout": 0.5,
        **extra,
    }
    tool = make_agent(spec_tools=[spec]).tools["call_api"]
    with pytest.raises(ToolCallError) as caught:
        await tool.function({})
    return caught.value


async def test_each_http_tool_failure_is_its_own_error(
    make_agent: AgentFactory, api: int, resetting: int
) -> None:
    urls = {
        "refused": f"http://127.0.0.1:{free_port()}/x",
        "dns": "http://tool-host.invalid/x",
        "tls": f"https://127.0.0.1:{api}/x",
        "reset": f"http://127.0.0.1:{resetting}/x",
        "timeout": f"http://127.0.0.1:{api}/slow",
        "4xx": f"http://127.0.0.1:{api}/404",
        "5xx": f"http://127.0.0.1:{api}/503",
    }
    needles = {
        "refused": "Connect call failed",
        "dns": "Cannot connect to host tool-host.invalid:80",
        "tls": "SSL",
        "reset": "the connection to 127.0.0.1 broke: Server disconnected",
        "timeout": "no answer from 127.0.0.1 within 0.5 s",
        "4xx": 'HTTP 404: {"status": 404}',
        "5xx": 'HTTP 503: {"status": 503}',
    }
    found = {}
    for kind, url in urls.items():
        error = await failure(make_agent, url)
        found[kind] = (error.transient, error.status)
        assert needles[kind] in error.message, (kind, error.message)
    assert found == {
        "refused": (True, None),
        "dns": (True, None),
        "tls": (False, None),  # the same handshake fails the same way next time
        "reset": (True, None),
        "timeout": (True, None),
        "4xx": (False, 404),
        "5xx": (True, 503),
    }
