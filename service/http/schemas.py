"""Request bodies, validated at the edge (pydantic), and their JSON Schemas for OpenAPI."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ChatMessage(BaseModel):
    """A message in the OpenAI chat format."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, max_length=128)
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class InvokeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | list[ChatMessage] = Field(min_length=1)
    """The user's text, or a list of chat messages."""
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    """Continue this conversation (created on first use)."""
    variables: dict[str, str] = Field(default_factory=dict, max_length=100)
    """Values for the prompt's ``{{placeholders}}``."""
    stream: bool = False
    """Answer with ``text/event-stream`` of the run's events."""


class ChatCompletionRequest(BaseModel):
    """OpenAI ``POST /v1/chat/completions``; ``model`` is the agent name
    (``name@stable`` / ``name@canary`` pin a variant). Sampling fields are
    ignored: the agent's definition decides them."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    user: str | None = Field(default=None, max_length=256)


class InvokeResponse(BaseModel):
    output: Any
    agent: str
    revision: str
    variant: Literal["stable", "canary"]
    trace_id: str
    session_id: str | None
    usage: dict[str, int]
    steps: int


class ErrorResponse(BaseModel):
    error: dict[str, str]
