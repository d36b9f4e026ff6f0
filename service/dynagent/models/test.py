"""The offline ``test`` model: schema-valid tool calls, then a schema-valid answer.

Like pydantic-ai's ``TestModel``: it calls every tool once (those ``tool_choice``
allows) with arguments built from the tool's JSON Schema, then answers, so samples run
with no network. Its
arguments and answer show what it was given (``_test_text.py``): the caller's
words, the tools' results and the agent's system prompt.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from dynagent import _regex
from dynagent.events import Usage
from dynagent.models._test_text import Request, answer_text, fitted
from dynagent.models.base import (
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    ToolDefinition,
)

_WORDS = _regex.compile(r"\s*\S+\s*|\s+")
NAME = "test"
"""The name traces and events give the offline model, whatever the definition names."""


@dataclass(frozen=True, slots=True)
class TestModel:
    model_name: str = NAME
    """What the definition names (``gpt-4o-mini`` under ``provider: auto``); the offline
    model answers in its place, as ``test (offline, for gpt-4o-mini)``."""
    call_tools: bool = True

    __test__ = False  # not a pytest test class

    @property
    def name(self) -> str:
        if self.model_name in (NAME, ""):
            return NAME
        return f"{NAME} (offline, for {self.model_name})"

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
        asked = Request.of(request.messages)
        tools = _chosen(request) if self.call_tools and last.get("role") == "user" else ()
        if tools:
            calls = tuple(
                ToolCallRequest(
                    f"call_{i}", tool.name, json.dumps(example(tool.parameters, fill=asked.fill))
                )
                for i, tool in enumerate(tools)
            )
            return ModelResponse(None, calls, usage, self.name)
        content = _answer(request, asked)
        return ModelResponse(content, (), Usage(usage.input_tokens, len(content) // 4), self.name)


def _chosen(request: ModelRequest) -> tuple[ToolDefinition, ...]:
    """The tools the offline model calls, as a model honours ``tool_choice``: all of them
    (``auto``, ``required``), none (``none``), or the one it names."""
    choice = request.tool_choice
    if choice == "none":
        return ()
    if isinstance(choice, dict):
        named = (choice.get("function") or {}).get("name") or choice.get("name")
        return tuple(tool for tool in request.tools if tool.name == named)
    return tuple(request.tools)


def _answer(request: ModelRequest, asked: Request) -> str:
    text = answer_text(asked, request.messages)
    if request.output_schema is None:
        return text

    def fill(schema: dict[str, Any]) -> str | None:
        constrained = ("examples", "enum", "const", "default", "pattern", "format")
        return None if any(key in schema for key in constrained) else fitted(text, schema)

    return json.dumps(example(request.output_schema, fill=fill))


Fill = Callable[[dict[str, Any]], "str | None"]
"""A string for a string schema, or None for its example."""


MAX_ANSWER_SIZE = 100_000
"""Values and characters in one whole example, however its levels nest: three nested
arrays each asking ``minItems: 1000`` would otherwise build 10^9 values (1 GB) from a
227-byte definition. Past it arrays and strings come out short, and the answer fails its
schema (422) instead."""


class _Budget:
    __slots__ = ("fill", "left")

    def __init__(self, left: int, fill: Fill | None = None) -> None:
        self.left = left
        self.fill = fill

    def take(self, wanted: int) -> int:
        granted = max(0, min(wanted, self.left))
        self.left -= max(granted, 1)
        return granted


def example(
    schema: dict[str, Any] | bool, budget: _Budget | None = None, *, fill: Fill | None = None
) -> Any:
    """A value that validates against a (reasonable) JSON Schema, within ``MAX_ANSWER_SIZE``;
    ``fill`` may give a string schema its value."""
    budget = budget or _Budget(MAX_ANSWER_SIZE, fill)
    budget.take(1)
    if isinstance(schema, bool):  # true: anything goes; false: nothing can, give null
        return "example" if schema else None
    if isinstance(schema.get("allOf"), list):  # an agent's schema and a caller's, together
        schema = _merged([{k: v for k, v in schema.items() if k != "allOf"}, *schema["allOf"]])
    preset = _preset(schema, budget)
    if preset:
        return preset[0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example(schema[key][0], budget)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _BY_TYPE.get(kind, lambda s, b: None)(schema, budget)


def _merged(schemas: list[Any]) -> dict[str, Any]:
    """One schema with the properties and requirements of all (the first of each else)."""
    merged: dict[str, Any] = {}
    for part in (p for p in schemas if isinstance(p, dict)):
        for name, value in (part.get("properties") or {}).items():
            properties = merged.setdefault("properties", {})
            properties[name] = _merged([properties[name], value]) if name in properties else value
        if "required" in part:
            required = merged.setdefault("required", [])
            required.extend(n for n in part["required"] if n not in required)
        merged.update({k: v for k, v in part.items() if k not in merged})
    return merged


def _preset(schema: dict[str, Any], budget: _Budget) -> tuple[Any] | tuple[()]:
    """The value a schema gives itself (filled, an example, const, default, enum): ``(value,)``;
    ``()`` when it gives none."""
    if budget.fill is not None and schema.get("type") == "string":
        filled = budget.fill(schema)
        if filled is not None:
            return (filled[: budget.take(len(filled))],)
    if schema.get("examples"):
        return (schema["examples"][0],)
    for key in ("const", "default"):
        if key in schema:
            return (schema[key],)
    if schema.get("enum"):
        return (schema["enum"][0],)
    return ()


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
