"""Built-in tools: ``calculator`` (safe arithmetic, no eval) and ``current_time``."""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import math
import operator
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dynagent.models.base import ToolDefinition
from dynagent.tools.base import Tool

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_MAX_EXPRESSION = 200
_MAX_EXPONENT = 100
_MAX_MAGNITUDE = 1e100


def calculate(expression: str) -> float | int:
    """Evaluate arithmetic (+ - * / // % ** and parentheses) without ``eval``."""
    if len(expression) > _MAX_EXPRESSION:
        raise ValueError(f"expression longer than {_MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    return _evaluate(tree.body)


def _evaluate(node: ast.expr) -> float | int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        if isinstance(node.value, bool):
            raise ValueError("booleans are not numbers here")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))  # type: ignore[no-any-return]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError(f"exponent larger than {_MAX_EXPONENT}")
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        if isinstance(value, complex) or abs(value) > _MAX_MAGNITUDE or math.isnan(value):
            raise ValueError("result out of range")
        return value  # type: ignore[no-any-return]
    raise ValueError(f"unsupported element {type(node).__name__}: only numbers and + - * / // % **")


async def _calculator(arguments: dict[str, Any]) -> str:
    value = calculate(str(arguments["expression"]))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


async def _current_time(arguments: dict[str, Any]) -> str:
    zone_name = arguments.get("timezone") or "UTC"
    try:
        zone = await asyncio.to_thread(ZoneInfo, zone_name)  # reads the zone's file once
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown IANA time zone {zone_name!r}, e.g. 'Europe/Berlin'") from None
    return dt.datetime.now(zone).isoformat(timespec="seconds")


CALCULATOR = Tool.of(
    ToolDefinition(
        "calculator",
        "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses.",
        {
            "type": "object",
            "properties": {"expression": {"type": "string", "examples": ["2 + 2 * 3"]}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    ),
    _calculator,
    timeout=5,
    shadow_safe=True,  # no effect outside the run: shadow and evaluation runs use it
    idempotent=True,  # arithmetic: the same answer every time
)

CURRENT_TIME = Tool.of(
    ToolDefinition(
        "current_time",
        "The current date and time in ISO 8601, in an IANA time zone (default UTC).",
        {
            "type": "object",
            "properties": {"timezone": {"type": "string", "examples": ["UTC"]}},
            "required": [],
            "additionalProperties": False,
        },
    ),
    _current_time,
    timeout=5,
    shadow_safe=True,
    idempotent=True,  # reads the clock, changes nothing
)

BUILTIN_TOOLS = (CALCULATOR, CURRENT_TIME)
