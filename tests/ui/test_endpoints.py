"""The page's files and the JSON endpoints it reads, through aiohttp's client against the
real app: auth and scoping like the rest of the API, secrets masked, the live feed."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse

from dynagent.core.series import SLOTS, STEP, RecentSeries
from tests.support.service import (
    BROKEN_DEFINITIONS,
    RunningService,
    agent_document,
    running_service,
    service_config,
)

ADMIN_KEY = "ep-admin-key-aaaaaaaaaaaaaaaaaaaa"
USER_KEY = "ep-user-key-bbbbbbbbbbbbbbbbbbbbb"
"""Limited to ``bot``."""
SECRET = "sk-very-secret-model-key-1234567890"


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys: [{{name: ops-user, key: {USER_KEY}, agents: [bot]}}]\n")
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys)})
    environ = {"DYNAGENT_ADMIN_KEYS": ADMIN_KEY, "OPENAI_API_KEY": SECRET}
    async with running_service(config, environ=environ) as running:
        running.write_agent(agent_document("bot", model={"api_key": SECRET}))
        running.write_agent(agent_document("other"))
        await running.registry.wait_for(lambda r: "bot" in r and "other" in r)
        yield running


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def invoke(
    service: RunningService, name: str, text: str, key: str = ADMIN_KEY, **body: Any
) -> dict[str, Any]:
    response = await service.client.post(
        f"/v1/agents/{name}/invoke", json={"input": text, **body}, headers=bearer(key)
    )
    assert response.status == 200, await response.text()
    data: dict[str, Any] = await response.json()
    return data


@pytest.mark.parametrize(
    "path",
    ["/ui/", "/ui/app.js", "/ui/rollout.js", "/ui/evals.js", "/ui/style.css", "/ui/index.html"],
)
async def test_the_page_needs_no_key_and_talks_only_to_this_service(
    service: RunningService, path: str
) -> None:
    response = await service.client.get(path)
    assert response.status == 200
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    text = await response.text()
    assert "http://" not in text and "https://" not in text  # no CDN, no other host


@pytest.mark.parametrize(
    "path", ["/ui/nope.js", "/ui/..%2Fapp.py", "/ui/%2e%2e/app.py", "/ui/../v1/agents"]
)
async def test_only_the_shipped_files_are_served_and_the_api_still_needs_a_key(
    service: RunningService, path: str
) -> None:
    response = await service.client.get(path)
    assert response.status in (401, 404)
    assert "serving" not in await response.text()


async def test_ui_without_slash_redirects(service: RunningService) -> None:
    response = await service.client.get("/ui", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (301, "/ui/")


@pytest.mark.parametrize(
    "path", ["/v1/whoami", "/v1/traces", "/v1/agents/bot/series", "/v1/watch/agents"]
)
async def test_the_page_endpoints_need_a_key(service: RunningService, path: str) -> None:
    response = await service.client.get(path)
    assert response.status == 401


async def test_whoami_says_what_the_key_may_do(service: RunningService) -> None:
    admin = await (await service.client.get("/v1/whoami", headers=bearer(ADMIN_KEY))).json()
    user = await (await service.client.get("/v1/whoami", headers=bearer(USER_KEY))).json()
    assert admin == {"name": "DYNAGENT_ADMIN_KEYS[0]", "admin": True, "agents": None, "auth": True}
    assert user == {"name": "ops-user", "admin": False, "agents": ["bot"], "auth": True}


async def test_recent_traces_are_filtered_and_scoped(service: RunningService) -> None:
    first = await invoke(service, "bot", "one", session_id="s-1")
    second = await invoke(service, "other", "two")
    own = await invoke(service, "bot", "three", key=USER_KEY)
    everything = await (await service.client.get("/v1/traces", headers=bearer(ADMIN_KEY))).json()
    assert [t["trace_id"] for t in everything["traces"]] == [
        own["trace_id"],
        second["trace_id"],
        first["trace_id"],
    ]
    summary = everything["traces"][2]
    assert summary == {
        "trace_id": first["trace_id"],
        "agent": "bot",
        "revision": first["revision"],
        "variant": "stable",
        "owner": f"digest:{hashlib.sha256(ADMIN_KEY.encode()).hexdigest()[:12]}",
        "session_id": "s-1",
        "status": "ok",
        "started_at": summary["started_at"],
        "duration_ms": summary["duration_ms"],
        "steps": 1,
        "tool_calls": 0,
        "usage": first["usage"],
        "cost_usd": None,  # the service config prices no model
        "error": None,
        "input": "one",
    }
    assert isinstance(summary["started_at"], float) and summary["duration_ms"] > 0
    # Another key's runs of the same agent are not this key's to see.
    mine = await (await service.client.get("/v1/traces", headers=bearer(USER_KEY))).json()
    assert [(t["trace_id"], t["owner"]) for t in mine["traces"]] == [
        (own["trace_id"], "key:ops-user")
    ]
    for query, expected in (
        ("agent=other", [second["trace_id"]]),
        ("session_id=s-1", [first["trace_id"]]),
        ("status=error", []),
        ("variant=canary", []),
        ("limit=1", [own["trace_id"]]),
    ):
        found = await (
            await service.client.get(f"/v1/traces?{query}", headers=bearer(ADMIN_KEY))
        ).json()
        assert [t["trace_id"] for t in found["traces"]] == expected, query


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=501", "limit=x", "limit=²", "status=bad", "variant=x"]
)
async def test_bad_trace_filters_are_400(service: RunningService, query: str) -> None:
    response = await service.client.get(f"/v1/traces?{query}", headers=bearer(ADMIN_KEY))
    assert response.status == 400
    assert (await response.json())["error"]["type"] == "bad_request"


async def test_series_count_runs_per_variant(service: RunningService) -> None:
    for _ in range(3):
        await invoke(service, "bot", "hi")
    response = await service.client.get("/v1/agents/bot/series", headers=bearer(USER_KEY))
    body = await response.json()
    stable = body["variants"]["stable"]
    assert (body["name"], body["step"], list(body["variants"])) == ("bot", STEP, ["stable"])
    assert stable["requests"] == [0] * (SLOTS - 1) + [3]
    assert stable["errors"] == [0] * SLOTS
    assert stable["mean_ms"][:-1] == [None] * (SLOTS - 1) and stable["mean_ms"][-1] > 0
    denied = await service.client.get("/v1/agents/other/series", headers=bearer(USER_KEY))
    assert denied.status == 403
    missing = await service.client.get("/v1/agents/ghost/series", headers=bearer(ADMIN_KEY))
    assert missing.status == 404


def test_the_series_ring_forgets_what_is_older_than_fifteen_minutes() -> None:
    now = [1_000_000.0]
    series = RecentSeries(clock=lambda: now[0])
    series.record("a", "stable", 0.1, failed=False)
    series.record("a", "canary", 0.3, failed=True)
    now[0] += STEP * 2
    series.record("a", "stable", 0.2, failed=False)
    window = series.of("a")["variants"]
    assert window["stable"]["requests"][-3:] == [1, 0, 1]
    assert window["canary"]["errors"][-3:] == [1, 0, 0]
    assert series.version("a") == 3
    now[0] += STEP * SLOTS
    assert series.of("a")["variants"]["stable"]["requests"] == [0] * SLOTS
    series.forget("a")
    assert series.of("a")["variants"] == {} and series.version("a") == 0


async def test_a_revision_definition_masks_credentials(service: RunningService) -> None:
    revision = service.serving("bot")
    response = await service.client.get(
        f"/v1/agents/bot/revisions/{revision}", headers=bearer(USER_KEY)
    )
    body = await response.json()
    assert response.status == 200
    assert body["definition"]["model"] == {"provider": "test", "api_key": "***"}
    assert SECRET not in json.dumps(body)
    assert body["text"].startswith("name: bot\n")
    assert (body["revision"], body["variant"], body["name"]) == (revision, "stable", "bot")
    missing = await service.client.get("/v1/agents/bot/revisions/nope", headers=bearer(USER_KEY))
    assert missing.status == 404
    denied = await service.client.get(
        f"/v1/agents/other/revisions/{service.serving('other')}", headers=bearer(USER_KEY)
    )
    assert denied.status == 403


async def test_a_trace_masks_secrets_as_the_logs_do(service: RunningService) -> None:
    ran = await invoke(service, "bot", f"my key is {SECRET}")
    trace = await (
        await service.client.get(f"/v1/traces/{ran['trace_id']}", headers=bearer(ADMIN_KEY))
    ).json()
    assert trace["events"][0]["input"] == "my key is ***"
    listed = await (await service.client.get("/v1/traces", headers=bearer(ADMIN_KEY))).json()
    assert listed["traces"][0]["input"] == "my key is ***"


async def read_events(response: ClientResponse, count: int) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    buffer = b""
    async with asyncio.timeout(10):
        while len(events) < count:
            buffer += await response.content.readany()
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                lines = block.decode().split("\n")
                if lines[0].startswith(":"):
                    continue
                events.append((lines[0].removeprefix("event: "), json.loads(lines[1][6:])))
    return events


async def test_the_watch_feed_sends_a_snapshot_then_only_changes(service: RunningService) -> None:
    async with service.client.get("/v1/watch/agents", headers=bearer(USER_KEY)) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        [(kind, snapshot)] = await read_events(response, 1)
        assert kind == "snapshot"
        assert [a["name"] for a in snapshot["agents"]] == ["bot"]  # the key's agents only
        assert "revisions" not in snapshot["agents"][0]
        assert (snapshot["removed"], snapshot["degraded"], snapshot["ready"]) == ([], {}, True)
        text, _, message = BROKEN_DEFINITIONS["unknown field"]
        service.write_agent(text, filename="bot.yaml")
        service.write_agent(agent_document("other", description="changed"))  # not the key's
        [(kind, update)] = await read_events(response, 1)
        assert kind == "update"
        assert [a["name"] for a in update["agents"]] == ["bot"]
        assert message in update["agents"][0]["last_error"]["message"]
        await invoke(service, "bot", "hi")
        [(_, traffic)] = await read_events(response, 1)
        assert traffic["agents"][0]["traffic"]["stable"]["requests"] == 1
        # In the 15-minute window: the run's 30 s slot may already be the one before the
        # newest when the feed reads it (the feed ticks every second).
        assert sum(traffic["series"]["bot"]["variants"]["stable"]["requests"]) == 1
        service.registry.readiness.set_degraded("nacos public/AGENTS", "unreachable")
        [(_, degraded)] = await read_events(response, 1)
        assert degraded["degraded"] == {"nacos public/AGENTS": "unreachable"}
        assert [a["name"] for a in degraded["agents"]] == ["bot"]  # sent again: source.state
        (service.folder or Path()).joinpath("bot.yaml").unlink()
        [(_, removed)] = await read_events(response, 1)
        assert (removed["agents"], removed["removed"]) == ([], ["bot"])


async def test_the_watch_feed_ends_after_max_seconds(service: RunningService) -> None:
    async with service.client.get(
        "/v1/watch/agents?max_seconds=1", headers=bearer(ADMIN_KEY)
    ) as response:
        async with asyncio.timeout(10):
            body = await response.read()
    assert body.startswith(b"event: snapshot\n")
    bad = await service.client.get("/v1/watch/agents?max_seconds=0", headers=bearer(ADMIN_KEY))
    assert bad.status == 400
