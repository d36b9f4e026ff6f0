"""Dependencies' private parts, in ``dynagent._compat`` and nowhere else.

Each ``_compat`` module reaches private parts of one dependency, and names the versions
of it that were tested. Here: every part it reaches is there in the installed version
(an upgrade that moves one fails CI, not production); a version outside the tested range
is refused, with a message that says what to install; the ranges are pyproject.toml's;
and no module outside ``_compat`` reaches a private attribute of a dependency (an
``ast`` scan of the package, whose rule is ``private_reaches``'s docstring).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import logging
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import httpx2
import pytest
import re2
from loguru import logger
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from packaging.requirements import Requirement
from v2.nacos import ClientConfigBuilder, NacosConfigService
from v2.nacos.transport.grpc_util import GrpcUtils

import dynagent
import dynagent._compat
from dynagent import cli
from dynagent._compat import MODULES, UntestedDependency
from dynagent._compat import Tested as Range  # not Test…: pytest would collect it
from dynagent._compat import aiohttp as aiohttp_compat
from dynagent._compat import httpx2 as httpx2_compat
from dynagent._compat import mcp as mcp_compat
from dynagent._compat import nacos as nacos_compat
from dynagent._compat import opentelemetry as otel_compat
from dynagent._compat import re2 as re2_compat
from dynagent._compat.versions import release
from dynagent.exceptions import StartupError
from dynagent.mcp._network import PublicOnlyBackend
from dynagent.models import ClientPool
from dynagent.nacos._fuzzy import ConfigFuzzyWatchChangeNotifyRequest
from dynagent.nacos.client import GrayAwareQueryResponse
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer

PACKAGE = Path(dynagent.__file__).parent
PYPROJECT = PACKAGE.parents[1] / "pyproject.toml"

# -- every private part a _compat module reaches is there -----------------------------------


def _resolve(part: str) -> object:
    module_name, _, path = part.partition(":")
    found: object = importlib.import_module(module_name)
    for name in path.split("."):
        found = getattr(found, name)
    return found


@pytest.mark.parametrize(
    "part",
    [part for module in MODULES for part in module.PRIVATE_PARTS],
)
def test_every_private_part_reached_is_there(part: str) -> None:
    _resolve(part)


async def test_a_model_connection_has_the_timer_attributes_it_reaches() -> None:
    # Set by aiohttp's ResponseHandler on itself, so not resolvable on the class.
    connection = aiohttp_compat.model_connection(asyncio.get_running_loop())
    assert connection._read_timeout is None
    assert connection._read_timeout_handle is None


def test_the_private_parts_are_named_in_full() -> None:
    # Each module:attribute resolves from an importable module; none is left unnamed.
    for module in MODULES:
        for part in module.PRIVATE_PARTS:
            assert ":" in part, part
    assert {module.TESTED.distribution for module in MODULES} == {
        "aiohttp",
        "httpx2",
        "loguru",
        "mcp",
        "nacos-sdk-python",
        "openai",
        "opentelemetry-sdk",
        "google-re2",
    }


async def test_the_nacos_listen_task_is_woken_and_stopped(tmp_path: Path) -> None:
    config = (
        ClientConfigBuilder()
        .server_address("127.0.0.1:1")  # never connected: the client is only built
        .cache_dir(str(tmp_path / "cache"))
        .log_dir(str(tmp_path / "logs"))
        .log_level(logging.WARNING)
        .build()
    )
    service = NacosConfigService(config)
    proxy = service.grpc_client_proxy
    try:
        assert proxy.execute_config_listen_channel.empty()
        nacos_compat.wake_listen_task(service)
        assert proxy.execute_config_listen_channel.get_nowait() is None
        nacos_compat.stop_listen_task(service)
        assert proxy.stop_event.is_set()
    finally:
        await service.shutdown()
    assert proxy.listen_task.done()


def test_the_nacos_sdk_parses_pushes_with_the_registered_wire_types() -> None:
    # Importing the client registered its query answer; the fuzzy watch registers its
    # pushes when it starts. The SDK must parse a message of that type into that class.
    nacos_compat.register_wire_types(
        {"ConfigFuzzyWatchChangeNotifyRequest": ConfigFuzzyWatchChangeNotifyRequest}
    )
    push = ConfigFuzzyWatchChangeNotifyRequest(groupKey="a+G+ns", changeType="ADD_CONFIG")
    parsed = GrpcUtils.parse(GrpcUtils.convert_request_to_payload(push))
    assert isinstance(parsed, ConfigFuzzyWatchChangeNotifyRequest)
    assert (parsed.groupKey, parsed.changeType) == ("a+G+ns", "ADD_CONFIG")
    assert GrpcUtils.remote_type["ConfigQueryResponse"] is GrayAwareQueryResponse


async def test_a_held_model_stream_leaves_its_socket_unread_then_reads_again(
    model_server: ScriptedModelServer,
) -> None:
    # Written a word at a time: the response is still open, its connection with it.
    model_server.script(DEFAULT_MODEL, [Reply("w " * 20, gap=0.01)])
    pool = ClientPool()
    try:
        body = await pool.get(model_server.base_url, "key").post(
            {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "hi"}]}
            | {"stream": True},
            30,
        )
        # The socket under it is left unread while held, and read again after.
        assert body.connection is not None and body.connection.transport is not None
        transport = body.connection.transport
        held = asyncio.create_task(aiohttp_compat.leave_unread(body, 60))
        await asyncio.sleep(0)  # the hold starts (a turn of the loop, not a wait)
        assert not transport.is_reading()
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        assert transport.is_reading()
        assert b"[DONE]" in await body.content.read()
        body.release()
    finally:
        await pool.aclose()


def test_re2_finds_byte_spans_and_character_lengths() -> None:
    find = re2_compat.span_finder(re2.compile("b(x)?"))
    data = "ébc".encode()
    assert tuple(find(data, 0, len(data))[:2]) == (
        (2, 3),
        (re2_compat.NO_MATCH, re2_compat.NO_MATCH),
    )
    assert find(data, 3, len(data))[0] == (re2_compat.NO_MATCH, re2_compat.NO_MATCH)
    assert re2_compat.character_bytes(data, 0) == 2


async def test_the_mcp_http_client_is_the_sdks() -> None:
    http = mcp_compat.http_client(headers={"x-test": "1"})
    try:
        assert isinstance(http, httpx2.AsyncClient)
        assert http.headers["x-test"] == "1"
        assert http.timeout.read == 300  # the SDK's read timeout for a held-open stream
    finally:
        await http.aclose()


class _Fixed(IdGenerator):
    def __init__(self, ids: IdGenerator) -> None:
        self.ids = ids

    def generate_span_id(self) -> int:
        return 0x1234

    def generate_trace_id(self) -> int:
        return self.ids.generate_trace_id()


def test_an_sdk_tracer_draws_span_ids_from_the_wrapped_generator() -> None:
    tracer = TracerProvider(id_generator=RandomIdGenerator()).get_tracer("test")
    otel_compat.wrap_id_generator(tracer, _Fixed)
    span = tracer.start_span("x")
    span.end()
    assert span.get_span_context().span_id == 0x1234


# -- an untested version is refused -------------------------------------------------------

TESTED = Range("example-sdk", "3.2.0", "3.3")


@pytest.mark.parametrize("version", ["3.2.0", "3.2", "3.2.9", "3.2.10.post1", "3.2.1+local"])
def test_a_version_in_the_tested_range_is_accepted(version: str) -> None:
    assert TESTED.problem(version) is None


@pytest.mark.parametrize("version", ["3.3.0", "3.3", "3.3.0rc1", "4.0", "3.1.9", "2", "", "abc"])
def test_a_version_outside_the_tested_range_is_refused(version: str) -> None:
    problem = TESTED.problem(version)
    assert problem is not None
    assert f"example-sdk {version} is installed" in problem
    assert ">=3.2.0,<3.3" in problem
    assert "pip install 'example-sdk>=3.2.0,<3.3'" in problem


def test_release_numbers() -> None:
    assert release("1.1.20251105") == (1, 1, 20251105)
    assert release("0.66b2") == (0, 66)
    with pytest.raises(ValueError, match="not a version"):
        release("dev")


def test_the_installed_versions_are_the_tested_ones() -> None:
    for module in MODULES:
        installed = metadata.version(module.TESTED.distribution)
        assert module.TESTED.problem(installed) is None, installed
    dynagent._compat.check_all()


def test_the_tested_ranges_are_pyprojects() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    listed = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        listed += extra
    requirements: dict[str, set[str]] = {}
    for line in listed:
        requirement = Requirement(line)
        requirements.setdefault(requirement.name, set()).add(str(requirement.specifier))
    for module in MODULES:
        tested = module.TESTED
        expected = str(Requirement(tested.requirement).specifier)
        assert requirements.get(tested.distribution) == {expected}, tested.distribution


@pytest.fixture
def untested_aiohttp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Range]:
    """The check of a range the installed aiohttp is not in (``_compat``'s own list is
    replaced, not the package: its real version is read and refused)."""
    tested = Range("aiohttp", "0.1", "0.2")
    module = SimpleNamespace(TESTED=tested, PRIVATE_PARTS=(), check=tested.check)
    monkeypatch.setattr(dynagent._compat, "MODULES", (module,))
    monkeypatch.setattr(dynagent._compat, "_checked", False)
    yield tested


def test_an_untested_version_stops_the_service_at_start(untested_aiohttp: Range) -> None:
    with pytest.raises(UntestedDependency) as refused:
        dynagent._compat.check_all()
    assert isinstance(refused.value, StartupError)
    assert f"aiohttp {aiohttp.__version__} is installed" in refused.value.message
    # ``dynagent serve``: one line and exit code 2, before its config is even read.
    lines: list[str] = []
    sink = logger.add(lines.append, format="{level} {message}")
    try:
        assert cli.main(["serve", "--config", "/nonexistent/service.yaml"]) == 2
    finally:
        logger.remove(sink)
    assert lines == [f"ERROR {refused.value.message}\n"]
    assert "pip install 'aiohttp>=0.1,<0.2'" in lines[0]


# -- nothing outside _compat reaches a private attribute of a dependency -------------------

NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
"""Public despite the underscore (it keeps them apart from field names)."""
MUTATORS = frozenset(
    {"update", "setdefault", "append", "insert", "pop", "popitem", "clear", "__setitem__"}
)
"""Calls that change a dict or list in place."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dependency(module: str | None, level: int) -> bool:
    """Whether an import names a dependency: neither relative, ``dynagent``, nor stdlib."""
    top = (module or "").split(".")[0]
    return not level and bool(top) and top != "dynagent" and top not in sys.stdlib_module_names


def _definitions(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(the names the module defines itself, the names bound to a dependency's import)."""
    own: set[str] = set()
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            own.update(t.id for t in targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets):
                assert node.value is not None
                own.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                source = node.module if isinstance(node, ast.ImportFrom) else alias.name
                level = node.level if isinstance(node, ast.ImportFrom) else 0
                (imported if _dependency(source, level) else own).add(bound)
    return own, imported


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _imported_root(node: ast.expr, imported: set[str]) -> bool:
    root = _root(node)
    return isinstance(root, ast.Name) and root.id in imported


def private_reaches(source: str) -> list[str]:
    """Where ``source`` reaches a dependency's private parts, as ``line: what``.

    The rule, a heuristic kept simple:
    - no import of a dependency's ``_``-named module or name (``from re2 import _re2``);
    - no ``x._name`` (nor ``getattr``/``setattr``/``hasattr``/``delattr`` with a literal
      ``"_name"``) unless ``x`` is ``self`` or ``cls``, or ``_name`` is one the module
      defines itself: set on ``self``/``cls``, in ``__slots__``, or a function, class or
      module-level name (so ``other._enabled``, another instance of its own class, is
      fine); namedtuple's ``_replace``, ``_asdict``, ``_fields``, ``_make`` are public;
    - no patch of a dependency: no assignment to, or deletion of, an attribute or item of
      a name imported from one, no ``setattr``/``delattr`` on it, and no in-place change
      (``update``, ``append``…) of one of its attributes (``GrpcUtils.remote_type.update``).
    A dependency is any import that is neither relative, ``dynagent``, nor stdlib. Names
    ``__dunder__`` are Python's, not private.
    """
    tree = ast.parse(source)
    own, imported = _definitions(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        what = _reach(node, own, imported)
        if what:
            found.append(f"{getattr(node, 'lineno', 0)}: {what}")
    return found


def _reach(node: ast.AST, own: set[str], imported: set[str]) -> str | None:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return _private_import(node)
    if isinstance(node, ast.Attribute) and _private(node.attr):
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            return None
        if node.attr in own or node.attr in NAMEDTUPLE_API:
            return None
        return f"{ast.unparse(value)}.{node.attr}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) > 1:
        return _by_name(node.func.id, node.args[0], node.args[1], own, imported)
    return _patch(node, imported)


def _private_import(node: ast.Import | ast.ImportFrom) -> str | None:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if _dependency(a.name, 0)]
        private = [name for name in names if any(map(_private, name.split(".")))]
        return f"import {private[0]}" if private else None
    if not _dependency(node.module, node.level):
        return None
    names = [*(node.module or "").split("."), *(a.name for a in node.names)]
    return f"from {node.module} import …" if any(map(_private, names)) else None


def _by_name(
    function: str, target: ast.expr, name: ast.expr, own: set[str], imported: set[str]
) -> str | None:
    """``getattr``, ``setattr``, ``hasattr`` or ``delattr`` with a literal ``"_name"``, or
    ``setattr``/``delattr`` on a dependency."""
    if function not in ("getattr", "setattr", "hasattr", "delattr"):
        return None
    literal = name.value if isinstance(name, ast.Constant) else None
    if isinstance(literal, str) and _private(literal) and literal not in own:
        return f"{function}({ast.unparse(target)}, {literal!r})"
    if function in ("setattr", "delattr") and _imported_root(target, imported):
        return f"{function}({ast.unparse(target)}, …)"
    return None


def _patch(node: ast.AST, imported: set[str]) -> str | None:
    """An assignment to (or deletion of) an attribute or item of a dependency, or an
    in-place change of one of its attributes."""
    changed: list[ast.expr] = []
    if isinstance(node, ast.Assign | ast.Delete):
        changed = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        changed = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        changed = [node.func.value] if node.func.attr in MUTATORS else []
    for target in changed:
        if isinstance(target, ast.Attribute | ast.Subscript) and _imported_root(target, imported):
            return f"patches {ast.unparse(target)}"
    return None


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from re2 import _re2", ["1: from re2 import …"]),
        ("import mcp.shared._httpx_utils", ["1: import mcp.shared._httpx_utils"]),
        (
            "from mcp.shared._httpx_utils import create",
            ["1: from mcp.shared._httpx_utils import …"],
        ),
        ("def f(r):\n    return r.stream._stream", ["2: r.stream._stream"]),
        ("def f(r):\n    return getattr(r, '_stream', None)", ["2: getattr(r, '_stream')"]),
        (
            "from v2.nacos.transport.grpc_util import GrpcUtils\nGrpcUtils.remote_type.update({})",
            ["2: patches GrpcUtils.remote_type"],
        ),
        (
            "from v2.nacos.transport.grpc_util import GrpcUtils\n"
            "GrpcUtils.remote_type['X'] = object",
            ["2: patches GrpcUtils.remote_type['X']"],
        ),
        (
            "import aiohttp\naiohttp.ClientSession.close = None",
            ["2: patches aiohttp.ClientSession.close"],
        ),
        ("import aiohttp\nsetattr(aiohttp, 'x', 1)", ["2: setattr(aiohttp, …)"]),
    ],
)
def test_the_scan_finds_what_the_rule_forbids(source: str, found: list[str]) -> None:
    assert private_reaches(source) == found


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def __init__(self):\n        self._x = 1\n    def same(self, other):\n"
        "        return other._x",
        "class A:\n    __slots__ = ('_x',)\n    def f(self, other):\n        return other._x",
        "from collections import namedtuple\ndef f(p):\n    return p._replace(a=1)",
        "from . import _regex\nfrom .tools._mcp_pool import McpTarget",
        "import logging\nlogging.getLogger('x').propagate = True\nimport json\njson.x = 1",
        "import jsonschema\nV = jsonschema.validators.extend(jsonschema.Draft7Validator, {})",
        "def f(x):\n    return x.__class__.__name__",
    ],
)
def test_the_scan_allows_what_the_rule_allows(source: str) -> None:
    assert private_reaches(source) == []


def _package_sources() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] != "_compat":
            yield str(relative), path.read_text(encoding="utf-8")


def test_nothing_outside_compat_reaches_a_private_part_of_a_dependency() -> None:
    found = [
        f"{name}:{where}"
        for name, source in _package_sources()
        for where in private_reaches(source)
    ]
    assert found == []


async def test_the_mcp_clients_connections_go_through_the_backend_given() -> None:
    """The outbound policy's address check on resolved names lives in the network backend
    of the MCP client's connection pool: httpx2 must still keep one there."""
    backend = PublicOnlyBackend()
    async with mcp_compat.http_client() as client:
        httpx2_compat.use_network_backend(client, backend)
        assert client._transport._pool._network_backend is backend  # type: ignore[attr-defined]
