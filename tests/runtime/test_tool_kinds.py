"""Tool kinds: the registry AgentSpec validates ``tools`` entries with and the builder
builds them with, filled from the ``dynagent.tool_kinds`` entry points."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pytest
from loguru import logger
from pydantic import BaseModel, ConfigDict

from dynagent import AgentBuilder, ConfigError, json_schema, load_spec
from dynagent.exceptions import FieldIssue
from dynagent.models import ToolDefinition
from dynagent.spec.agent import AgentSpec
from dynagent.spec.kinds import BUILTIN_KINDS, GROUP, Kinds, kind_points, load_kinds, registered
from dynagent.tools import KindContext, Tool, ToolKind, ToolKinds
from dynagent.tools.http import HttpToolSpec
from dynagent.tools.named import KIND as REF_KIND

ROOT = Path(__file__).parents[2]
BASE: dict[str, Any] = {"name": "helper", "prompt": {"system": "x"}, "model": {"provider": "test"}}
WEATHER = {
    "type": "http",
    "name": "weather",
    "url": "https://api.example.com/weather/{city}",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "allow_hosts": ["api.example.com"],
}


class UpperEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["upper"]
    name: str


class UpperKind(ToolKind[UpperEntry]):
    type = "upper"
    entry = UpperEntry

    def build(self, ctx: KindContext, spec: AgentSpec, entry: UpperEntry, path: str) -> list[Tool]:
        async def call(arguments: dict[str, Any]) -> str:
            return str(arguments["text"]).upper()

        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        return [Tool.of(ToolDefinition(entry.name, "Upper case.", schema), call)]


UPPER = UpperKind()


class NamelessEntry(BaseModel):
    type: Literal["nameless"]


class NamelessKind(ToolKind[NamelessEntry]):
    type = "nameless"
    entry = NamelessEntry

    def build(
        self, ctx: KindContext, spec: AgentSpec, entry: NamelessEntry, path: str
    ) -> list[Tool]:
        return []


class CannedHttp(ToolKind[HttpToolSpec]):
    """``type: http`` built another way, its tools offered by a server: the builder
    calls whatever kind its registry holds for a type."""

    type = "http"
    entry = HttpToolSpec
    remote = True
    online = True

    def __init__(self) -> None:
        self.prepared: list[str] = []

    async def prepare(
        self, ctx: KindContext, spec: AgentSpec, entry: HttpToolSpec, path: str
    ) -> None:
        self.prepared.append(path)

    def build(
        self, ctx: KindContext, spec: AgentSpec, entry: HttpToolSpec, path: str
    ) -> list[Tool]:
        async def call(arguments: dict[str, Any]) -> str:
            return f"canned weather for {arguments['city']}"

        return [Tool.of(ToolDefinition(entry.name, "Canned.", entry.parameters), call)]


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="ERROR")
    yield lines
    logger.remove(sink)


def issues(document: dict[str, Any]) -> tuple[FieldIssue, ...]:
    with pytest.raises(ConfigError) as caught:
        load_spec(document)
    return caught.value.issues


def test_an_unknown_type_names_the_path_and_the_known_types() -> None:
    document = {**BASE, "tools": ["calculator", {"type": "grpc", "name": "lookup", "url": "x"}]}

    assert issues(document) == (
        FieldIssue(
            "tools[lookup].type", "unknown tool type 'grpc'; known types: agent, http, mcp, ref"
        ),
    )
    refused = jsonschema.Draft202012Validator(json_schema()).iter_errors(document)
    assert ["/".join(map(str, error.absolute_path)) for error in refused] == ["tools/1"]


def test_an_unknown_type_that_is_no_name_is_not_repeated() -> None:
    found = issues({**BASE, "tools": [{"type": "<script>" * 20, "name": "x"}]})

    assert found == (
        FieldIssue("tools[x].type", "unknown tool type; known types: agent, http, mcp, ref"),
    )


def test_a_type_registered_twice_is_refused() -> None:
    kinds = ToolKinds([UPPER])

    with pytest.raises(ValueError, match="tool kind 'upper' is already registered"):
        kinds.register(UpperKind())
    assert kinds.types() == ["upper"]


def test_a_kind_whose_entry_has_no_name_is_refused() -> None:
    with pytest.raises(ValueError, match="its entry NamelessEntry has no field 'name'"):
        Kinds([NamelessKind()])


def test_the_process_kinds_are_the_builtins_each_a_tool_kind() -> None:
    assert registered().types() == ["agent", "http", "mcp", "ref"]
    assert all(isinstance(kind, ToolKind) for kind in registered())
    assert ToolKinds.default().types() == ["agent", "http", "mcp", "ref"]


def test_pyproject_declares_the_builtin_table() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    assert project["entry-points"][GROUP] == BUILTIN_KINDS


def test_the_builtin_table_stands_in_for_entry_points_not_installed() -> None:
    installed = [
        EntryPoint("upper", "tests.runtime.test_tool_kinds:UPPER", GROUP),
        EntryPoint("mcp", BUILTIN_KINDS["mcp"], GROUP),
        EntryPoint("mcp", BUILTIN_KINDS["mcp"], GROUP),  # the same distribution twice
    ]

    points = kind_points(installed)

    assert [(p.name, p.value) for p in points] == [
        *BUILTIN_KINDS.items(),
        ("upper", "tests.runtime.test_tool_kinds:UPPER"),
    ]
    assert [(p.name, p.value) for p in kind_points([])] == list(BUILTIN_KINDS.items())


def test_kinds_load_from_entry_points_and_broken_ones_are_left_out(logged: list[str]) -> None:
    points = kind_points(
        [
            EntryPoint("upper", "tests.runtime.test_tool_kinds:UpperKind", GROUP),  # a class
            EntryPoint("http", "tests.runtime.test_tool_kinds:CannedHttp", GROUP),
            EntryPoint("lower", "tests.runtime.test_tool_kinds:UPPER", GROUP),
            EntryPoint("gone", "tests.runtime.no_such_module:KIND", GROUP),
        ]
    )

    kinds = load_kinds(points)

    assert kinds.types() == ["agent", "http", "mcp", "ref", "upper"]
    assert isinstance(kinds.get("upper"), UpperKind)
    assert kinds.get("http") is registered().get("http")  # the built-in keeps its type
    assert sorted(line.split(" (")[0] for line in logged) == [
        "tool kind gone",
        "tool kind http",
        "tool kind lower",
    ]
    assert any("'http' is already registered" in line for line in logged)
    assert any("its type is 'upper', not 'lower'" in line for line in logged)


def test_the_exported_schema_describes_every_kind() -> None:
    schema = json_schema()
    choices = schema["properties"]["tools"]["items"]["oneOf"]

    assert [choice.get("$ref", choice.get("type")) for choice in choices] == [
        "string",
        "#/$defs/ToolRef",
        "#/$defs/HttpToolSpec",
        "#/$defs/McpToolSpec",
        "#/$defs/AgentToolSpec",
    ]
    kinds = [
        schema["$defs"][ref.rsplit("/", 1)[1]] for ref in (c.get("$ref") for c in choices) if ref
    ]
    assert [kind["properties"]["type"]["const"] for kind in kinds] == [
        "ref",
        "http",
        "mcp",
        "agent",
    ]


async def test_the_builder_builds_each_entry_with_the_kind_its_registry_holds() -> None:
    canned = CannedHttp()
    builder = AgentBuilder(kinds=ToolKinds([REF_KIND, canned]))
    spec = load_spec({**BASE, "tools": ["calculator", WEATHER]})

    await builder.prepare(spec)
    agent = builder.build(spec)
    result = await agent.run("weather?")

    assert canned.prepared == ["tools[weather]"]
    assert sorted(agent.tools) == ["calculator", "weather"]
    assert agent.revision != spec.revision  # a remote kind's tools are part of it
    outputs = {e.name: e.output for e in result.events if e.type == "tool_result"}
    assert outputs["weather"] == "canned weather for weather?"  # the caller's words


def test_an_offline_builder_leaves_out_the_tools_of_online_kinds() -> None:
    builder = AgentBuilder(kinds=ToolKinds([REF_KIND, CannedHttp()]), offline=True)
    spec = load_spec({**BASE, "tools": ["calculator", WEATHER]})

    agent = builder.build(spec)

    assert list(agent.tools) == ["calculator"]
    assert agent.revision == spec.revision


def test_a_type_the_builder_has_no_kind_for_is_a_build_error() -> None:
    builder = AgentBuilder(kinds=ToolKinds([REF_KIND]))

    with pytest.raises(ConfigError) as refused:
        builder.build(load_spec({**BASE, "tools": [WEATHER]}))

    assert refused.value.issues == (
        FieldIssue("tools[weather].type", "unknown tool type 'http'; known types: ref"),
    )


def test_a_kind_finds_the_service_objects_it_was_given() -> None:
    marker = json.JSONDecoder()
    context = AgentBuilder(features=(marker,)).context()

    assert context.feature(json.JSONDecoder) is marker
    assert context.feature(json.JSONEncoder) is None
