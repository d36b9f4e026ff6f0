"""A real ``dynagent serve`` process on SIGTERM: it stops accepting connections, lets
running requests finish within ``listen.drain_seconds`` (answering 503 to those that
do not), closes the session store and exits 0; a restart loses no session."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import Reply, ScriptedModelServer, Slow
from tests.support.process import ServedProcess, free_port, serve_process, write_config
from tests.support.service import agent_document, parse_sse, write_agent

STOPPING = "stopping: no new connections"


def service_files(tmp_path: Path, server: ScriptedModelServer, drain: float) -> Path:
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    write_agent(agents, agent_document("bot", server, model={"timeout": 60}))
    return write_config(
        tmp_path,
        {
            "listen": {"drain_seconds": drain},
            "factories": {"default": {"directory": str(agents)}},
            "sessions": {"store": "sqlite", "path": str(tmp_path / "state" / "sessions.db")},
        },
    )


async def invoke(served: ServedProcess, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    """Invoke ``bot`` on a connection of its own; an SSE answer comes back as its events."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{served.url}/v1/agents/bot/invoke", json=body) as response,
    ):
        if response.content_type == "text/event-stream":
            return response.status, parse_sse(await response.text()), dict(response.headers)
        return response.status, await response.json(), dict(response.headers)


async def connection_refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def test_sigterm_lets_the_running_request_finish_refuses_new_ones_and_exits_0(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.script("gpt-main", [Slow(2.0, Reply("finished in time"))])
    config = service_files(tmp_path, model_server, drain=10)
    async with serve_process(config, free_port()) as served:
        running = asyncio.create_task(invoke(served, {"input": "hi", "session_id": "s1"}))
        await model_server.wait_for_requests(1)
        signalled = time.perf_counter()
        served.terminate()
        stopping = await served.wait_log(STOPPING)
        refused = await connection_refused(served.port)
        still_running = not running.done()
        status, body, _ = await running
        code = await served.exit_code(within=10)
        took = time.perf_counter() - signalled

    assert stopping.endswith(f"{STOPPING}; 1 running request(s) have up to 10 s to finish")
    assert (refused, still_running) == (True, True)
    assert (status, body["output"], body["session_id"]) == (200, "finished in time", "s1")
    assert code == 0, "\n".join(served.log)
    # Exiting once the request is done takes less than starting did (not the 10 s drain).
    assert took < 2.0 + served.started_in, f"exited {took:.1f} s after SIGTERM"
    assert served.log[-1].endswith("| stopped")
    # The store was closed cleanly: SQLite folded its write-ahead log into the file.
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["sessions.db"]


async def test_a_run_past_the_drain_time_is_answered_503_and_the_process_exits_promptly(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("never sent"))] * 2)
    config = service_files(tmp_path, model_server, drain=1)
    async with serve_process(config, free_port()) as served:
        plain = asyncio.create_task(invoke(served, {"input": "hi"}))
        streamed = asyncio.create_task(invoke(served, {"input": "hi", "stream": True}))
        await model_server.wait_for_requests(2)
        signalled = time.perf_counter()
        served.terminate()
        (status, body, _), (stream_status, events, _) = await asyncio.gather(plain, streamed)
        answered = time.perf_counter() - signalled
        code = await served.exit_code(within=10)
        exited = time.perf_counter() - signalled

    message = (
        "the service is shutting down and this run did not finish within "
        "listen.drain_seconds = 1 s; retry the request"
    )
    assert len(body["error"].pop("trace_id")) == 32
    assert (status, body) == (503, {"error": {"type": "unavailable", "message": message}})
    assert stream_status == 200
    assert [name for name, _ in events] == ["run_started", "model_request", "error", "run_finished"]
    assert (events[2][1]["error_type"], events[2][1]["message"]) == ("unavailable", message)
    assert events[3][1]["status"] == "error"
    # Answered at the drain's end, and gone sooner after it than the process took to start.
    unit = served.started_in
    assert 1.0 <= answered < 1.0 + unit, f"answered {answered:.2f} s after SIGTERM, {unit=}"
    assert code == 0, "\n".join(served.log)
    assert exited < 1.0 + unit, f"exited {exited:.1f} s after SIGTERM, {unit=}"


def remembers_ada(body: dict[str, Any]) -> None:
    assert body["messages"][1:] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]


async def test_a_restart_loses_no_session_and_serves_the_same_revision(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.script(
        "gpt-main",
        [Reply("Nice to meet you, Ada."), Reply("You are Ada.", expect=remembers_ada)],
    )
    config = service_files(tmp_path, model_server, drain=5)
    async with serve_process(config, free_port()) as first:
        before = await invoke(first, {"input": "My name is Ada.", "session_id": "ada"})
        first.process.send_signal(signal.SIGTERM)
        assert await first.exit_code(within=10) == 0
    async with serve_process(config, free_port()) as second:
        after = await invoke(second, {"input": "What is my name?", "session_id": "ada"})
        second.terminate()
        assert await second.exit_code(within=10) == 0

    assert (before[0], before[1]["output"]) == (200, "Nice to meet you, Ada.")
    assert (after[0], after[1]["output"]) == (200, "You are Ada.")
    assert after[2]["X-Agent-Revision"] == before[2]["X-Agent-Revision"]


async def test_with_no_drain_time_running_requests_are_answered_503_at_once(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("never sent"))])
    config = service_files(tmp_path, model_server, drain=0)
    async with serve_process(config, free_port()) as served:
        running = asyncio.create_task(invoke(served, {"input": "hi"}))
        await model_server.wait_for_requests(1)
        served.terminate()
        status, body, _ = await running
        code = await served.exit_code(within=10)

    assert (status, body["error"]["type"], code) == (503, "unavailable", 0)
