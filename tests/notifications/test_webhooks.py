"""Webhooks: rollout notices arrive signed at a real receiver, are retried when it
fails, and a receiver that is down or hangs never slows a run."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from dynagent.config import ServiceConfig
from dynagent.core.service import Service
from dynagent.exceptions import ConfigError
from dynagent.registry.facade import AgentRegistry
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
)

SECRET = "whsec-test-0123456789abcdef"


@dataclass
class Receiver:
    """A webhook receiver: answers each POST with the next status of ``statuses`` (then
    200), or holds it until ``release`` is set when ``hang`` is."""

    statuses: list[int] = field(default_factory=list)
    hang: bool = False
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    holding: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        async with self.arrived:
            self.received.append((dict(request.headers), body))
            self.arrived.notify_all()
        if self.hang:
            self.holding += 1
            await self.release.wait()
        status = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=status)

    async def wait(self, count: int) -> None:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.received) >= count), 20)

    def notices(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.received]


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    hooks = Receiver()
    app = web.Application()
    app.router.add_post("/hook", hooks.handle)
    server = TestServer(app)
    await server.start_server()
    try:
        yield hooks, str(server.make_url("/hook"))
    finally:
        hooks.release.set()
        await server.close()


def _config(
    agents_dir: Path, state_dir: Path, url: str, queue: int = 1000, **hook: Any
) -> ServiceConfig:
    webhook = {"url": url, "secret_env": "HOOK_SECRET", "retry_seconds": 0.02, **hook}
    notifications = {"webhooks": [webhook], "queue": queue}
    return service_config(agents_dir, state_dir, notifications=notifications)


async def _publish_canary(service: RunningService, weight: float = 10) -> str:
    service.write_agent(agent_document("bot", system="Stable."))
    candidate = agent_document("bot", system="Canary.")
    service.write_agent(canary_document(candidate, weight), filename=canary_filename("bot"))
    revision = canary_revision(candidate)
    await service.registry.wait_for(
        lambda r: (
            "bot" in r and (c := r.entry("bot").canary) is not None and c.agent.revision == revision
        )
    )
    return revision


async def test_a_published_canary_arrives_signed_with_its_event_and_delivery_id(
    agents_dir: Path, state_dir: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    config = _config(agents_dir, state_dir, url)
    async with running_service(config, environ={"HOOK_SECRET": SECRET}) as service:
        revision = await _publish_canary(service)
        await hooks.wait(2)

    published = [n for n in hooks.notices() if n["event"] == "published"]
    assert {(n["variant"], n["agent"]) for n in published} == {("stable", "bot"), ("canary", "bot")}
    assert next(n for n in published if n["variant"] == "canary")["revision"] == revision
    for headers, body in hooks.received:
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["X-Dynagent-Signature"], expected)
        assert headers["X-Dynagent-Event"] == json.loads(body)["event"]
        assert headers["X-Dynagent-Delivery"] == json.loads(body)["delivery"]


async def test_a_failing_receiver_gets_the_notice_again_until_it_takes_it(
    agents_dir: Path, state_dir: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    hooks.statuses = [500, 503, 429]
    config = _config(agents_dir, state_dir, url, events=["published"])
    async with running_service(config, environ={"HOOK_SECRET": SECRET}) as service:
        service.write_agent(agent_document("bot"))
        await hooks.wait(4)
        status = await service.client.get("/v1/notifications")
        shown = (await status.json())["webhooks"][0]

    deliveries = {headers["X-Dynagent-Delivery"] for headers, _ in hooks.received}
    assert len(deliveries) == 1  # one notice, four attempts
    assert (shown["delivered"], shown["retried"], shown["failed"]) == (1, 3, 0)
    assert shown["last_error"] == "HTTP 429"
    assert SECRET not in json.dumps(shown)


async def test_a_refusing_receiver_is_given_up_on_at_once_and_shows_in_the_status(
    agents_dir: Path, state_dir: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    hooks.statuses = [404]
    config = _config(agents_dir, state_dir, url + "?token=s3cr3t", events=["published"])
    async with running_service(config, environ={"HOOK_SECRET": SECRET}) as service:
        service.write_agent(agent_document("bot"))
        await hooks.wait(1)

        async def failed() -> dict[str, Any]:
            while True:
                shown = await (await service.client.get("/v1/notifications")).json()
                hook: dict[str, Any] = shown["webhooks"][0]
                if hook["failed"]:
                    return hook
                await asyncio.sleep(0.02)

        hook = await asyncio.wait_for(failed(), 10)

    assert (hook["failed"], hook["retried"], hook["last_error"]) == (1, 0, "HTTP 404")
    assert "s3cr3t" not in hook["url"]


def _weighs(weight: float) -> Callable[[AgentRegistry], bool]:
    def done(registry: AgentRegistry) -> bool:
        canary = registry.entry("bot").canary
        return canary is not None and canary.policy.weight == weight

    return done


async def test_a_receiver_that_hangs_never_slows_a_run(
    agents_dir: Path, state_dir: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    hooks.hang = True
    config = _config(agents_dir, state_dir, url, timeout=60, queue=2)
    async with running_service(config, environ={"HOOK_SECRET": SECRET}) as service:
        await _publish_canary(service)
        await hooks.wait(1)
        for weight in (20, 30, 40, 50):  # more notices than the queue holds
            candidate = agent_document("bot", system="Canary.")
            service.write_agent(canary_document(candidate, weight), filename=canary_filename("bot"))
            await service.registry.wait_for(_weighs(weight))
        answers = await asyncio.gather(
            *(service.client.post("/v1/agents/bot/invoke", json={"input": "hi"}) for _ in range(20))
        )
        statuses = [a.status for a in answers]
        shown = (await (await service.client.get("/v1/notifications")).json())["webhooks"][0]
        still_held = hooks.holding

    assert statuses == [200] * 20
    assert still_held == 1  # every run answered while the receiver held its first notice
    assert shown["dropped"] >= 1


async def test_a_hand_pause_reaches_a_slack_webhook_with_its_reason(
    agents_dir: Path, state_dir: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    config = _config(agents_dir, state_dir, url, format="slack", events=["pause"])
    async with running_service(config, environ={"HOOK_SECRET": SECRET}) as service:
        await _publish_canary(service)
        answer = await service.client.post(
            "/v1/agents/bot/rollout/pause", json={"reason": "answers look off"}
        )
        assert answer.status == 200, await answer.text()
        await hooks.wait(1)

    (notice,) = hooks.notices()
    assert notice["text"].startswith("*bot*: canary ")
    assert "paused by operator: answers look off" in notice["text"]
    assert notice["dynagent"]["reason"] == "answers look off"


def test_a_signing_key_that_is_not_set_is_a_clear_error(agents_dir: Path, state_dir: Path) -> None:
    config = _config(agents_dir, state_dir, "http://127.0.0.1:9/hook")

    with pytest.raises(ConfigError) as caught:
        Service.create(config, environ={})

    (issue,) = caught.value.issues
    assert issue.path == "notifications.webhooks.0.secret_env"
    assert "HOOK_SECRET is not set" in issue.message


async def test_a_gate_result_reaches_the_webhook_once_with_its_state(
    agents_dir: Path, state_dir: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    config = _config(agents_dir, state_dir, url, events=["gate"])
    suite = {
        "cases": [
            {"id": "greets", "input": "hello", "assert": [{"type": "icontains", "value": "hello"}]}
        ]
    }
    async with running_service(config, environ={"HOOK_SECRET": SECRET}) as service:
        service.write_agent(agent_document("bot", system="Stable."))
        (agents_dir / "bot.evals.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
        candidate = agent_document("bot", system="Canary.")
        service.write_agent(
            canary_document(candidate, 100, gate={}), filename=canary_filename("bot")
        )
        await hooks.wait(1)

    (notice,) = hooks.notices()
    assert (notice["event"], notice["agent"]) == ("gate", "bot")
    assert notice["revision"] == canary_revision(candidate)
    assert notice["state"] == "passed"
    assert notice["reason"] == "0 of 1 cases failed"


@pytest.mark.parametrize("first", ["stable", "canary removal"])
async def test_a_promotion_is_told_once_whichever_of_its_two_changes_arrives_first(
    agents_dir: Path, state_dir: Path, receiver: tuple[Receiver, str], first: str
) -> None:
    """A promotion writes the canary's spec as the stable definition and removes the
    canary; a replica may read the two changes in either order (Nacos delivers each
    dataId on its own)."""
    hooks, url = receiver
    config = _config(agents_dir, state_dir, url, events=["promote"])
    async with running_service(config, environ={"HOOK_SECRET": SECRET}) as service:
        revision = await _publish_canary(service)
        candidate = agent_document("bot", system="Canary.")

        async def stable() -> None:
            service.write_agent(candidate)
            await service.wait_serving("bot", revision)

        async def canary_removal() -> None:
            (agents_dir / canary_filename("bot")).unlink()
            await service.registry.wait_for(lambda r: r.entry("bot").canary is None)

        for step in (stable, canary_removal) if first == "stable" else (canary_removal, stable):
            await step()
        await hooks.wait(1)
        status = await service.client.get("/v1/notifications")
        shown = (await status.json())["webhooks"][0]

    assert [(n["event"], n["revision"]) for n in hooks.notices()] == [("promote", revision)]
    assert (shown["pending"], shown["delivered"]) == (0, 1)
