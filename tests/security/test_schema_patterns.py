"""A caller's schema costs bounded work: its patterns are compiled by RE2 within a size
and a memory bound, and kept in a cache bounded in bytes. A schema the service cannot
use — a pattern RE2 refuses, one too long or too large, too many together, a reference
to nothing or round a loop that validation would never leave — is a 400 naming the
field, on every route that takes one, never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dynagent.spec import _schemas
from dynagent.spec._schemas import check_schema, validator
from tests.support import ScriptedModelServer
from tests.support.caller_schema import post_caller_schema
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

KEY = "schema-patterns-test-key-aaaa"


def _string(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}


UNUSABLE: dict[str, tuple[dict[str, Any], str]] = {
    "lookahead": (_string("(?=a)b"), "is not supported"),
    "backreference": (_string(r"(a)\1"), "is not supported"),
    "80,000 branches": (_string("|".join(f"w{i}x" for i in range(80_000))), "longer than"),
    "nested 3,000 deep": (_string("(" * 3000 + ")" * 3000), "longer than"),
    "too large for RE2": (_string(r"\pL{1000}"), "pattern too large"),
    "too large together": (
        {
            "type": "object",
            "properties": {
                f"p{i}": {"type": "string", "pattern": f"[^a]{{{990 + i}}}"} for i in range(9)
            },
        },
        "too large together",
    ),
    "a property name pattern": (
        {"type": "object", "patternProperties": {"(?<=x)y": {}}},
        "is not supported",
    ),
    "a dangling reference": ({"$ref": "#/$defs/missing"}, "points at nothing"),
    "a reference to itself": ({"$ref": "#"}, "loop"),
    "references round a loop": (
        {
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#a"}}},
            "properties": {"x": {"$anchor": "a", "$ref": "#/$defs/a"}},
        },
        "loop",
    ),
}

DESCENDING: dict[str, dict[str, Any]] = {
    "a tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
    },
    "one definition used twice": {
        "$defs": {"s": {"type": "string"}},
        "allOf": [{"$ref": "#/$defs/s"}, {"$ref": "#/$defs/s"}],
    },
}


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server, system="Be brief."))
    environ = {"DYNAGENT_API_KEYS": KEY}
    async with running_service(service_config(agents_dir, state_dir), environ=environ) as running:
        yield running


@pytest.mark.parametrize("kind", UNUSABLE)
async def test_a_caller_schema_the_service_cannot_use_is_a_400_naming_response_format(
    kind: str, service: RunningService, model_server: ScriptedModelServer
) -> None:
    schema, reason = UNUSABLE[kind]
    chat, responses = await post_caller_schema(service, KEY, schema)
    answers = [(chat.status, await chat.json()), (responses.status, await responses.json())]
    assert [
        (status, body["error"]["type"], body["error"]["param"], reason in body["error"]["message"])
        for status, body in answers
    ] == [(400, "invalid_request_error", "response_format", True)] * 2, answers
    assert model_server.requests == []


async def test_a_caller_schema_holding_text_that_is_not_unicode_is_a_400_naming_where(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    # A lone surrogate is refused with the body, whatever field holds it: the path says
    # it is the schema's pattern.
    chat, responses = await post_caller_schema(service, KEY, _string("\ud800"))
    answers = [(chat.status, await chat.json()), (responses.status, await responses.json())]
    assert [(status, body["error"]["param"]) for status, body in answers] == [
        (400, "response_format.json_schema.schema.properties.a.pattern"),
        (400, "text.format.schema.properties.a.pattern"),
    ], answers
    for _, body in answers:
        assert body["error"]["message"].endswith("holds '\\ud800', which is not valid Unicode")
    assert model_server.requests == []


async def test_the_invoke_route_takes_no_caller_schema_and_says_so(
    service: RunningService,
) -> None:
    answer = await service.client.post(
        "/v1/agents/bot/invoke",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"input": "hi", "response_format": UNUSABLE["lookahead"][0]},
    )
    body = await answer.json()
    assert (
        answer.status,
        body["error"]["type"],
        "response_format" in body["error"]["message"],
    ) == (
        400,
        "bad_request",
        True,
    ), body


@pytest.mark.parametrize("kind", DESCENDING)
def test_a_recursive_schema_that_descends_into_the_value_is_accepted(kind: str) -> None:
    schema = DESCENDING[kind]
    check_schema(schema)
    value = {"kids": [{"kids": []}]} if kind == "a tree" else "text"
    assert list(validator(schema).iter_errors(value)) == []


def _resident() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * 4096


def test_distinct_caller_patterns_keep_at_most_the_cache_budget() -> None:
    """Each pattern is short, but its program (~3,000 instructions) and the matching
    caches RE2 grows for it held megabytes; a cache bounded by count kept 512 of them."""
    text = "abcdefghij" * 1000
    before = _resident()
    for index in range(100):
        schema = _string(f"((a|b|c){{100}}){{10}}x{index}")
        check_schema(schema)
        assert list(validator(schema).iter_errors({"a": text}))  # it does not match
    grown = _resident() - before
    assert _schemas._CACHE.held <= _schemas.CACHE_BYTES
    assert grown < _schemas.CACHE_BYTES, grown
