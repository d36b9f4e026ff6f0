"""Keys and metrics follow the key's scope: the keys file is watched (a removed key stops
working without a restart), ``/metrics`` needs an admin or a metrics key unless
``metrics.public``, and a key limited to some agents sees only their series."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from loguru import logger
from prometheus_client.parser import text_string_to_metric_families

from dynagent.http.state import SERVICE
from tests.support.service import RunningService, agent_document, running_service, service_config

ADMIN = "admin-key-0123456789abcdef0123"
METRICS = "metrics-key-0123456789abcdef01"
FRONTEND = "frontend-key-456789abcdef012345"
"""May use ``bot`` only."""
BOT_ADMIN = "bot-admin-key-89abcdef01234567"
BOT_METRICS = "bot-metrics-key-89abcdef0123456"
"""Metrics of ``bot`` only."""
LATER = "later-key-0123456789abcdef01234"

KEYS = [
    {"name": "frontend", "key": FRONTEND, "agents": ["bot"]},
    {"name": "bot-admin", "key": BOT_ADMIN, "agents": ["bot"], "admin": True},
    {"name": "bot-metrics", "key": BOT_METRICS, "agents": ["bot"], "metrics": True},
]
ENVIRON = {"DYNAGENT_ADMIN_KEYS": ADMIN, "DYNAGENT_METRICS_KEYS": METRICS}


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": KEYS}))
    return path


async def serving(
    agents_dir: Path, state_dir: Path, keys_file: Path, **sections: Any
) -> AsyncIterator[RunningService]:
    for name in ("bot", "other"):
        (agents_dir / f"{name}.yaml").write_text(yaml.safe_dump(agent_document(name)))
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys_file)}, **sections)
    async with running_service(config, environ=ENVIRON) as running:
        for name in ("bot", "other"):
            async with running.client.post(
                f"/v1/agents/{name}/invoke", json={"input": "hi"}, headers=bearer(ADMIN)
            ) as response:
                assert response.status == 200
        yield running


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path, keys_file: Path) -> Any:
    async for running in serving(agents_dir, state_dir, keys_file):
        yield running


async def scrape(service: RunningService, key: str | None) -> tuple[int, Any]:
    """The status and, for 200, {family name: the agents its samples are about}."""
    async with service.client.get("/metrics", headers=bearer(key)) as response:
        if response.status != 200:
            return response.status, await response.json()
        families = text_string_to_metric_families(await response.text())
        return 200, {
            family.name: sorted({s.labels.get("agent", "-") for s in family.samples})
            for family in families
            if family.name.startswith(("dynagent_", "process_", "python_")) and family.samples
        }


async def test_metrics_need_an_admin_or_a_metrics_key_and_follow_its_agents(
    service: RunningService,
) -> None:
    refused = {
        "error": {
            "type": "forbidden",
            "message": "/metrics needs an admin or a metrics API key (auth.metrics_keys_env, "
            "or metrics: true in the keys file), unless metrics.public is true",
        }
    }
    status, everything = await scrape(service, ADMIN)
    assert status == 200
    assert everything["dynagent_agents"] == ["-"]  # a total over all agents
    # The process's own series are for keys that see every agent.
    assert everything["process_resident_memory_bytes"] == everything["python_gc_collections"]
    assert everything["python_gc_collections"] == ["-"]
    per_agent = {name: agents for name, agents in everything.items() if agents != ["-"]}
    assert {"dynagent_requests", "dynagent_tokens", "dynagent_reloads"} <= per_agent.keys()
    assert all(agents == ["bot", "other"] for agents in per_agent.values()), everything
    only_bot = {name: ["bot"] for name in per_agent}

    answers = {key: await scrape(service, key) for key in (METRICS, BOT_ADMIN, BOT_METRICS)}
    assert answers == {
        METRICS: (200, everything),
        BOT_ADMIN: (200, only_bot),
        BOT_METRICS: (200, only_bot),
    }
    assert await scrape(service, FRONTEND) == (403, refused)
    status, _ = await scrape(service, None)
    assert status == 401
    # A metrics key is for metrics only: it reaches no agent.
    async with service.client.get("/v1/agents", headers=bearer(METRICS)) as response:
        assert (response.status, await response.json()) == (200, {"agents": []})


async def test_public_metrics_need_no_key(
    agents_dir: Path, state_dir: Path, keys_file: Path
) -> None:
    async for service in serving(agents_dir, state_dir, keys_file, metrics={"public": True}):
        status, families = await scrape(service, None)
        assert (status, families["dynagent_requests"]) == (200, ["bot", "other"])


async def call(service: RunningService, key: str) -> int:
    async with service.client.get("/v1/agents/bot", headers=bearer(key)) as response:
        return response.status


@pytest.mark.parametrize("how", ["rewritten in place", "replaced by rename"])
async def test_a_key_removed_from_the_keys_file_stops_working_without_a_restart(
    service: RunningService, keys_file: Path, how: str
) -> None:
    watch = service.app[SERVICE].keys_watch
    assert watch is not None
    assert [await call(service, key) for key in (FRONTEND, BOT_ADMIN, LATER)] == [200, 200, 401]

    kept = [*KEYS[1:], {"name": "later", "key": LATER, "agents": ["bot"]}]
    applied = watch.applied
    text = yaml.safe_dump({"keys": kept})
    if how == "rewritten in place":
        keys_file.write_text(text)
    else:
        keys_file.with_name(".keys.tmp").write_text(text)
        os.replace(keys_file.with_name(".keys.tmp"), keys_file)
    await watch.wait_for(lambda w: w.applied > applied)

    assert [await call(service, key) for key in (FRONTEND, BOT_ADMIN, LATER)] == [401, 200, 200]


async def test_a_broken_keys_file_keeps_the_last_good_keys_until_it_is_fixed(
    service: RunningService, keys_file: Path
) -> None:
    watch = service.app[SERVICE].keys_watch
    assert watch is not None
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG", format="{message}")
    try:
        for broken in ("keys: [{name: frontend, key: short}]\n", f"keys: [{{key: {LATER}\n"):
            target = watch.refused + 1
            keys_file.write_text(broken)
            await watch.wait_for(lambda w: w.refused >= target)  # noqa: B023 - awaited here
            assert [await call(service, key) for key in (FRONTEND, BOT_ADMIN)] == [200, 200]
    finally:
        logger.remove(sink)
    refusals = [line for line in lines if "keys file not reloaded" in line]
    assert len(refusals) == 2 and "expected ',' or '}'" in refusals[1], refusals
    assert [line for line in lines if LATER in line] == []  # YAML's quote of the line is gone

    applied = watch.applied
    keys_file.unlink()  # no file: none of its keys is valid any more
    await watch.wait_for(lambda w: w.applied > applied)
    assert [await call(service, key) for key in (FRONTEND, BOT_ADMIN, ADMIN)] == [401, 401, 200]


async def test_emptying_the_only_source_of_keys_never_turns_auth_off(
    agents_dir: Path, state_dir: Path, keys_file: Path
) -> None:
    (agents_dir / "bot.yaml").write_text(yaml.safe_dump(agent_document("bot")))
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys_file)})
    async with running_service(config, environ={}) as service:
        watch = service.app[SERVICE].keys_watch
        assert watch is not None
        assert await call(service, FRONTEND) == 200
        applied = watch.applied
        keys_file.write_text(yaml.safe_dump({"keys": []}))
        await watch.wait_for(lambda w: w.applied > applied)
        async with service.client.get("/v1/agents/bot") as response:
            assert response.status == 401  # no key left is not "auth off"
        assert await call(service, FRONTEND) == 401
