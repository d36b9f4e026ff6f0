"""An agent's output schema joined with a caller's: both hold, references included, and
only structures that cannot both hold are refused."""

from __future__ import annotations

from typing import Any

import pytest

from dynagent.runtime._schema_pair import clash, joined
from dynagent.spec._schemas import validator

OWN: Any = {
    "type": "object",
    "properties": {"item": {"$ref": "#/$defs/Item"}},
    "required": ["item"],
    "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}},
}
ASKED: Any = {
    "type": "object",
    "properties": {"item": {"$ref": "#/$defs/Thing"}},
    "required": ["item"],
    "$defs": {"Thing": {"type": "object", "required": ["qty"]}},
}


def test_both_schemas_hold_with_their_own_references() -> None:
    both = joined(OWN, ASKED)
    assert both is not None
    check = validator(both)
    assert check.is_valid({"item": {"sku": "a", "qty": 1}})
    assert not check.is_valid({"item": {"sku": "a"}})  # the caller's Thing needs qty
    assert not check.is_valid({"item": {"sku": 1, "qty": 1}})  # the agent's Item: sku text


def test_json_object_and_the_same_schema_are_the_agents_own() -> None:
    same: Any = dict(OWN)
    assert joined(OWN, {"type": "object"}) is OWN
    assert joined(OWN, same) is OWN
    assert joined(None, ASKED) is ASKED


CLASHES = {
    "types": ({"type": "string"}, {"type": "array"}, "at / the agent answers string"),
    "enums": ({"enum": ["a"]}, {"enum": ["b"]}, "at / the agent answers one of ['a']"),
    "nested": (
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        {"type": "object", "properties": {"n": {"type": "boolean"}}},
        "at /n the agent answers integer; the request asks for boolean",
    ),
}


@pytest.mark.parametrize(("own", "asked", "why"), CLASHES.values(), ids=CLASHES.keys())
def test_schemas_that_cannot_both_hold_clash(own: Any, asked: Any, why: str) -> None:
    found = clash(own, asked)
    assert found is not None and found.startswith(why), found


def test_compatible_schemas_do_not_clash() -> None:
    assert clash({"type": "number"}, {"type": "integer"}) is None
    optional = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert clash(optional, {"type": "object", "properties": {"n": {"type": "string"}}}) is None
    assert clash(OWN, ASKED) is None
