"""A run's trace erased through HTTP: by the key that made the run (or an admin) only,
with its rating, gone from every read and from the list. (On a fleet sharing Redis:
``tests/service/test_run_records_shared.py``.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Reply, ScriptedModelServer
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

ALICE, BOB = "trace-delete-alice-key-aaaaaa", "trace-delete-bob-key-bbbbbbbb"
ADMIN = "trace-delete-admin-key-cccccc"


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server))
    config = service_config(agents_dir, tmp_path)
    environ = {"DYNAGENT_API_KEYS": f"{ALICE},{BOB}", "DYNAGENT_ADMIN_KEYS": ADMIN}
    async with running_service(config, environ=environ) as running:
        yield running


async def call(
    service: RunningService, method: str, path: str, key: str = ALICE, body: Any = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with service.client.request(method, path, json=body, headers=headers) as response:
        return response.status, await response.json()


async def run(service: RunningService, text: str, key: str = ALICE) -> str:
    status, answer = await call(service, "POST", "/v1/agents/bot/invoke", key, {"input": text})
    assert status == 200, answer
    trace_id: str = answer["trace_id"]
    return trace_id


async def listed(service: RunningService, key: str = ALICE) -> list[str]:
    status, answer = await call(service, "GET", "/v1/traces", key)
    assert status == 200, answer
    return [trace["trace_id"] for trace in answer["traces"]]


async def test_a_trace_is_deleted_by_its_key_with_its_rating(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("one"), Reply("two")])
    doomed, kept = await run(service, "my address is 1 Main St"), await run(service, "hello")
    rated = await call(service, "POST", f"/v1/traces/{doomed}/feedback", body={"thumbs": "up"})
    assert rated[0] == 200, rated

    assert (await call(service, "DELETE", f"/v1/traces/{doomed}", BOB))[0] == 404  # not bob's
    assert (await call(service, "GET", f"/v1/traces/{doomed}"))[0] == 200
    assert await call(service, "DELETE", f"/v1/traces/{doomed}") == (
        200,
        {"trace_id": doomed, "deleted": True},
    )

    status, error = await call(service, "GET", f"/v1/traces/{doomed}")
    assert (status, error["error"]["type"]) == (404, "not_found")
    assert await listed(service) == [kept]
    again = await call(service, "POST", f"/v1/traces/{doomed}/feedback", body={"thumbs": "up"})
    assert again[0] == 404
    assert (await call(service, "DELETE", f"/v1/traces/{doomed}"))[0] == 404
    assert (await call(service, "GET", f"/v1/traces/{kept}"))[0] == 200


async def test_an_admin_deletes_any_keys_trace(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("one")])
    trace_id = await run(service, "erase me", key=BOB)
    assert (await call(service, "DELETE", f"/v1/traces/{trace_id}", ADMIN))[0] == 200
    assert (await call(service, "GET", f"/v1/traces/{trace_id}", BOB))[0] == 404
    assert await listed(service, BOB) == []


async def test_an_unknown_or_hostile_trace_id_is_not_found(service: RunningService) -> None:
    for trace_id in ("0123456789abcdef", "x" * 2000, "%00", "..%2F..%2Fetc"):
        status, error = await call(service, "DELETE", f"/v1/traces/{trace_id}")
        assert (status, error["error"]["type"]) == (404, "not_found"), trace_id
