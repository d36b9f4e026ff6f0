"""Request bodies of the OpenAI-compatible routes (chat completions and responses),
validated at the edge, and the documented shapes of their answers.

Unknown fields are accepted (OpenAI clients send many) and named back in the
``X-Ignored-Fields`` response header; see ``openai_options`` for what each
field does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dynagent.http.api.schemas import Answer, CallerBody, ChatMessage
from dynagent.sessions.scope import MAX_SESSION_ID
from dynagent.spec.tools import TOOL_NAME_PATTERN

MODEL_FIELD = Field(
    min_length=1,
    max_length=200,
    # Documented only: the handler's own check names the variant it does not know.
    json_schema_extra={"pattern": "^[^@]+(@(stable|canary)?)?$"},
)


class _Open(CallerBody):
    """OpenAI bodies: extra fields are kept (to be named as ignored), not refused."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)


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


_SETTING = (
    "Honoured when the agent's model.caller_settings lists it; otherwise ignored and "
    "named in the X-Ignored-Fields response header."
)


class _Sampling(_Open):
    temperature: float | None = Field(default=None, ge=0, le=2, description=_SETTING)
    top_p: float | None = Field(default=None, ge=0, le=1, description=_SETTING)
    seed: int | None = Field(default=None, description=_SETTING)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2, description=_SETTING)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2, description=_SETTING)
    user: str | None = Field(default=None, max_length=256)
    """The canary sticky key when there is no session."""
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    """``session_id`` and ``variables`` (a JSON object as text) may be passed here."""
    session_id: str | None = Field(default=None, min_length=1, max_length=MAX_SESSION_ID)
    """Extra field: continue this Dynagent session."""
    variables: dict[str, str] | None = Field(default=None, max_length=100)
    """Extra field: values for the prompt's ``{{placeholders}}``."""
    tool_choice: (
        Literal["auto", "none", "required"] | Annotated[dict[str, Any], Field(max_length=4)] | None
    ) = None
    """Honoured for the turn's first model call; a named function must be one of ``tools``."""
    parallel_tool_calls: bool | None = None
    """Ignored (the agent's definition decides) and named in X-Ignored-Fields."""


class ChatCompletionRequest(_Sampling):
    """OpenAI ``POST /v1/chat/completions``; ``model`` is the agent name (``name@stable`` /
    ``name@canary`` pin a variant). Fields not listed here are ignored and named in the
    X-Ignored-Fields response header."""

    model: str = MODEL_FIELD
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    """Honoured: a usage chunk ends the stream only with ``include_usage: true``."""
    tools: list[ChatTool] | None = Field(default=None, max_length=128)
    """Client tools: a call to one ends the turn with ``finish_reason: tool_calls``; 400 when
    a name clashes with an agent tool or the agent has ``client_tools: false``."""
    response_format: ResponseFormat | None = None
    """Honoured: validated and retried like an output schema; 400 beside a different
    schema of the agent's own."""
    n: Literal[1] | None = None
    """Only 1: an agent run has one answer (anything else is a 400)."""
    max_tokens: int | None = Field(default=None, gt=0, description=_SETTING)
    max_completion_tokens: int | None = Field(default=None, gt=0, description=_SETTING)
    stop: str | list[str] | None = Field(default=None, description=_SETTING)


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
    """OpenAI ``POST /v1/responses``; ``model`` is the agent name. Fields not listed here
    are ignored and named in the X-Ignored-Fields response header."""

    model: str = MODEL_FIELD
    input: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=1000)]
    )
    instructions: str | None = Field(default=None, max_length=100_000)
    """Added as a system message after the agent's own prompt; not carried over."""
    stream: bool = False
    """Typed events (``response.created`` … ``response.completed``), each numbered."""
    tools: list[ResponseTool] | None = Field(default=None, max_length=128)
    """Client function tools: a call to one ends the turn with a ``function_call`` item."""
    text: TextOptions | None = None
    """``text.format`` json_object / json_schema: validated and retried."""
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=200)
    """Continue the conversation of a stored response made with the same API key."""
    store: bool = True
    """Keep the response (in this process, the last 1,000) for GET and continuations."""
    max_output_tokens: int | None = Field(default=None, gt=0, description=_SETTING)


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    error: OpenAIErrorDetail


class ChatChoice(Answer):
    index: int
    message: dict[str, Any]
    finish_reason: Literal["stop", "tool_calls"]


class ChatCompletion(Answer):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: dict[str, int]


class ModelObject(Answer):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(Answer):
    object: Literal["list"]
    data: list[ModelObject]


class ResponseObject(Answer):
    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "failed", "in_progress", "incomplete"]
    model: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None
    error: dict[str, Any] | None


class ResponseDeleted(Answer):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class ResponseItemList(Answer):
    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
