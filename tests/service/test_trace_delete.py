"""A run's trace erased through HTTP: by the key that made the run (or an admin) only,
with its rating, gone from every read and from the list. (On a fleet sharing Redis:
``tests/service/test_run_records_shared.py``.)"""

from __future__ import annotations

from typing import Any

from tests.support import Reply, ScriptedModelServer
from tests.support.service import RunningService

ALICE, BOB = "trace-delete-alice-key-aaaaaa", "trace-delete-bob-key-bbbbbbbb"
ADMIN = "trace-delete-admin-key-cccccc"


SERVICE_KEYS = {"DYNAGENT_API_KEYS": f"{ALICE},{BOB}", "DYNAGENT_ADMIN_KEYS": ADMIN}
"""The keys ``keyed_bot`` serves with."""


async def call(
    service: RunningService, method: str, path: str, key: str = ALICE, body: Any = None
) -> tuple[int, Any]:
    """As ``alice`` unless ``key`` says otherwise."""
    return await service.call(method, path, key, body)


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
    keyed_bot: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("one"), Reply("two")])
    doomed, kept = await run(keyed_bot, "my address is 1 Main St"), await run(keyed_bot, "hello")
    rated = await call(keyed_bot, "POST", f"/v1/traces/{doomed}/feedback", body={"thumbs": "up"})
    assert rated[0] == 200, rated

    assert (await call(keyed_bot, "DELETE", f"/v1/traces/{doomed}", BOB))[0] == 404  # not bob's
    assert (await call(keyed_bot, "GET", f"/v1/traces/{doomed}"))[0] == 200
    assert await call(keyed_bot, "DELETE", f"/v1/traces/{doomed}") == (
        200,
        {"trace_id": doomed, "deleted": True},
    )

    status, error = await call(keyed_bot, "GET", f"/v1/traces/{doomed}")
    assert (status, error["error"]["type"]) == (404, "not_found")
    assert await listed(keyed_bot) == [kept]
    again = await call(keyed_bot, "POST", f"/v1/traces/{doomed}/feedback", body={"thumbs": "up"})
    assert again[0] == 404
    assert (await call(keyed_bot, "DELETE", f"/v1/traces/{doomed}"))[0] == 404
    assert (await call(keyed_bot, "GET", f"/v1/traces/{kept}"))[0] == 200


async def test_an_admin_deletes_any_keys_trace(
    keyed_bot: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("one")])
    trace_id = await run(keyed_bot, "erase me", key=BOB)
    assert (await call(keyed_bot, "DELETE", f"/v1/traces/{trace_id}", ADMIN))[0] == 200
    assert (await call(keyed_bot, "GET", f"/v1/traces/{trace_id}", BOB))[0] == 404
    assert await listed(keyed_bot, BOB) == []


async def test_an_unknown_or_hostile_trace_id_is_not_found(keyed_bot: RunningService) -> None:
    for trace_id in ("0123456789abcdef", "x" * 2000, "%00", "..%2F..%2Fetc"):
        status, error = await call(keyed_bot, "DELETE", f"/v1/traces/{trace_id}")
        assert (status, error["error"]["type"]) == (404, "not_found"), trace_id
