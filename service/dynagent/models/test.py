"""The offline ``test`` model: schema-valid tool calls, then a schema-valid answer.

Like pydantic-ai's ``TestModel``: it calls every tool once with arguments built
from the tool's JSON Schema, then answers, so samples run with no network.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from dynagent import _regex
from dynagent.events import Usage
from dynagent.models.base import (
    Message,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
    ToolCallRequest,
)

_WORDS = _regex.compile(r"\s*\S+\s*|\s+")


@dataclass(frozen=True, slots=True)
class TestModel:
    model_name: str = "test"
    call_tools: bool = True

    __test__ = False  # not a pytest test class

    @property
    def name(self) -> str:
        return self.model_name

    async def request(self, request: ModelRequest) -> ModelResponse:
        return self._respond(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        response = self._respond(request)
        if response.content:  # words that join back to the content, byte for byte
            for match in _WORDS.finditer(response.content):
                word = match.group(0) or ""
                yield TextDelta(word)
        yield response

    def _respond(self, request: ModelRequest) -> ModelResponse:
        usage = Usage(sum(len(str(m.get("content") or "")) for m in request.messages) // 4, 0)
        last = request.messages[-1] if request.messages else {}
        if self.call_tools and request.tools and last.get("role") == "user":
            calls = tuple(
                ToolCallRequest(f"call_{i}", tool.name, json.dumps(example(tool.parameters)))
                for i, tool in enumerate(request.tools)
            )
            return ModelResponse(None, calls, usage, self.model_name)
        content = _answer(request)
        return ModelResponse(
            content, (), Usage(usage.input_tokens, len(content) // 4), self.model_name
        )


def _answer(request: ModelRequest) -> str:
    if request.output_schema is not None:
        return json.dumps(example(request.output_schema))
    results = [m for m in request.messages if m.get("role") == "tool"]
    if results:
        return "Tool results: " + "; ".join(str(m.get("content")) for m in results[-8:])
    user = next((m for m in reversed(request.messages) if m.get("role") == "user"), None)
    return f"[test model] you said: {_text(user)}" if user else "[test model] hello"


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


MAX_ANSWER_SIZE = 100_000
"""Values and characters in one whole example, however its levels nest: three nested
arrays each asking ``minItems: 1000`` would otherwise build 10^9 values (1 GB) from a
227-byte definition. Past it arrays and strings come out short, and the answer fails its
schema (422) instead."""


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self, wanted: int) -> int:
        granted = max(0, min(wanted, self.left))
        self.left -= max(granted, 1)
        return granted


def example(schema: dict[str, Any] | bool, budget: _Budget | None = None) -> Any:
    """A value that validates against a (reasonable) JSON Schema, within ``MAX_ANSWER_SIZE``."""
    budget = budget or _Budget(MAX_ANSWER_SIZE)
    budget.take(1)
    if isinstance(schema, bool):  # true: anything goes; false: nothing can, give null
        return "example" if schema else None
    if schema.get("examples"):
        return schema["examples"][0]
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example(schema[key][0], budget)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _BY_TYPE.get(kind, lambda s, b: None)(schema, budget)


def _object(schema: dict[str, Any], budget: _Budget) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    required = schema.get("required", list(properties))
    return {name: example(properties.get(name, {}), budget) for name in required}


MAX_EXAMPLE_SIZE = 1000
"""A schema may ask for more (minLength, minItems); the answer then fails it (422) instead of
the offline model building gigabytes for a hostile definition."""


def _string(schema: dict[str, Any], budget: _Budget) -> str:
    if "minLength" not in schema:
        return "example"
    return "a" * budget.take(min(max(int(schema["minLength"]), 1), MAX_EXAMPLE_SIZE))


def _number(schema: dict[str, Any], budget: _Budget) -> float | int:
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    value = low + 1 if "exclusiveMinimum" in schema else low
    return int(value) if schema.get("type") == "integer" else value


def _array(schema: dict[str, Any], budget: _Budget) -> list[Any]:
    count = min(int(schema.get("minItems", 1)), MAX_EXAMPLE_SIZE)
    items: list[Any] = []
    while len(items) < count and budget.left > 0:
        items.append(example(schema.get("items", {"type": "string"}), budget))
    return items


_BY_TYPE: dict[str, Any] = {
    "object": _object,
    "string": _string,
    "integer": _number,
    "number": _number,
    "boolean": lambda s, b: True,
    "array": _array,
    "null": lambda s, b: None,
}
