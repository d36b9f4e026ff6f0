"""The fleet (Nacos, Redis, three ``dynagent serve`` processes, nginx) starts once per test
session, when a test here first asks for it, and is brought down at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.fleet import Fleet
from tests.support.nacos import START_TIMEOUT, NacosAdmin


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.timeout(START_TIMEOUT + 180))


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with Fleet.on_free_ports(tmp_path_factory.mktemp("fleet"), replicas=3) as running:
        running.up()
        yield running


@pytest.fixture
async def nacos(fleet: Fleet) -> AsyncIterator[NacosAdmin]:
    async with NacosAdmin(fleet.nacos_url) as admin:
        yield admin


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session
