"""Fixtures for the tests against a real Nacos server.

The server starts once per test session, and only when a test here asks for
it: ``scripts/nacos.sh start --clean`` on port 18848 (or
``$DYNAGENT_TEST_NACOS_PORT``), console on port + 5, data in the session's tmp dir. It is
always stopped at the end of the session. Every test gets groups of its own, so
tests never see each other's configs, and every Nacos client a fresh SDK cache.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dynagent.config import NacosConfig
from tests.support.nacos import START_TIMEOUT, NacosAdmin, NacosServer, claimed_port

CONSOLE_OFFSET = 5
"""Console port = HTTP port + 5: inside the 10-port stride ``claimed_port`` gives each session."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The first test to ask for the server waits for its start, which on a fresh machine
    # includes downloading it with Maven: give every Nacos test room for that.
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.timeout(START_TIMEOUT + 120))


@pytest.fixture(scope="session")
def nacos_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NacosServer]:
    """The session's Nacos server; stopped at the end even when its start failed half-way."""
    with claimed_port() as port:
        # The console too (about 0.3 s more), for the test that drives it as ops do.
        server = NacosServer(port, tmp_path_factory.mktemp("nacos") / "home", port + CONSOLE_OFFSET)
        try:
            seconds = server.start(clean=True)
            print(f"\nNacos on {server.addr} started in {seconds:.1f} s")
            yield server
        finally:
            server.stop()
        assert server.listening() == [], "Nacos still listens after stop"


@pytest.fixture
def nacos_group(request: pytest.FixtureRequest) -> str:
    """A group no other test uses: the test's name plus a random suffix."""
    return unique_group(request.node.name)


def unique_group(hint: str) -> str:
    # Nacos allows letters, digits and -_.: in group names (up to 128 characters).
    return f"{re.sub(r'[^A-Za-z0-9_.:-]', '_', hint)[:60]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def nacos(nacos_server: NacosServer) -> AsyncIterator[NacosAdmin]:
    """Nacos's own v3 admin HTTP API, as an operator would use it."""
    async with NacosAdmin(nacos_server.base_url) as admin:
        yield admin


@pytest.fixture
def nacos_settings(nacos_server: NacosServer, nacos_group: str, tmp_path: Path) -> NacosConfig:
    """Dynagent's Nacos settings for this test: its own agent and prompt groups, a snapshot
    dir of its own, and a short reconcile period so that new dataIds are found quickly."""
    return NacosConfig(
        server_addr=nacos_server.addr,
        group=nacos_group,
        prompt_group=f"{nacos_group}-prompts",
        snapshot_dir=tmp_path / "snapshot",
        poll_seconds=0.5,
    )
