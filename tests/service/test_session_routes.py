"""A caller's conversations through HTTP: read back and deleted, each key only its own,
the next turn of a deleted session starting over."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from tests.support import Reply, ScriptedModelServer
from tests.support.service import RunningService

ALICE, BOB = "session-routes-alice-key-aaaa", "session-routes-bob-key-bbbbbb"
SESSION = "chat/2026 #1"  # a slash and a space: the id is one path segment, encoded


SERVICE_KEYS = {"DYNAGENT_API_KEYS": f"{ALICE},{BOB}"}
"""The keys ``keyed_bot`` serves with."""


@pytest.fixture
def service(keyed_bot: RunningService) -> RunningService:
    return keyed_bot


async def call(
    service: RunningService, method: str, path: str, key: str = ALICE, body: Any = None
) -> tuple[int, Any]:
    return await service.call(method, path, key, body)


PATH = f"/v1/agents/bot/sessions/{quote(SESSION, safe='')}"


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answered(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def turn(service: RunningService, text: str, key: str = ALICE) -> None:
    body = {"input": text, "session_id": SESSION}
    status, answer = await call(service, "POST", "/v1/agents/bot/invoke", key, body)
    assert status == 200, answer


async def test_a_session_is_read_back_and_deleted_by_its_key_only(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("one"), Reply("two"), Reply("bob's"), Reply("new")])
    await turn(service, "first")
    await turn(service, f"my colleague's key is {BOB}")
    await turn(service, "hello", key=BOB)  # the same id from another key: its own session

    status, history = await call(service, "GET", PATH)
    assert (status, history["agent"], history["session_id"]) == (200, "bot", SESSION)
    assert history["messages"] == [
        said("first"),
        answered("one"),
        said("my colleague's key is ***"),  # masked, as in traces
        answered("two"),
    ]
    assert (await call(service, "GET", PATH, BOB))[1]["messages"] == [
        said("hello"),
        answered("bob's"),
    ]

    assert await call(service, "DELETE", PATH) == (
        200,
        {"agent": "bot", "session_id": SESSION, "deleted": True},
    )
    status, error = await call(service, "GET", PATH)
    assert (status, error["error"]["type"]) == (404, "not_found")
    assert (await call(service, "DELETE", PATH))[0] == 404
    assert (await call(service, "GET", PATH, BOB))[0] == 200  # bob's is untouched

    await turn(service, "who am I?")
    assert model_server.requests[-1]["messages"][1:] == [said("who am I?")]


async def test_another_keys_session_cannot_be_deleted_and_bad_ids_are_refused(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("kept")])
    await turn(service, "mine")
    status, error = await call(service, "DELETE", PATH, BOB)
    assert (status, error["error"]["type"]) == (404, "not_found")
    assert (await call(service, "GET", PATH))[1]["messages"] == [said("mine"), answered("kept")]

    status, error = await call(service, "GET", "/v1/agents/bot/sessions/" + "x" * 257)
    assert (status, error["error"]["type"]) == (400, "bad_request")
    async with service.client.get(PATH) as response:  # no key
        assert response.status == 401
