"""A session belongs to (the caller's key, the agent): the same ``session_id`` from another
key or for another agent never sees or changes the conversation; with auth off, sessions
are scoped by agent. Ids the service makes are unguessable (128 bits from ``secrets``)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.sessions import new_session_id, session_key
from tests.support import ScriptedModelServer
from tests.support.agents import SYSTEM_PROMPT
from tests.support.scripted_model import Reply
from tests.support.service import RunningService, agent_document, running_service, service_config

HR = "hr-key-0123456789abcdef0123"
HR_TOO = "hr-too-key-0123456789abcdef"
"""Another key allowed ``hr-bot``."""
PUBLIC = "public-key-0123456789abcdef"
"""Allowed ``public-bot`` only."""
OPS = "ops-key-0123456789abcdef0123"
"""Every agent."""
SYSTEM = {"role": "system", "content": SYSTEM_PROMPT}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def echo(body: dict[str, Any]) -> str:
    return f"re: {body['messages'][-1]['content']}"


@pytest.fixture(params=["sqlite", "memory"])
async def service(
    request: pytest.FixtureRequest,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    tmp_path: Path,
) -> AsyncIterator[RunningService]:
    for name in ("hr-bot", "public-bot"):
        document = agent_document(name, model_server, system=SYSTEM_PROMPT)
        (agents_dir / f"{name}.yaml").write_text(yaml.safe_dump(document))
    keys = [
        {"name": "hr", "key": HR, "agents": ["hr-bot"]},
        {"name": "hr-too", "key": HR_TOO, "agents": ["hr-bot"]},
        {"name": "public", "key": PUBLIC, "agents": ["public-bot"]},
    ]
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump({"keys": keys}))
    config = service_config(
        agents_dir,
        state_dir,
        auth={"keys_file": str(keys_file)},
        sessions={"store": request.param, "path": str(state_dir / "sessions.db")},
    )
    async with running_service(config, environ={"DYNAGENT_API_KEYS": OPS}) as running:
        yield running


async def say(
    service: RunningService, key: str | None, agent: str, text: str, session: str
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"input": text, "session_id": session}
    async with service.client.post(
        f"/v1/agents/{agent}/invoke", json=body, headers=headers
    ) as response:
        answer = await response.json()
        assert response.status == 200, answer
        return dict(answer)


async def test_the_same_session_id_from_another_key_or_agent_is_another_conversation(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply(echo)] * 6)
    session = "conversation-1"

    first = await say(service, HR, "hr-bot", "my salary is 9000", session)
    await say(service, PUBLIC, "public-bot", "what was said before?", session)
    await say(service, HR_TOO, "hr-bot", "what was said before?", session)
    await say(service, OPS, "hr-bot", "what was said before?", session)
    await say(service, OPS, "public-bot", "and here?", session)
    again = await say(service, HR, "hr-bot", "what is my salary?", session)

    assert [request["messages"] for request in model_server.requests] == [
        [SYSTEM, user("my salary is 9000")],
        [SYSTEM, user("what was said before?")],  # another key, another agent
        [SYSTEM, user("what was said before?")],  # another key, the same agent
        [SYSTEM, user("what was said before?")],  # an unlimited key is still another key
        [SYSTEM, user("and here?")],  # the same key, another agent
        [  # the owner's conversation: only its own turns, nobody else's appended
            SYSTEM,
            user("my salary is 9000"),
            assistant("re: my salary is 9000"),
            user("what is my salary?"),
        ],
    ]
    assert (first["session_id"], again["session_id"]) == (session, session)


async def test_with_auth_off_sessions_are_scoped_by_agent(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    for name in ("hr-bot", "public-bot"):
        document = agent_document(name, model_server, system=SYSTEM_PROMPT)
        (agents_dir / f"{name}.yaml").write_text(yaml.safe_dump(document))
    model_server.script("gpt-main", [Reply(echo)] * 3)
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        await say(service, None, "hr-bot", "one", "s")
        await say(service, None, "public-bot", "two", "s")
        await say(service, None, "hr-bot", "three", "s")

    assert [request["messages"] for request in model_server.requests] == [
        [SYSTEM, user("one")],
        [SYSTEM, user("two")],
        [SYSTEM, user("one"), assistant("re: one"), user("three")],
    ]


def test_store_keys_separate_callers_agents_and_ids_without_ambiguity() -> None:
    keys = {
        session_key("key:a", "bot", "s"),
        session_key("key:b", "bot", "s"),
        session_key("key:a", "bot2", "s"),
        session_key("key:a", "bot", "s2"),
        session_key("key:a|bot", "", "s"),  # no separator trick makes two keys meet
        session_key("key:a", "bot|", "s"),
    }
    assert len(keys) == 6
    assert session_key("key:a", "bot", "s") == session_key("key:a", "bot", "s")
    assert all(not ("key:a" in key or "bot" in key) for key in keys)  # opaque


async def test_ids_the_service_makes_carry_128_random_bits(
    agents_dir: Path, state_dir: Path
) -> None:
    sessions = [new_session_id() for _ in range(32)]
    (agents_dir / "bot.yaml").write_text(yaml.safe_dump(agent_document("bot")))
    traces = []
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        for _ in range(32):
            async with service.client.post("/v1/agents/bot/invoke", json={"input": "hi"}) as r:
                assert r.status == 200
                traces.append(r.headers["X-Trace-Id"])

    assert len(set(sessions)) == len(set(traces)) == 32
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) for i in sessions)  # 16 bytes, base64
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in traces)
    # uuid4 fixes 6 of its 128 bits (version nibble 4, variant 8-b): every id would agree.
    assert len({t[12] for t in traces}) > 1 and len({t[16] for t in traces}) > 1
