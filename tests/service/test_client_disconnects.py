"""A caller that closes a stream half way: the service logs one line, no traceback, and
the run is recorded as disconnected."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.process import free_port, serve_process, write_config
from tests.support.service import agent_document


async def test_a_stream_closed_by_its_caller_is_one_log_line_without_a_traceback(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "bot.yaml").write_text(yaml.safe_dump(agent_document("bot", model_server)))
    config = write_config(
        tmp_path,
        {
            "sessions": {"path": "state/sessions.db"},
            "factories": {"default": {"directory": "agents"}},
        },
    )
    words = " ".join(f"w{i}" for i in range(40))
    model_server.script(DEFAULT_MODEL, [Reply(words, gap=0.05)])
    async with serve_process(config, free_port()) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        body = b'{"input": "talk", "stream": true}'
        writer.write(
            b"POST /v1/agents/bot/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await reader.readuntil(b"event: model_delta")  # the stream is under way
        writer.close()
        await writer.wait_closed()
        line = await served.wait_log("the client closed the connection", within=20)
        finished = await served.wait_log("bot@", within=20)
        served.terminate()
        assert await served.exit_code(within=20) == 0

    assert "POST /v1/agents/bot/invoke" in line
    assert "disconnected" in finished, finished
    log = "\n".join(served.log)
    assert "Traceback" not in log and "unhandled error" not in log, log
    assert "Error handling request" not in log, log
