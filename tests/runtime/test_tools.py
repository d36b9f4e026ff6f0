"""Built-in tools and tools made from code."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from dynagent import Tool, ToolRegistry
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
