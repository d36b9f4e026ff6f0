"""Request bodies of the OpenAI-compatible routes (chat completions and responses),
validated at the edge, and the documented shapes of their answers.

Unknown fields are accepted (OpenAI clients send many) and named back in the
``X-Ignored-Fields`` response header; see ``openai_options`` for what each
field does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..spec import TOOL_NAME_PATTERN
from .schemas import ChatMessage

MODEL_FIELD = Field(
    min_length=1,
    max_length=200,
    # Documented only: the handler's own check names the variant it does not know.
    json_schema_extra={"pattern": "^[^@]+(@(stable|canary)?)?$"},
)


class _Open(BaseModel):
    """OpenAI bodies: extra fields are kept (to be named as ignored), not refused."""

    model_config = ConfigDict(extra="allow")


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(default="", max_length=10_000)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ChatTool(BaseModel):
    """A client tool: the caller runs it when the model calls it."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    function: FunctionSpec


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(default="output", max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    """A JSON Schema (draft 2020-12) the answer must match."""
    strict: bool | None = None


class TextResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object"]


class SchemaResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


ResponseFormat = Annotated[TextResponseFormat | SchemaResponseFormat, Field(discriminator="type")]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class _Sampling(_Open):
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    user: str | None = Field(default=None, max_length=256)
    """The canary sticky key when there is no session."""
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    """``session_id`` and ``variables`` (a JSON object as text) may be passed here."""
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    """Extra field: continue this Dynagent session."""
    variables: dict[str, str] | None = Field(default=None, max_length=100)
    """Extra field: values for the prompt's ``{{placeholders}}``."""
    tool_choice: (
        Literal["auto", "none", "required"] | Annotated[dict[str, Any], Field(max_length=4)] | None
    ) = None
    parallel_tool_calls: bool | None = None


class ChatCompletionRequest(_Sampling):
    """OpenAI ``POST /v1/chat/completions``; ``model`` is the agent name
    (``name@stable`` / ``name@canary`` pin a variant)."""

    model: str = MODEL_FIELD
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ChatTool] | None = Field(default=None, max_length=128)
    response_format: ResponseFormat | None = None
    n: Literal[1] | None = None
    """Only 1: an agent run has one answer."""
    max_tokens: int | None = Field(default=None, gt=0)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    stop: str | list[str] | None = None


class ResponseTool(BaseModel):
    """A client function tool of the Responses API."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = Field(default=None, max_length=10_000)
    parameters: dict[str, Any] | None = None


class SchemaTextFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["json_schema"]
    name: str = Field(default="output", max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: Annotated[TextResponseFormat | SchemaTextFormat, Field(discriminator="type")] | None = (
        None
    )


class ResponsesRequest(_Sampling):
    """OpenAI ``POST /v1/responses``; ``model`` is the agent name."""

    model: str = MODEL_FIELD
    input: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=1000)]
    )
    instructions: str | None = Field(default=None, max_length=100_000)
    """Added as a system message after the agent's own prompt."""
    stream: bool = False
    tools: list[ResponseTool] | None = Field(default=None, max_length=128)
    text: TextOptions | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=200)
    store: bool = True
    max_output_tokens: int | None = Field(default=None, gt=0)


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    error: OpenAIErrorDetail


class ChatChoice(BaseModel):
    index: int
    message: dict[str, Any]
    finish_reason: Literal["stop", "tool_calls"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: dict[str, int]


class ModelObject(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelObject]


class ResponseObject(BaseModel):
    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "failed", "in_progress", "incomplete"]
    model: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None
    error: dict[str, Any] | None
