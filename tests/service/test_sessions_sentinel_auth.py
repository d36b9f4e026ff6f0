"""Sessions on a replicated Redis whose nodes and Sentinels all require a password, as
managed deployments run it: the URL carries the primary's password and the Sentinels'
(``?sentinel_password=``); without the Sentinels' password the service says why in its
readiness (their refusal, never a password) instead of a bare timeout, and so does a single
server that refuses the password it is given."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Reply, ScriptedModelServer
from tests.support.redis import RedisSentinelSet, free_ports
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

pytestmark = pytest.mark.slow

PASSWORD = "s3cret-sentinel-pw"


@pytest.fixture
def guarded_sentinels(tmp_path: Path) -> Iterator[RedisSentinelSet]:
    nodes = RedisSentinelSet(
        free_ports(3), free_ports(3), tmp_path / "sentinel", replicas=1, password=PASSWORD
    )
    try:
        nodes.start(clean=True)
        yield nodes
    finally:
        nodes.stop()


async def test_a_conversation_runs_on_sentinels_that_require_a_password(
    guarded_sentinels: RedisSentinelSet,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    tmp_path: Path,
) -> None:
    model_server.script("gpt-main", [Reply("hello"), Reply("again")])
    write_agent(agents_dir, agent_document("bot", model_server))
    sessions = {"store": "redis", "url": guarded_sentinels.url}
    async with running_service(service_config(agents_dir, tmp_path, sessions=sessions)) as service:
        for text in ("hi", "and now?"):
            body = {"input": text, "session_id": "s"}
            response = await service.client.post("/v1/agents/bot/invoke", json=body)
            assert response.status == 200, await response.text()
    said = [m["content"] for m in model_server.requests[-1]["messages"] if m["role"] != "system"]
    assert said == ["hi", "hello", "and now?"]


async def test_sentinels_asked_without_their_password_show_their_refusal(
    guarded_sentinels: RedisSentinelSet, agents_dir: Path, tmp_path: Path
) -> None:
    url = guarded_sentinels.url.partition("?")[0]  # the primary's password only
    reason = await _outage_reason(url, "Sentinels name no primary", agents_dir, tmp_path)
    assert "NOAUTH" in reason or "Authentication" in reason, reason
    assert PASSWORD not in reason


async def test_a_server_that_refuses_the_password_says_so_not_only_that_it_timed_out(
    guarded_sentinels: RedisSentinelSet, agents_dir: Path, tmp_path: Path
) -> None:
    wrong = "not-the-password-42"
    url = f"redis://:{wrong}@127.0.0.1:{guarded_sentinels.port}/0"  # the primary, alone
    reason = await _outage_reason(url, "the server answers", agents_dir, tmp_path)
    assert "AuthenticationError" in reason, reason
    assert wrong not in reason and PASSWORD not in reason


async def _outage_reason(url: str, marker: str, agents_dir: Path, tmp_path: Path) -> str:
    """The sessions' reason in ``/readyz`` once it holds ``marker`` (the diagnosis runs
    beside the outage), after a session run answered 503."""
    write_agent(agents_dir, agent_document("bot"))
    sessions = {"store": "redis", "url": url, "timeout": 0.5}
    async with running_service(service_config(agents_dir, tmp_path, sessions=sessions)) as service:
        body = {"input": "hi", "session_id": "s"}
        response = await service.client.post("/v1/agents/bot/invoke", json=body)
        assert response.status == 503, await response.text()
        async with asyncio.timeout(10):
            while marker not in (reason := await _degraded(service)):
                await asyncio.sleep(0.05)
    return reason


async def _degraded(service: RunningService) -> str:
    response = await service.client.get("/readyz")
    body = await response.json()
    return str(body.get("degraded", {}).get("sessions", ""))
