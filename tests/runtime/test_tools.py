"""Built-in tools and tools made from code."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from dynagent import Tool, ToolRegistry
from dynagent.models import ToolDefinition
from dynagent.spec._schemas import quick_check, validator
from dynagent.tools import CALCULATOR, CURRENT_TIME, calculate


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 + 2 * 3", 8),
        ("(2 + 2) * 3", 12),
        ("7 // 2", 3),
        ("7 % 4", 3),
        ("-3 ** 2", -9),
        ("2 ** 10", 1024),
        ("1 / 4", 0.25),
        ("2 ** -2", 0.25),
        ("9 ** 99 / 9 ** 98", 9.0),
    ],
)
def test_calculator_does_arithmetic(expression: str, value: float) -> None:
    assert calculate(expression) == value


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os').system('id')", "unsupported element Call"),
        ("().__class__", "unsupported element Attribute"),
        ("(1).real", "unsupported element Attribute"),
        ("x + 1", "unsupported element Name"),
        ("'a' * 3", "unsupported element Constant"),
        ("[1, 2]", "unsupported element List"),
        ("lambda: 1", "unsupported element Lambda"),
        ("1 if 1 else 2", "unsupported element IfExp"),
        ("True + 1", "booleans are not numbers here"),
        ("1 < 2", "unsupported element Compare"),
        ("9 ** 9 ** 9", "exponent larger than 100"),
        ("2 ** 1000", "exponent larger than 100"),
        ("10 ** 99 * 10 ** 99", "result out of range"),
        ("1e308 * 10", "result out of range"),
        ("(-8) ** 0.5", "result out of range"),
        ("1 / 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("1 +", "not an arithmetic expression"),
        ("1" + " + 1" * 100, "expression longer than 200 characters"),
    ],
)
def test_calculator_refuses_anything_but_bounded_arithmetic(expression: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        calculate(expression)


async def test_the_calculator_tool_answers_integers_without_a_fraction() -> None:
    assert await CALCULATOR.function({"expression": "10 / 4"}) == "2.5"
    assert await CALCULATOR.function({"expression": "10 / 5"}) == "2"
    assert CALCULATOR.argument_errors({"expression": "1", "code": "x"}) == (
        "Additional properties are not allowed ('code' was unexpected)"
    )


@pytest.mark.parametrize(
    ("zone", "offset"),
    [("Asia/Shanghai", "+08:00"), ("UTC", "+00:00"), ("Asia/Kolkata", "+05:30"), ("", "+00:00")],
)
async def test_current_time_answers_in_the_zone(zone: str, offset: str) -> None:
    arguments = {"timezone": zone} if zone else {}
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)

    text = await CURRENT_TIME.function(arguments)

    moment = dt.datetime.fromisoformat(text)
    assert text.endswith(offset)
    assert before <= moment <= dt.datetime.now(dt.UTC)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", "/etc/localtime"])
async def test_current_time_refuses_unknown_zones(zone: str) -> None:
    with pytest.raises(ValueError, match="unknown IANA time zone"):
        await CURRENT_TIME.function({"timezone": zone})


async def test_tool_from_function_derives_the_schema_from_the_signature() -> None:
    async def forecast(city: str, days: int = 1, metric: bool = True) -> dict[str, Any]:
        """Weather forecast for a city."""
        return {"city": city, "days": days, "metric": metric}

    tool = Tool.from_function(forecast, timeout=3)

    assert (tool.name, tool.definition.description, tool.timeout) == (
        "forecast",
        "Weather forecast for a city.",
        3,
    )
    assert tool.definition.parameters == {
        "type": "object",
        "properties": {
            "city": {"title": "City", "type": "string"},
            "days": {"default": 1, "title": "Days", "type": "integer"},
            "metric": {"default": True, "title": "Metric", "type": "boolean"},
        },
        "required": ["city"],
    }
    assert await tool.function({"city": "Oslo"}) == "{'city': 'Oslo', 'days': 1, 'metric': True}"
    assert tool.argument_errors({"days": 2}) == "'city' is a required property"
    assert (
        tool.argument_errors({"city": "Oslo", "days": "two"})
        == "days: 'two' is not of type 'integer'"
    )


async def test_tool_from_function_keeps_string_results_and_takes_a_name() -> None:
    async def shout(text: str) -> str:
        return text.upper()

    tool = Tool.from_function(shout, name="loud", description="Shout it.")

    assert (tool.name, tool.definition.description) == ("loud", "Shout it.")
    assert await tool.function({"text": "hi"}) == "HI"


def test_the_default_registry_has_the_builtins_and_extra_tools() -> None:
    async def extra() -> str:
        return "x"

    registry = ToolRegistry.default({"extra": Tool.from_function(extra)})

    assert {"calculator", "current_time", "extra"} <= set(registry.names())
    assert registry.get("calculator") is CALCULATOR
    assert registry.get("nope") is None


_SCALAR = st.sampled_from(["string", "integer", "number", "boolean"])
_PROPERTY: st.SearchStrategy[dict[str, str]] = st.one_of(
    st.fixed_dictionaries({"type": _SCALAR}, optional={"title": st.text(max_size=5)}),
    st.just({}),
    st.just({"description": "anything"}),
)
_NAMES = st.sampled_from(["a", "b", "c"])
_SCHEMAS = st.builds(
    lambda properties, required, additional: {
        "type": "object",
        "properties": properties,
        "required": sorted(required),
        **({} if additional is None else {"additionalProperties": additional}),
    },
    st.dictionaries(_NAMES, _PROPERTY, max_size=3),
    st.sets(_NAMES, max_size=3),
    st.one_of(st.none(), st.booleans()),
)
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
)
_NOT_OBJECTS = st.one_of(_VALUES, st.lists(st.integers(), max_size=2))


@st.composite
def _schema_and_arguments(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    """A schema, and arguments mostly made of its own property names (a few others)."""
    schema = draw(_SCHEMAS)
    optional = dict.fromkeys([*schema["properties"], "d"], _VALUES)
    objects = st.fixed_dictionaries({}, optional=optional)
    return schema, draw(st.one_of(objects, objects, objects, _NOT_OBJECTS))


@given(_schema_and_arguments())
@settings(max_examples=500, deadline=None)
def test_the_quick_argument_check_agrees_with_json_schema(case: tuple[Any, Any]) -> None:
    """The quick check stands in for the JSON Schema engine on valid calls: it must never
    pass what the engine refuses, and (floats aside: ``1.0`` is an integer to JSON Schema,
    left to the engine) it passes everything the engine accepts."""
    schema, arguments = case
    quick = quick_check(schema)
    assert quick is not None
    valid = validator(schema).is_valid(arguments)
    assert not quick(arguments) or valid
    if not (isinstance(arguments, dict) and any(type(v) is float for v in arguments.values())):
        assert quick(arguments) == valid


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"type": "object"}}},
        {"type": "object", "properties": {"a": {"enum": ["x"]}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"^x": {}}},
        {"type": "object", "$defs": {}},
        {"type": "array"},
        {},
    ],
)
def test_other_schemas_have_no_quick_check_and_the_engine_decides(schema: Any) -> None:
    assert quick_check(schema) is None
    tool = Tool.of(ToolDefinition("t", "", schema), CALCULATOR.function)
    assert tool.check.quick is None


def test_tool_arguments_are_checked_quickly_and_errors_still_explained() -> None:
    assert CALCULATOR.check.quick is not None
    assert CALCULATOR.check.quick({"expression": "1"})
    assert CALCULATOR.argument_errors({"expression": "1"}) is None
    assert CALCULATOR.argument_errors({"expression": 1}) == "expression: 1 is not of type 'string'"
    assert CALCULATOR.argument_errors([]) == "[] is not of type 'object'"
