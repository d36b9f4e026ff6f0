"""``GET /v1/watch/agents`` outlives the request that checked its key: the stream re-checks
the key on every keys-file reload, so a key removed or given other rights loses its open
streams within a tick, and open streams are limited per key and in all (429 past them)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import ClientResponse

from dynagent.http.state import SERVICE
from tests.support.service import RunningService, agent_document, running_service, service_config

KEYS = {
    "alice": "alice-watch-key-aaaaaaaaaaaaaaaa",
    "bob": "bob-watch-key-bbbbbbbbbbbbbbbbbbb",
    "carol": "carol-watch-key-ccccccccccccccccc",
}
HOUR = "?max_seconds=3600"
PER_KEY, TOTAL = 2, 3


def entries(**agents: list[str] | None) -> list[dict[str, Any]]:
    """Keys-file entries for the named keys (``None``: every agent)."""
    return [
        {"name": name, "key": KEYS[name], **({} if allowed is None else {"agents": allowed})}
        for name, allowed in agents.items()
    ]


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": entries(alice=None, bob=None, carol=None)}))
    return path


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, keys_file: Path
) -> AsyncIterator[RunningService]:
    config = service_config(
        agents_dir,
        state_dir,
        auth={"keys_file": str(keys_file)},
        listen={"max_watch_streams": TOTAL, "max_watch_streams_per_key": PER_KEY},
    )
    async with running_service(config, environ={}) as running:
        running.write_agent(agent_document("bot"))
        await running.registry.wait_for(lambda r: "bot" in r)
        yield running


async def next_event(response: ClientResponse) -> bytes:
    """The next event's block (keepalive comments skipped); b"" at the stream's end."""
    async with asyncio.timeout(30):
        while True:
            block = await response.content.readuntil(b"\n\n")
            if not block.startswith(b":"):
                return block


async def reload(service: RunningService, keys_file: Path, keys: list[dict[str, Any]]) -> None:
    watch = service.app[SERVICE].keys_watch
    assert watch is not None
    applied = watch.applied
    keys_file.write_text(yaml.safe_dump({"keys": keys}))
    await watch.wait_for(lambda w: w.applied > applied)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(entries(bob=None), id="removed"),
        pytest.param(entries(alice=["bot"], bob=None), id="limited to some agents"),
        pytest.param([*entries(bob=None), {**entries(alice=None)[0], "admin": True}], id="admin"),
    ],
)
async def test_a_key_removed_or_changed_in_the_keys_file_ends_its_open_watch_streams(
    service: RunningService, keys_file: Path, change: list[dict[str, Any]]
) -> None:
    client = service.client
    async with (
        client.get(f"/v1/watch/agents{HOUR}", headers=bearer("alice")) as alices,
        client.get(f"/v1/watch/agents{HOUR}", headers=bearer("bob")) as bobs,
    ):
        for stream in (alices, bobs):
            assert (await next_event(stream)).startswith(b"event: snapshot\n")
        await reload(service, keys_file, change)
        async with asyncio.timeout(30):
            assert await alices.content.read() == b""  # ended, nothing more sent
        assert service.app[SERVICE].watchers.open == 1  # its slot is free
        service.write_agent(agent_document("bot", description="changed"))
        assert (await next_event(bobs)).startswith(b"event: update\n")  # bob's goes on


async def open_stream(service: RunningService, who: str, query: str = HOUR) -> ClientResponse:
    response = await service.client.get(f"/v1/watch/agents{query}", headers=bearer(who))
    if response.status == 200:
        assert (await next_event(response)).startswith(b"event: snapshot\n")
    return response


async def test_watch_streams_are_limited_per_key_and_in_all(service: RunningService) -> None:
    first = await open_stream(service, "alice", "?max_seconds=1")
    second = await open_stream(service, "alice")
    third = await open_stream(service, "alice")
    assert (third.status, await third.json()) == (
        429,
        {
            "error": {
                "type": "limit_exceeded",
                "message": f"this API key has {PER_KEY} watch streams open "
                "(listen.max_watch_streams_per_key); close one first",
            }
        },
    )
    bobs = await open_stream(service, "bob")
    full = await open_stream(service, "carol")
    assert (full.status, (await full.json())["error"]["message"]) == (
        429,
        f"{TOTAL} watch streams are open on this replica (listen.max_watch_streams); "
        "try again later",
    )
    async with asyncio.timeout(30):
        await first.content.read()  # its max_seconds is over: the slot is free again
    assert service.app[SERVICE].watchers.open == TOTAL - 1
    carols = await open_stream(service, "carol")
    assert carols.status == 200
    for response in (second, bobs, carols):
        response.close()
