"""``type: echo``: a tool answering with its ``prefix`` and the text it was given.

An agent definition writes::

    tools:
      - {type: echo, name: shout, prefix: "you said: "}

and its model may then call ``shout`` with ``{"text": "..."}``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dynagent.models import ToolDefinition
from dynagent.spec.agent import AgentSpec
from dynagent.tools import KindContext, Tool, ToolKind

PARAMETERS = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "What to echo."}},
    "required": ["text"],
    "additionalProperties": False,
}


class EchoToolSpec(BaseModel):
    """The entry: validated when the agent definition is (its errors name their field,
    ``tools[shout].prefix``); unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["echo"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    """The tool's name, and the entry's in error paths."""
    prefix: str = Field(default="", max_length=200)
    """Put before the text in every answer."""
    description: str = "Repeats the text it is given."


class EchoKind(ToolKind[EchoToolSpec]):
    type = "echo"
    entry = EchoToolSpec

    def build(
        self, ctx: KindContext, spec: AgentSpec, entry: EchoToolSpec, path: str
    ) -> list[Tool]:
        prefix = entry.prefix

        async def call(arguments: dict[str, Any]) -> str:
            return prefix + str(arguments["text"])

        definition = ToolDefinition(entry.name, entry.description, PARAMETERS)
        return [Tool.of(definition, call, shadow_safe=True)]


KIND = EchoKind()
"""What the entry point names: one kind object (a class made with no arguments works too)."""
