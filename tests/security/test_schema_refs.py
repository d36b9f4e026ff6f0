"""A JSON Schema never makes the service open anything: every schema Dynagent accepts
from anyone — a caller's ``response_format``/``text.format``, an agent's output schema,
an HTTP tool's ``parameters``, an MCP server's ``inputSchema`` — resolves ``$ref`` only
inside itself. A schema that needs more is refused, naming the field, and nothing is
fetched or read: a listening server counts every request it gets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from dynagent.exceptions import ConfigError
from dynagent.spec._schemas import check_schema, validator
from dynagent.spec.agent import load_spec
from tests.support import ScriptedModelServer
from tests.support.caller_schema import post_caller_schema
from tests.support.served import served
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

KEY = "schema-refs-test-key-aaaaaaaa"


@pytest.fixture
async def listener() -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records every path asked of it."""
    asked: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        asked.append(request.path_qs)
        return web.json_response({"type": "string"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    async with served(app) as base:
        yield base, asked


def outside_refs(base: str, tmp_path: Path) -> dict[str, str]:
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string", "description": "do not read me"}', encoding="utf-8")
    return {
        "http": f"{base}/schema.json?token=1",
        "http to a fragment": f"{base}/other#/$defs/x",
        "file": secret.as_uri(),
        "relative": "secret.json",
        "urn": "urn:example:thing",
        "scheme-relative": "//127.0.0.1/x",
    }


def _with_ref(ref: str, key: str = "$ref") -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"answer": {key: ref}},
        "required": ["answer"],
    }


REFS = ["http", "http to a fragment", "file", "relative", "urn", "scheme-relative"]


@pytest.mark.parametrize("kind", REFS)
@pytest.mark.parametrize("key", ["$ref", "$dynamicRef"])
def test_a_reference_outside_the_schema_is_refused_before_any_validation(
    kind: str, key: str, listener: tuple[str, list[str]], tmp_path: Path
) -> None:
    base, asked = listener
    schema = _with_ref(outside_refs(base, tmp_path)[kind], key)
    with pytest.raises(ValueError, match="points outside the schema"):
        check_schema(schema)
    with pytest.raises(ValueError, match="points outside the schema"):
        validator(schema)
    assert asked == []


@pytest.mark.parametrize(
    "ref", ["#/$defs/missing", "#/properties/nope", "#nowhere", "#/$defs/name/allOf/7"]
)
def test_a_reference_to_nothing_in_the_schema_is_refused(ref: str) -> None:
    schema = {**_with_ref(ref), "$defs": {"name": {"allOf": [{"type": "string"}]}}}
    with pytest.raises(ValueError, match="points at nothing"):
        check_schema(schema)


def test_references_inside_the_schema_still_validate() -> None:
    schema = {
        "$defs": {"name": {"type": "string", "$anchor": "nm"}, "a/b": {"type": "integer"}},
        "type": "object",
        "properties": {
            "first": {"$ref": "#/$defs/name"},
            "second": {"$ref": "#nm"},
            "third": {"$ref": "#/$defs/a~1b"},
            "again": {"$ref": "#"},
        },
    }
    check_schema(schema)
    checker = validator(schema)
    assert checker.is_valid({"first": "x", "second": "y", "third": 3})
    assert [e.message for e in checker.iter_errors({"first": 1, "third": "3"})] == [
        "1 is not of type 'string'",
        "'3' is not of type 'integer'",
    ]


def test_an_agent_output_schema_with_an_outside_reference_is_a_build_error(
    listener: tuple[str, list[str]],
) -> None:
    base, asked = listener
    text = (
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\n"
        f"output:\n  schema: {{type: object, properties: {{a: {{$ref: '{base}/x'}}}}}}\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_spec(text)
    assert [(i.path, "points outside the schema" in i.message) for i in refused.value.issues] == [
        ("output.schema", True)
    ]
    assert asked == []


def test_an_http_tool_whose_parameters_reference_outside_is_a_build_error(
    listener: tuple[str, list[str]],
) -> None:
    base, asked = listener
    text = (
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\ntools:\n"
        "  - type: http\n    name: look\n    description: d\n"
        "    url: https://api.example.com/x\n    allow_hosts: [api.example.com]\n"
        f"    parameters: {{type: object, properties: {{q: {{$ref: '{base}/p'}}}}}}\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_spec(text)
    assert ["points outside the schema" in i.message for i in refused.value.issues] == [True]
    assert refused.value.issues[0].path.endswith("parameters")
    assert asked == []


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server, system="Be brief."))
    environ = {"DYNAGENT_API_KEYS": KEY}
    async with running_service(service_config(agents_dir, state_dir), environ=environ) as running:
        yield running


@pytest.mark.parametrize("kind", REFS)
async def test_a_caller_schema_with_an_outside_reference_is_a_400_on_both_routes(
    kind: str, service: RunningService, listener: tuple[str, list[str]], tmp_path: Path
) -> None:
    base, asked = listener
    schema = _with_ref(outside_refs(base, tmp_path)[kind])
    chat, responses = await post_caller_schema(service, KEY, schema)
    for answer in (chat, responses):
        body = await answer.json()
        assert answer.status == 400, body
        assert body["error"]["type"] == "invalid_request_error"
        assert "points outside the schema" in body["error"]["message"]
    assert (await chat.json())["error"]["param"] == "response_format"
    assert asked == []
    assert "do not read me" not in (await chat.text()) + (await responses.text())


async def test_a_caller_schema_with_a_dangling_reference_is_a_400(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    answer = await service.client.post(
        "/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={
            "model": "bot",
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": _with_ref("#/$defs/missing")},
            },
        },
    )
    body = await answer.json()
    assert answer.status == 400, body
    assert (body["error"]["param"], "points at nothing" in body["error"]["message"]) == (
        "response_format",
        True,
    )
    assert model_server.requests == []
