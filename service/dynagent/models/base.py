"""What the run loop needs from a model, whatever answers behind it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dynagent.events import Usage

Message = dict[str, Any]
"""A chat message in the OpenAI wire format (role, content, tool_calls, tool_call_id)."""


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What the model sees of a tool: its name, description and argument schema."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call the model asked for; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One chat completion request, as interceptors see and may replace it."""

    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
    parallel_tool_calls: bool = True
    output_schema: dict[str, Any] | None = None
    tool_choice: Any = None
    """OpenAI's ``tool_choice``; None leaves it to the endpoint."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Sampling settings of this call, over the agent's own (a caller's, where allowed)."""


@dataclass(frozen=True, slots=True)
class ModelResponse:
    content: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    priced_as: str = ""
    """The ``model.name`` of the configured model that answered, when it is not the
    agent's own (a fallback): what its price is looked up by."""

    def to_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of answer text, while a streamed response is being received."""

    text: str


StreamItem = TextDelta | ModelResponse
"""A stream yields text deltas, then exactly one complete ``ModelResponse``."""


class Model(Protocol):
    """A chat model. Implementations: ``OpenAIModel``, ``TestModel``, ``FallbackModel``."""

    @property
    def name(self) -> str: ...

    async def request(self, request: ModelRequest) -> ModelResponse: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]: ...


def tool_definitions(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    return [tool.to_openai() for tool in tools]
