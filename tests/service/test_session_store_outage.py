"""A session store outage is named as one: with Redis stopped or hung, a run with a session
answers 503 ``unavailable`` with ``Retry-After`` while Redis is still out (not a 502
``model_error`` once Redis returns), runs without a session go on, ``/readyz`` says
``degraded`` on every replica (one with no traffic too), ``dynagent_errors_total`` counts
``unavailable``, and the canary guard holds none of it against the version serving."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.redis import RedisServer, redis_server
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

__all__ = ["redis_server"]

CANARY_MODEL = "gpt-canary"
RUNS = 4
"""Session runs during the outage: more than the guard's ``min_requests`` below."""


@contextmanager
def stopped(server: RedisServer, how: str) -> Iterator[None]:
    """Redis out for the block: its process gone (``stop``), or alive and silent (``hang``:
    SIGSTOP; connections are accepted and never answered)."""
    if how == "stop":
        server.stop()
    else:
        pid = int((server.home / "redis.pid").read_text().strip())
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if how == "stop":
            server.start()
        else:
            os.kill(pid, signal.SIGCONT)


async def invoke(service: RunningService, session: str | None) -> tuple[int, Any, str | None]:
    body: dict[str, Any] = {"input": "hi"}
    if session is not None:
        body["session_id"] = session
    response = await service.client.post("/v1/agents/bot/invoke", json=body)
    return response.status, await response.json(), response.headers.get("Retry-After")


async def readyz(service: RunningService) -> tuple[int, Any]:
    response = await service.client.get("/readyz")
    return response.status, await response.json()


async def run_counts(service: RunningService) -> dict[str, float]:
    """``dynagent_errors_total`` by type and ``dynagent_requests_total`` by outcome."""
    text = await (await service.client.get("/metrics")).text()
    wanted = {"dynagent_errors_total": "type", "dynagent_requests_total": "outcome"}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                key = f"{sample.name}:{sample.labels[wanted[sample.name]]}"
                counts[key] = counts.get(key, 0) + sample.value
    return counts


@pytest.mark.parametrize("how", ["stop", "hang"])
async def test_a_session_store_outage_is_a_503_that_counts_against_no_version(
    model_server: ScriptedModelServer,
    redis_server: RedisServer,
    agents_dir: Path,
    tmp_path: Path,
    how: str,
) -> None:
    stable = agent_document("bot", model_server, system="Stable.")
    candidate = agent_document("bot", model_server, system="Canary.", model={"name": CANARY_MODEL})
    write_agent(agents_dir, stable)
    guard = {"min_requests": 3}
    write_agent(
        agents_dir, canary_document(candidate, 100, guard=guard), filename=canary_filename("bot")
    )
    model_server.script(CANARY_MODEL, [Reply("canary")], cycle=True)
    sessions = {"store": "redis", "url": redis_server.url, "timeout": 1.0}
    busy_config = service_config(agents_dir, tmp_path / "busy", sessions=sessions)
    idle_config = service_config(agents_dir, tmp_path / "idle", sessions=sessions)
    async with running_service(busy_config) as busy, running_service(idle_config) as idle:
        assert (await invoke(busy, "before"))[0] == 200
        assert await readyz(busy) == (200, {"status": "ready", "agents": 1, "degraded": {}})

        with stopped(redis_server, how):
            # Each answer arrives while Redis is still out: bounded, never waiting for it.
            outage = [await invoke(busy, f"s{i}") for i in range(RUNS)]
            without_session = await invoke(busy, None)
            await idle.registry.wait_for(lambda r: "sessions" in r.degraded, within=15)
            ready_busy, ready_idle = await readyz(busy), await readyz(idle)

        assert [(status, body["error"]["type"], retry) for status, body, retry in outage] == [
            (503, "unavailable", "1")
        ] * RUNS
        assert (without_session[0], without_session[1]["output"]) == (200, "canary")
        for status, body in (ready_busy, ready_idle):
            why = body["degraded"].pop("sessions")
            assert (status, body) == (200, {"status": "degraded", "agents": 1, "degraded": {}})
            assert why.startswith("Redis ") and redis_server.url not in why
        assert await run_counts(busy) == {
            "dynagent_errors_total:unavailable": RUNS,
            "dynagent_requests_total:unavailable": RUNS,
            "dynagent_requests_total:ok": 2,  # before the outage, and without a session
        }
        canary = busy.registry.status("bot")["canary"]
        assert (canary["state"], busy.registry.status("bot")["traffic"]["canary"]["errors"]) == (
            "serving",
            0,
        )

        # Redis back: the store finds it on its own, and sessions work again on both.
        for service in (busy, idle):
            await service.registry.wait_for(lambda r: "sessions" not in r.degraded, within=15)
            assert (await readyz(service))[1]["status"] == "ready"
            assert (await invoke(service, "after"))[0] == 200


async def test_an_openai_session_run_with_the_store_out_is_a_503_in_openai_shape(
    model_server: ScriptedModelServer, redis_server: RedisServer, agents_dir: Path, tmp_path: Path
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server))
    sessions = {"store": "redis", "url": redis_server.url, "timeout": 1.0}
    async with running_service(service_config(agents_dir, tmp_path, sessions=sessions)) as service:
        with stopped(redis_server, "stop"):
            answers = []
            for stream in (False, True):
                response = await service.client.post(
                    "/v1/chat/completions",
                    json={
                        "model": "bot",
                        "messages": [{"role": "user", "content": "hi"}],
                        "metadata": {"session_id": "conversation"},
                        "stream": stream,
                    },
                )
                body = await response.json()
                answers.append(
                    (response.status, response.headers.get("Retry-After"), body["error"]["code"])
                )
    assert answers == [(503, "1", "unavailable")] * 2
