"""Run records shared by a fleet on one Redis (``sessions.store: redis``): two replicas
(two apps) and then a third started after both stopped, on one real redis-server. A run
made on one replica (whole, or streamed) is read and rated through the other and after a
restart; a stored
Response is continued on the other replica and after a restart; each stays its caller's
(another key finds neither); the fleet keeps at most ``traces.max_traces`` traces and
``traces.max_bytes`` bytes of them, whatever sizes callers send; with Redis out a run is
still answered and its trace read on its replica."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from redis.asyncio import Redis

from dynagent.core.response_store import ResponseStore, StoredResponse
from dynagent.core.shared_runs import SharedRuns
from dynagent.core.traces import TraceStore
from dynagent.exceptions import SessionStoreUnavailable
from tests.support import Reply, ScriptedModelServer
from tests.support.redis import RedisServer, redis_server
from tests.support.service import (
    FLEET_ADMIN,
    FLEET_KEY,
    FLEET_OTHER_KEY,
    Replica,
    RunningService,
    fleet_replicas,
)

__all__ = ["redis_server"]

KEY, OTHER_KEY, ADMIN = FLEET_KEY, FLEET_OTHER_KEY, FLEET_ADMIN


def auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def replica(
    model_server: ScriptedModelServer, redis_server: RedisServer, agents_dir: Path, tmp_path: Path
) -> Replica:
    return fleet_replicas(model_server, redis_server.url, agents_dir, tmp_path)


async def _call(
    service: RunningService, method: str, path: str, key: str = KEY, body: Any = None
) -> tuple[int, Any]:
    return await service.call(method, path, key, body)


async def _with_redis_out(redis_server: RedisServer, answer: Awaitable[Any]) -> Any:
    """``answer`` awaited while the fleet's Redis is stopped (started again after)."""
    await asyncio.to_thread(redis_server.stop)
    try:
        return await answer
    finally:
        await asyncio.to_thread(redis_server.start)


async def test_a_run_is_read_and_rated_through_any_replica_and_after_a_restart(
    model_server: ScriptedModelServer, replica: Replica
) -> None:
    model_server.script("gpt-main", [Reply("ok")])
    async with replica("one") as one, replica("two") as two:
        status, answer = await _call(one, "POST", "/v1/agents/bot/invoke", body={"input": "hi"})
        assert status == 200, answer
        path = f"/v1/traces/{answer['trace_id']}"
        here, there = await _call(one, "GET", path), await _call(two, "GET", path)
        assert there == here and here[0] == 200
        assert (await _call(two, "GET", path, OTHER_KEY))[0] == 404
        rating = {"score": 0.5, "comment": "fine"}
        assert (await _call(two, "POST", f"{path}/feedback", OTHER_KEY, rating))[0] == 404
        rated = await _call(two, "POST", f"{path}/feedback", body=rating)
        assert rated[0] == 200, rated
        again = await _call(one, "POST", f"{path}/feedback", body=rating)
        assert (again[0], again[1]["error"]["type"]) == (409, "conflict")
    async with replica("three") as three:
        status, trace = await _call(three, "GET", path)
    assert (status, trace) == (200, {**here[1], "feedback": {"score": 0.5, "comment": "fine"}})


async def test_a_streamed_run_is_read_through_another_replica_once_its_stream_ends(
    model_server: ScriptedModelServer, replica: Replica
) -> None:
    model_server.script("gpt-main", [Reply("streamed answer")])
    async with replica("one") as one, replica("two") as two:
        body = {"input": "hi", "stream": True}
        async with one.client.post("/v1/agents/bot/invoke", json=body, headers=auth()) as streamed:
            assert streamed.status == 200
            await streamed.read()  # to the stream's end
            trace_id = streamed.headers["X-Trace-Id"]
        here = await _call(one, "GET", f"/v1/traces/{trace_id}")
        there = await _call(two, "GET", f"/v1/traces/{trace_id}")
    assert there == here and here[0] == 200
    assert [event["type"] for event in there[1]["events"]][-1] == "run_finished"


async def test_a_response_continues_on_any_replica_and_after_a_restart(
    model_server: ScriptedModelServer, replica: Replica
) -> None:
    echo = Reply(lambda body: f"{len(body['messages'])} messages")
    model_server.script("gpt-main", [echo] * 3)
    async with replica("one") as one, replica("two") as two:
        status, first = await _call(
            one, "POST", "/v1/responses", body={"model": "bot", "input": "first"}
        )
        assert status == 200, first
        assert await _call(two, "GET", f"/v1/responses/{first['id']}") == (200, first)
        later = {"model": "bot", "input": "second", "previous_response_id": first["id"]}
        theirs = await _call(two, "POST", "/v1/responses", OTHER_KEY, later)
        assert (theirs[0], theirs[1]["error"]["code"]) == (404, "response_not_found")
        status, second = await _call(two, "POST", "/v1/responses", body=later)
        assert status == 200, second
    async with replica("three") as three:
        last = {"model": "bot", "input": "third", "previous_response_id": second["id"]}
        status, third = await _call(three, "POST", "/v1/responses", body=last)
    assert status == 200, third
    said = [
        [m["content"] for m in request["messages"] if m["role"] == "user"]
        for request in model_server.requests
    ]
    assert said == [["first"], ["first", "second"], ["first", "second", "third"]]


async def test_a_trace_deleted_on_one_replica_is_gone_on_every_one(
    model_server: ScriptedModelServer, replica: Replica, redis_server: RedisServer
) -> None:
    model_server.script("gpt-main", [Reply("one"), Reply("two")])
    async with replica("one") as one, replica("two") as two:
        ids = []
        for text in ("erase me", "keep me"):
            status, answer = await _call(one, "POST", "/v1/agents/bot/invoke", body={"input": text})
            assert status == 200, answer
            ids.append(answer["trace_id"])
        doomed, kept = ids
        path = f"/v1/traces/{doomed}"
        rated = await _call(two, "POST", f"{path}/feedback", body={"thumbs": "up"})
        assert rated[0] == 200, rated
        assert (await _call(two, "DELETE", path, OTHER_KEY))[0] == 404  # not theirs
        assert await _call(two, "DELETE", path) == (200, {"trace_id": doomed, "deleted": True})
        status, captured = await _call(one, "GET", "/v1/agents/bot/capture", ADMIN)
        assert status == 200, captured  # a backtest from production leaves the erased run out
        assert "erase me" not in json.dumps(captured) and "keep me" in json.dumps(captured)
        for reader in (one, two):  # one served the run and still held it in memory
            assert (await _call(reader, "GET", path))[0] == 404
            status, listed = await _call(reader, "GET", "/v1/traces")
            assert doomed not in [trace["trace_id"] for trace in listed["traces"]]
        again = await _call(one, "POST", f"{path}/feedback", body={"thumbs": "down"})
        assert again[0] == 404
        # A delete the fleet cannot take is refused, not done on one replica alone.
        deleting = _call(one, "DELETE", f"/v1/traces/{kept}")
        status, error = await _with_redis_out(redis_server, deleting)
        assert (status, error["error"]["type"]) == (503, "unavailable"), error
        assert (await _call(two, "GET", f"/v1/traces/{kept}"))[0] == 200
    async with Redis.from_url(redis_server.url) as redis:
        held = [key async for key in redis.scan_iter(f"*{doomed}*")]
    assert held == []


async def test_a_response_deleted_on_one_replica_is_gone_on_every_one(
    model_server: ScriptedModelServer, replica: Replica, redis_server: RedisServer
) -> None:
    model_server.script("gpt-main", [Reply("kept")] * 2)
    async with replica("one") as one, replica("two") as two:
        ids = []
        for _ in range(2):
            status, made = await _call(
                one, "POST", "/v1/responses", body={"model": "bot", "input": "x"}
            )
            assert status == 200, made
            ids.append(made["id"])
        doomed, kept = ids
        path = f"/v1/responses/{doomed}"
        assert (await _call(two, "DELETE", path, OTHER_KEY))[0] == 404  # not theirs
        assert await _call(two, "DELETE", path) == (
            200,
            {"id": doomed, "object": "response", "deleted": True},
        )
        for reader in (one, two):
            status, error = await _call(reader, "GET", path)
            assert (status, error["error"]["code"]) == (404, "response_not_found")
        later = {"model": "bot", "input": "y", "previous_response_id": doomed}
        assert (await _call(one, "POST", "/v1/responses", body=later))[0] == 404
        assert (await _call(one, "GET", f"/v1/responses/{kept}"))[0] == 200
        # A delete the fleet cannot take is refused, not done on one replica alone.
        deleting = _call(one, "DELETE", f"/v1/responses/{kept}")
        status, error = await _with_redis_out(redis_server, deleting)
        assert (status, error["error"]["type"]) == (503, "server_error"), error
    async with replica("three") as three:
        assert (await _call(three, "GET", f"/v1/responses/{kept}"))[0] == 200
        assert (await _call(three, "GET", path))[0] == 404
    async with Redis.from_url(redis_server.url) as redis:
        held = [key async for key in redis.scan_iter(f"*{doomed}*")]
    assert held == []


async def test_a_session_deleted_on_one_replica_starts_over_on_every_one(
    model_server: ScriptedModelServer, replica: Replica
) -> None:
    model_server.script("gpt-main", [Reply("first answer"), Reply("fresh")])
    session = {"input": "remember me", "session_id": "s"}
    async with replica("one") as one, replica("two") as two:
        assert (await _call(one, "POST", "/v1/agents/bot/invoke", body=session))[0] == 200
        status, history = await _call(two, "GET", "/v1/agents/bot/sessions/s")
        assert (status, len(history["messages"])) == (200, 2)
        assert (await _call(two, "DELETE", "/v1/agents/bot/sessions/s"))[0] == 200
        assert (await _call(one, "GET", "/v1/agents/bot/sessions/s"))[0] == 404
        later = {"input": "who am I?", "session_id": "s"}
        assert (await _call(one, "POST", "/v1/agents/bot/invoke", body=later))[0] == 200
    users = [m["content"] for m in model_server.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["who am I?"]


async def _until(response: ClientResponse, marker: bytes) -> bytes:
    """Read a stream until ``marker`` has arrived (not to its end); what was read."""
    seen = b""
    async for block in response.content.iter_any():
        seen += block
        if marker in seen:
            return seen
    raise AssertionError(f"the stream ended without {marker!r}: {seen[-300:]!r}")


async def test_a_streams_end_event_arrives_once_the_fleet_can_read_the_run(
    model_server: ScriptedModelServer, replica: Replica, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client that acts on run_finished (or response.completed) without waiting for the
    # stream to close must find the run on another replica. The shared writes are slowed,
    # so that an end event sent before them would be read before the fleet has the run.
    model_server.script("gpt-main", [Reply("streamed answer")], cycle=True)
    shared: list[str] = []
    written, keep = TraceStore.written, ResponseStore.keep

    async def slow_written(self: TraceStore, trace_id: str) -> None:
        await asyncio.sleep(0.2)
        await written(self, trace_id)
        shared.append("trace")

    async def slow_keep(self: ResponseStore, stored: StoredResponse) -> None:
        await asyncio.sleep(0.2)
        await keep(self, stored)
        shared.append("response")

    monkeypatch.setattr(TraceStore, "written", slow_written)
    monkeypatch.setattr(ResponseStore, "keep", slow_keep)
    async with replica("one") as one, replica("two") as two:
        body = {"input": "hi", "stream": True}
        async with one.client.post("/v1/agents/bot/invoke", json=body, headers=auth()) as streamed:
            await _until(streamed, b"event: run_finished")
            assert shared == ["trace"]
            status, trace = await _call(two, "GET", f"/v1/traces/{streamed.headers['X-Trace-Id']}")
        assert status == 200, trace
        asked = {"model": "bot", "input": [{"role": "user", "content": "hi"}], "stream": True}
        async with one.client.post("/v1/responses", json=asked, headers=auth()) as streamed:
            seen = await _until(streamed, b"event: response.completed")
            assert shared == ["trace", "trace", "response"]
        completed = seen.split(b"event: response.completed\ndata: ", 1)[1].split(b"\n", 1)[0]
        response_id = json.loads(completed)["response"]["id"]
        later = {"model": "bot", "input": "again", "previous_response_id": response_id}
        status, answer = await _call(two, "POST", "/v1/responses", body=later)
        assert status == 200, answer


async def test_with_redis_out_a_run_is_answered_and_its_trace_read_on_its_replica(
    model_server: ScriptedModelServer, replica: Replica, redis_server: RedisServer
) -> None:
    model_server.script("gpt-main", [Reply("ok")])
    async with replica("one") as one:
        await asyncio.to_thread(redis_server.stop)
        try:
            status, answer = await _call(one, "POST", "/v1/agents/bot/invoke", body={"input": "x"})
            assert status == 200, answer
            path = f"/v1/traces/{answer['trace_id']}"
            status, trace = await _call(one, "GET", path)
            rated = await _call(one, "POST", f"{path}/feedback", body={"thumbs": "up"})
        finally:
            await asyncio.to_thread(redis_server.start)
    assert (status, trace["trace_id"]) == (200, answer["trace_id"])
    assert (rated[0], rated[1]["error"]["type"]) == (503, "unavailable")
    assert "the fleet's Redis is unavailable (Redis " in rated[1]["error"]["message"]


async def test_a_redis_that_never_answers_is_named_for_its_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # takes the connection, answers nothing
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    runs = SharedRuns(
        f"redis://127.0.0.1:{port}/0",
        key_prefix="t:",
        timeout=0.2,
        traces=(3, 10_000),
        responses=(2, 10_000),
    )
    try:
        with pytest.raises(SessionStoreUnavailable) as raised:
            await runs.get("trace", "0123456789abcdef")
    finally:
        await runs.aclose()
        server.close()
    assert raised.value.message == (
        "reading a trace failed: the fleet's Redis is unavailable (Redis did not answer "
        "within 0.2 s (sessions.timeout)); retry in a moment"
    )


@pytest.fixture
async def shared(redis_server: RedisServer) -> AsyncIterator[tuple[SharedRuns, Redis]]:
    runs = SharedRuns(
        redis_server.url,
        key_prefix="t:",
        timeout=5.0,
        traces=(3, 10_000),
        responses=(2, 10_000),
    )
    client = Redis.from_url(redis_server.url, decode_responses=True)
    yield runs, client
    await runs.aclose()
    await client.aclose()


@pytest.mark.parametrize(
    "sizes",
    [
        [100] * 10,  # count binds
        [4_000] * 6,  # bytes bind
        [9_000, 50_000, 10, 9_990, 1, 8_000],  # one bigger than the whole bound, one at it
    ],
)
async def test_the_fleet_keeps_records_within_count_and_bytes_oldest_first(
    shared: tuple[SharedRuns, Redis], sizes: list[int]
) -> None:
    runs, client = shared
    kept: list[str] = []
    for number, size in enumerate(sizes):
        record = {"text": "x" * size}
        record_id = f"r{number}"
        if await runs.keep("trace", record_id, record, {"trace_id": record_id}):
            kept.append(record_id)
            await runs.rate(record_id, {"score": 1})
    tag = "{t:runs}:"
    held = [str(member) for member in await client.zrange(f"{tag}traces", 0, -1)]
    lines = await client.hgetall(f"{tag}traces:summaries")  # the list's lines go with them
    assert sorted(lines) == sorted(held)
    lengths = [await client.strlen(f"{tag}trace:{record_id}") for record_id in held]
    total = int(await client.get(f"{tag}traces:bytes") or 0)
    assert held == kept[-len(held) :] and len(held) <= 3
    assert total == sum(lengths) <= 10_000
    stored = {str(key) for key in await client.keys(f"{tag}*")}
    assert stored == {
        f"{tag}traces",
        f"{tag}traces:bytes",
        f"{tag}traces:summaries",
        f"{tag}seq",
        *(f"{tag}trace:{record_id}" for record_id in held),
        *(f"{tag}feedback:{record_id}" for record_id in held),
    }
    assert (await runs.trace(held[-1]))[1] == {"score": 1}
