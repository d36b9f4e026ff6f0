"""Shared fixtures: the scripted model server and agents pointed at it; and the test tiers.

Every test that needs Java (a real Nacos server, alone or in the fleet) is marked ``nacos``,
every test that drives Chromium ``browser``, and the fleet's tests ``slow`` too: membership
follows from the fixtures a test asks for and the helpers its module uses, never from a
list. A test that takes more than ~5 s alone by design (a soak, a CPU budget over 1 MB
requests, a round of ``dynagent`` processes) says so itself with ``@pytest.mark.slow``.
``make test-fast`` runs what is left: ``pytest -m "not nacos and not browser and not
slow"``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, blockbuster_ctx

from dynagent.spec._plugins import plugin_points
from tests.support import AgentFactory, ScriptedModelServer
from tests.support.budget import LONG_TIMEOUT, is_long
from tests.support.service import RunningService, bot_service


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="fuzz with long budgets (thousands of examples); also DYNAGENT_FUZZ=long",
    )


NACOS_FIXTURES = frozenset({"nacos_server", "nacos_cluster", "fleet"})
"""Fixtures that start a Nacos server (the fleet runs one too): their tests need Java."""
SLOW_FIXTURES = frozenset({"fleet", "nacos_cluster"})
"""Fixtures whose start alone outlasts the fast tier's budget (three replicas and nginx;
three Nacos nodes)."""
BROWSER_MODULE = "tests.ui.browser"
"""Where the Chromium helpers live: a test module that imports from it drives a browser."""


def _uses_browser(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and any(
        getattr(value, "__module__", None) == BROWSER_MODULE for value in vars(module).values()
    )


def tier_markers(item: pytest.Item) -> list[str]:
    """The tier markers ``item`` gets from what it uses (see the module's docstring)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    marks = []
    if fixtures & NACOS_FIXTURES:
        marks.append("nacos")
    if _uses_browser(item):
        marks.append("browser")
    if fixtures & SLOW_FIXTURES:
        marks.append("slow")
    return marks


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in tier_markers(item):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
    if is_long(config):  # thousands of examples outlast the default 120 s per test
        for item in items:
            if item.get_closest_marker("fuzz") is not None:
                item.add_marker(pytest.mark.timeout(LONG_TIMEOUT))


BLOCKING_SCANNED = ["dynagent"]
"""Where a blocking call fails the test: with a frame of the service's code on the stack. The
tests' own scaffolding (writing an agent file before a reload, say) blocks on purpose."""
BEFORE_THE_LOOP = {
    "dynagent/config/__init__.py": {"load_config"},
    "dynagent/logs.py": {"configure_logging"},
    "dynagent/http/app.py": {"create_app"},
    "dynagent/core/service.py": {"create"},
    "dynagent/core/otel.py": {"from_environ"},
}
"""Start-up functions that ``dynagent serve`` calls before its event loop runs (they read the
config and keys files, set up logging and the exporter); tests call them inside theirs."""
NOT_THE_SERVICES = {
    # Importing a module reads files (a library's lazy import reads its own version from
    # its metadata): once per process, which blockbuster leaves out by design.
    "<frozen importlib._bootstrap>": {"_find_and_load"},
    # The Nacos SDK's clients make their cache and log folders and open their log file as
    # they are built, which must be on the loop (they start tasks): once per connection.
    "v2/nacos/config/nacos_config_service.py": {"__init__"},
    "v2/nacos/ai/nacos_ai_service.py": {"create_ai_service"},
    # It writes its config cache with aiofiles (in a thread), but makes the folder on the loop.
    "v2/nacos/utils/file_util.py": {"mkdir_if_necessary"},
    # redis-py reads its version from its metadata for its first connection (cached).
    "redis/utils.py": {"get_lib_version"},
    # A log line goes to stderr, which blockbuster allows; under pytest's capture stderr is
    # a temporary file.
    "logging/__init__.py": {"emit"},
    # A logged exception's traceback shows its source lines, read once (linecache caches
    # them); loguru reports a sink's failure and drops the line, so nothing would fail.
    "loguru/_better_exceptions.py": {"format_exception"},
}
"""Blocking that is not the service's own doing, allowed where it happens."""


@pytest.fixture(autouse=True)
def blockbuster(request: pytest.FixtureRequest) -> Iterator[BlockBuster | None]:
    """Fails an async test when a blocking call (file I/O, ``time.sleep``, a blocking
    socket, SQLite, ...) runs on the event loop from the service's code: one such call
    stalls every request the loop serves."""
    if not inspect.iscoroutinefunction(request.function):
        yield None
        return
    # The plugin scan is once per process; the service makes it off the loop at start-up,
    # while tests also build registries in their own bodies: made here, before the loop.
    for group in ("dynagent.tools", "dynagent.interceptors", "dynagent.tool_kinds"):
        plugin_points(group)
    with blockbuster_ctx(BLOCKING_SCANNED) as checks:
        for check in checks.functions.values():
            for filename, functions in (BEFORE_THE_LOOP | NOT_THE_SERVICES).items():
                check.can_block_in(filename, functions)
        yield checks


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
async def keyed_bot(
    request: pytest.FixtureRequest,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    tmp_path: Path,
) -> AsyncIterator[RunningService]:
    """Agent ``bot`` on ``model_server``, served with the API keys the test module names
    in ``SERVICE_KEYS`` (environment variable → comma-separated keys)."""
    keys: dict[str, str] = request.module.SERVICE_KEYS
    async with bot_service(model_server, agents_dir, tmp_path, **keys) as running:
        yield running


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """An empty folder for the service's state (sessions, snapshots)."""
    folder = tmp_path / "state"
    folder.mkdir()
    return folder
