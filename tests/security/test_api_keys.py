"""API keys over HTTP: compared as digests in constant time, never logged, limited to
agents (403, filtered listings; another key's traces are not found), and admin actions need
an admin key."""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from loguru import logger

from tests.support.service import RunningService, agent_document, running_service, service_config

ADMIN = "admin-key-0123456789abcdef0123"
FRONTEND = "frontend-key-456789abcdef012345"
"""May use ``bot`` only."""
BOT_ADMIN = "bot-admin-key-89abcdef01234567"
"""Admin, but of ``bot`` only."""
KEYS = (ADMIN, FRONTEND, BOT_ADMIN)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    for name in ("bot", "other"):
        (agents_dir / f"{name}.yaml").write_text(yaml.safe_dump(agent_document(name)))
    keys = [
        {"name": "frontend", "key": FRONTEND, "agents": ["bot"]},
        {"name": "bot-admin", "key": BOT_ADMIN, "agents": ["bot"], "admin": True},
    ]
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump({"keys": keys}))
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys_file)})
    async with running_service(config, environ={"DYNAGENT_ADMIN_KEYS": ADMIN}) as running:
        yield running


@pytest.fixture
def every_log_line(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """loguru's lines and the standard library's (aiohttp's access and server logs)."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG", format="{message} {extra}")
    caplog.set_level(logging.DEBUG)
    yield lines
    logger.remove(sink)
    lines.extend(record.getMessage() for record in caplog.records)


async def status(service: RunningService, method: str, path: str, key: str, **body: Any) -> int:
    async with service.client.request(method, path, headers=bearer(key), json=body or None) as r:
        await r.read()
        return r.status


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"Bearer {FRONTEND}", 200),
        (f"bearer {FRONTEND}", 200),  # the scheme is compared without regard to case
        (f"BEARER  {FRONTEND} ", 200),
        (f"Basic {FRONTEND}", 401),
        ("Bearer", 401),
        ("Bearer ", 401),
        (f"Bearer{FRONTEND}", 401),
        (f"Bearer {FRONTEND}x", 401),
    ],
    ids=["Bearer", "bearer", "spaced", "Basic", "no key", "empty key", "no space", "wrong key"],
)
async def test_a_bearer_key_is_read_whatever_the_schemes_case(
    service: RunningService, header: str, expected: int
) -> None:
    async with service.client.get("/v1/models", headers={"Authorization": header}) as answer:
        assert answer.status == expected, await answer.text()


async def test_every_request_compares_digests_of_every_key_in_constant_time(
    service: RunningService, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr("dynagent.core.auth.hmac.compare_digest", spy)
    near_misses = [FRONTEND[:-1], FRONTEND + "x", FRONTEND.upper(), f" {FRONTEND}x", "x"]
    for key in near_misses:
        assert await status(service, "GET", "/v1/agents", key) == 401, key
    assert await status(service, "GET", "/v1/agents", FRONTEND) == 200
    async with service.client.get("/v1/agents", headers={"Authorization": FRONTEND}) as r:
        assert r.status == 401  # no Bearer scheme: refused before any comparison

    # Each request is checked against all three keys, matched or not: no early exit.
    assert len(compared) == 3 * (len(near_misses) + 1)
    digests = {hashlib.sha256(key.encode()).digest() for key in KEYS}
    assert {known for known, _ in compared} == digests
    assert all(len(a) == len(b) == 32 for a, b in compared)
    raw = {key.encode() for key in [*KEYS, *near_misses]}
    assert not raw & {given for _, given in compared}


async def test_no_key_reaches_a_log_line_across_a_whole_request_cycle(
    service: RunningService, every_log_line: list[str]
) -> None:
    wrong = ADMIN[:-4] + "zzzz"
    assert await status(service, "POST", "/v1/agents/bot/invoke", FRONTEND, input="hi") == 200
    assert await status(service, "POST", "/v1/agents/other/invoke", FRONTEND, input="hi") == 403
    assert await status(service, "GET", "/v1/agents", wrong) == 401
    assert await status(service, "POST", "/v1/agents/bot/promote", FRONTEND) == 403
    assert await status(service, "POST", "/v1/chat/completions", ADMIN, model="x") == 400
    assert any("invoke bot@" in line for line in every_log_line)  # the capture works
    leaked = [line for line in every_log_line for key in (*KEYS, wrong) if key in line]
    assert leaked == []


async def test_a_key_limited_to_some_agents_reaches_nothing_else(service: RunningService) -> None:
    async with service.client.get("/v1/agents", headers=bearer(FRONTEND)) as response:
        assert [a["name"] for a in (await response.json())["agents"]] == ["bot"]
    async with service.client.post(
        "/v1/agents/other/invoke", json={"input": "hi"}, headers=bearer(ADMIN)
    ) as response:
        others_trace = response.headers["X-Trace-Id"]
    async with service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers=bearer(FRONTEND)
    ) as response:
        own_trace = response.headers["X-Trace-Id"]
    chat = {"model": "other", "messages": [{"role": "user", "content": "hi"}]}
    refused = {
        "status": await status(service, "GET", "/v1/agents/other", FRONTEND),
        "revisions": await status(service, "GET", "/v1/agents/other/revisions", FRONTEND),
        "invoke": await status(service, "POST", "/v1/agents/other/invoke", FRONTEND, input="x"),
        "chat": await status(service, "POST", "/v1/chat/completions", FRONTEND, **chat),
        "pinned chat": await status(
            service, "POST", "/v1/chat/completions", FRONTEND, **{**chat, "model": "other@stable"}
        ),
    }
    assert refused == dict.fromkeys(refused, 403)
    # Not this key's run: not found, as if it never was.
    assert await status(service, "GET", f"/v1/traces/{others_trace}", FRONTEND) == 404
    assert await status(service, "GET", f"/v1/traces/{own_trace}", FRONTEND) == 200
    assert await status(service, "GET", f"/v1/traces/{others_trace}", ADMIN) == 200


@pytest.mark.parametrize("action", ["promote", "rollback"])
async def test_promote_and_rollback_need_an_admin_key_for_that_agent(
    service: RunningService, action: str
) -> None:
    path = f"/v1/agents/{{}}/{action}"
    assert await status(service, "POST", path.format("bot"), FRONTEND) == 403  # not admin
    assert await status(service, "POST", path.format("other"), BOT_ADMIN) == 403  # not its agent
    # An admin key gets past auth: the agent has no canary and no older revision.
    assert await status(service, "POST", path.format("bot"), BOT_ADMIN) == 409
    assert await status(service, "POST", path.format("other"), ADMIN) == 409
    assert await status(service, "POST", path.format("bot"), "not-a-key-at-all-000000") == 401
