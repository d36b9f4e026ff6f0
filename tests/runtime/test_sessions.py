"""Sessions: a conversation continued over runs, in memory, in SQLite and in a real Redis,
under concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dynagent import ModelError, Tool
from dynagent.sessions import MemorySessionStore, SqliteSessionStore
from dynagent.sessions.base import SessionStore
from dynagent.sessions.redis import RedisSessionStore
from tests.support import (
    SYSTEM_PROMPT,
    AgentFactory,
    CallTools,
    Fail,
    Reply,
    ScriptedModelServer,
    Slow,
)
from tests.support.redis import RedisServer, redis_server

__all__ = ["redis_server"]  # the fixture, for the "redis" store

SYSTEM = {"role": "system", "content": SYSTEM_PROMPT}


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    sessions: SessionStore
    if request.param == "memory":
        sessions = MemorySessionStore()
    elif request.param == "sqlite":
        sessions = await asyncio.to_thread(SqliteSessionStore, tmp_path / "s.db")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        sessions = RedisSessionStore(server.url)
    yield sessions
    await sessions.aclose()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def echo(body: dict[str, Any]) -> str:
    return "re: " + str(body["messages"][-1]["content"])


async def test_a_second_run_sees_the_first_exchange(
    make_agent: AgentFactory, model_server: ScriptedModelServer, store: SessionStore
) -> None:
    model_server.script("gpt-main", [Reply("Hello Ada."), Reply("You are Ada.")])
    agent = make_agent(sessions=store)

    await agent.run("I am Ada.", session_id="s1")
    result = await agent.run("Who am I?", session_id="s1")

    assert result.session_id == "s1"
    assert model_server.requests[1]["messages"] == [
        SYSTEM,
        user("I am Ada."),
        assistant("Hello Ada."),
        user("Who am I?"),
    ]
    assert await store.load("s1") == [
        user("I am Ada."),
        assistant("Hello Ada."),
        user("Who am I?"),
        assistant("You are Ada."),
    ]


async def test_tool_rounds_are_kept_whole_and_sessions_stay_apart(
    make_agent: AgentFactory, model_server: ScriptedModelServer, store: SessionStore
) -> None:
    async def lookup() -> str:
        return "42"

    tool = Tool.from_function(lookup)
    model_server.script("gpt-main", [CallTools([("lookup", {})]), Reply("42"), Reply("fresh")])
    agent = make_agent(tools=[tool], sessions=store)

    await agent.run("look it up", session_id="a")
    await agent.run("new topic", session_id="b")

    assert await store.load("a") == [
        user("look it up"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1_0", "content": "42"},
        assistant("42"),
    ]
    assert model_server.requests[2]["messages"] == [SYSTEM, user("new topic")]


async def test_a_failed_run_leaves_the_session_untouched(
    make_agent: AgentFactory, model_server: ScriptedModelServer, store: SessionStore
) -> None:
    model_server.script("gpt-main", [Reply("first"), Fail(400), Reply("second")])
    agent = make_agent(sessions=store)

    await agent.run("one", session_id="s")
    with pytest.raises(ModelError):
        await agent.run("broken", session_id="s")
    await agent.run("two", session_id="s")

    assert await store.load("s") == [
        user("one"),
        assistant("first"),
        user("two"),
        assistant("second"),
    ]


async def test_concurrent_runs_on_one_session_take_turns(
    make_agent: AgentFactory, model_server: ScriptedModelServer, store: SessionStore
) -> None:
    model_server.script("gpt-main", [Reply(echo)] * 10)
    agent = make_agent(sessions=store)

    await asyncio.gather(*(agent.run(f"question {i}", session_id="busy") for i in range(10)))

    history = await store.load("busy")
    asked = [m["content"] for m in history[::2]]
    assert sorted(asked) == sorted(f"question {i}" for i in range(10))
    assert history == [message for q in asked for message in (user(q), assistant(f"re: {q}"))]
    # each run saw every exchange before it, whole: the runs never interleaved
    assert [body["messages"] for body in model_server.requests] == [
        [SYSTEM, *history[: 2 * k], user(asked[k])] for k in range(10)
    ]


async def test_a_sqlite_session_survives_a_new_store(
    make_agent: AgentFactory, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.script("gpt-main", [Reply("noted"), Reply("still here")])
    first = await asyncio.to_thread(SqliteSessionStore, tmp_path / "sessions.db")
    await make_agent(sessions=first).run("remember me", session_id="s")
    await first.aclose()

    second = await asyncio.to_thread(SqliteSessionStore, tmp_path / "sessions.db")
    await make_agent(sessions=second).run("again", session_id="s")
    await second.aclose()

    assert model_server.requests[1]["messages"] == [
        SYSTEM,
        user("remember me"),
        assistant("noted"),
        user("again"),
    ]


async def test_without_a_session_id_nothing_is_kept(
    make_agent: AgentFactory, model_server: ScriptedModelServer, store: SessionStore
) -> None:
    model_server.script("gpt-main", [Reply("a"), Reply("b")])
    agent = make_agent(sessions=store)

    await agent.run("one")
    await agent.run("two")

    assert model_server.requests[1]["messages"] == [SYSTEM, user("two")]


async def test_a_deleted_session_starts_over_and_a_delete_waits_for_the_run_holding_it(
    make_agent: AgentFactory, model_server: ScriptedModelServer, store: SessionStore
) -> None:
    model_server.script("gpt-main", [Reply(echo), Reply(echo), Slow(0.3, Reply(echo)), Reply(echo)])
    agent = make_agent(sessions=store)
    await agent.run("first", session_id="s")
    await agent.run("kept apart", session_id="other")

    running = asyncio.create_task(agent.run("second", session_id="s"))
    while len(model_server.requests) < 3:  # the second turn holds the session now
        await asyncio.sleep(0.01)
    assert await store.delete("s")  # waits for it: its turn goes too
    assert running.done() and running.result().output == "re: second"
    assert await store.load("s") == []
    assert not await store.delete("s")  # nothing left to delete
    assert await store.load("other") == [user("kept apart"), assistant("re: kept apart")]

    await agent.run("again", session_id="s")
    assert model_server.requests[-1]["messages"] == [SYSTEM, user("again")]
