"""Shared fixtures: the scripted model server and agents pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import AgentFactory, ScriptedModelServer
from tests.support.budget import LONG_TIMEOUT, is_long


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="fuzz with long budgets (thousands of examples); also DYNAGENT_FUZZ=long",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fuzz: a property-based run whose budget --long raises")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if is_long(config):  # thousands of examples outlast the default 120 s per test
        for item in items:
            if item.get_closest_marker("fuzz") is not None:
                item.add_marker(pytest.mark.timeout(LONG_TIMEOUT))


@pytest.fixture
async def model_server() -> AsyncIterator[ScriptedModelServer]:
    """A scripted OpenAI-compatible server on loopback; the test fails if a request was
    not foreseen by its script or a scripted step was never requested."""
    async with ScriptedModelServer() as server:
        yield server
    server.assert_no_errors()
    server.assert_complete()


@pytest.fixture
async def make_agent(model_server: ScriptedModelServer) -> AsyncIterator[AgentFactory]:
    """Builds agents on the real ``openai`` client against ``model_server``."""
    factory = AgentFactory(model_server)
    yield factory
    await factory.aclose()


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    """An empty folder for agent files (the default factory's directory)."""
    folder = tmp_path / "agents"
    folder.mkdir()
    return folder


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """An empty folder for the service's state (sessions, snapshots)."""
    folder = tmp_path / "state"
    folder.mkdir()
    return folder
