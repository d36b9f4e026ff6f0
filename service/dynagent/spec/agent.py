"""AgentSpec: the one validated shape of an agent definition.

Documents from files and from Nacos are parsed and validated here, once. Every
error names the field path. Nothing in a spec names Python code: tools and
interceptors are referenced by registered name only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.spec._documents import (
    MAX_DEPTH,
    SAFE_LOADER,
    DocumentRefused,
    check_text,
    check_values,
    check_yaml_events,
    yaml_problem,
)
from dynagent.spec._issues import describe
from dynagent.spec._schemas import check_schema
from dynagent.spec.tools import TOOL_NAME_PATTERN, ToolEntry, tool_entry_name

NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$"
"""Agent and tool names: lowercase letters, digits and dashes (tools may use ``_``)."""

Format = Literal["yaml", "json"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSettings(_Strict):
    """Sampling settings passed to the chat completions call."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, gt=0)
    seed: int | None = None
    stop: list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)


Provider = Literal["openai", "test", "auto"]


class CircuitBreakerSpec(_Strict):
    """Fail fast while a model endpoint keeps failing, instead of waiting on it each time.

    The record is kept per endpoint (``base_url`` and ``name``) and shared by every
    agent on it, across rebuilds; each agent applies its own thresholds to it.
    """

    enabled: bool = True
    failures: int = Field(default=5, ge=1, le=1000)
    """Consecutive failed calls (each retry counts; 4xx answers do not) that open it."""
    cooldown: float = Field(default=30, gt=0, le=3600)
    """Seconds it fails fast (502 ``circuit_open``) before one trial call goes through."""


class FallbackModelSpec(_Strict):
    """A model endpoint. ``${VAR}`` in ``base_url`` and ``api_key`` come from the environment."""

    provider: Provider = "auto"
    """``openai``: any OpenAI-compatible endpoint; ``test``: the offline model;
    ``auto``: ``openai`` when ``OPENAI_BASE_URL`` or ``OPENAI_API_KEY`` is set, else ``test``."""
    name: str = Field(default="gpt-4o-mini", min_length=1)
    base_url: str = "${OPENAI_BASE_URL:-https://api.openai.com/v1}"
    api_key: str = "${OPENAI_API_KEY:-}"
    settings: ModelSettings = ModelSettings()
    timeout: float = Field(default=30, gt=0, le=600)
    """Seconds per model call."""
    retries: int = Field(default=2, ge=0, le=10)
    """Retries on 429, 5xx and timeouts, with exponential backoff."""
    structured_output: bool = True
    """Ask the endpoint for JSON-schema output when the agent has an output schema."""
    circuit_breaker: CircuitBreakerSpec = CircuitBreakerSpec()
    max_answer_chunks: int = Field(default=150_000, ge=1, le=10_000_000)
    """Chunks one streamed answer may hold (a model writes about one per token; the
    largest output limits are ~128k tokens): past it the call is a ``model_error``.
    Every chunk costs CPU, whatever it holds (~4 us in the service)."""
    max_answer_chars: int = Field(default=8_000_000, ge=1, le=1_000_000_000)
    """Characters of text and tool-call arguments one streamed answer may hold; a whole
    (not streamed) answer's body may hold 6 bytes for each, and 1 MiB more."""


CallerSetting = Literal[
    "temperature", "top_p", "max_tokens", "seed", "stop", "presence_penalty", "frequency_penalty"
]


class ModelSpec(FallbackModelSpec):
    fallback: FallbackModelSpec | None = None
    """Used when the primary model still fails after its retries."""
    caller_settings: list[CallerSetting] = []
    """Sampling settings a caller may set per request (OpenAI routes); others are ignored."""


class PromptRef(_Strict):
    """A prompt kept in Nacos (prompt registry key, or a plain config)."""

    key: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    label: str | None = None
    version: str | None = None


class PromptSpec(_Strict):
    system: str | None = None
    """System prompt; ``{{var}}`` placeholders are filled from ``variables``."""
    variables: dict[str, str] = {}
    """Defaults for the placeholders; callers may override them per request."""
    ref: PromptRef | None = None
    """For the prompt-only factory: where in Nacos the system prompt lives."""

    @model_validator(mode="after")
    def _one_source(self) -> PromptSpec:
        if self.system is None and self.ref is None:
            raise ValueError("give the system prompt as 'system' or a Nacos reference as 'ref'")
        return self


class InterceptorRef(_Strict):
    """A registered interceptor and its settings (checked when the agent is built)."""

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    config: dict[str, Any] = {}


InterceptorEntry = (
    Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
    | Annotated[dict[str, dict[str, Any] | None], Field(min_length=1, max_length=1)]
    | InterceptorRef
)
"""What a document may write: a name, ``{name: config}``, or ``{name, config}``."""


def _interceptor_entry(value: Any) -> Any:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, Mapping) and len(value) == 1 and "name" not in value:
        ((name, config),) = value.items()
        return {"name": name, "config": {} if config is None else config}
    return value


class OutputSpec(_Strict):
    schema_: dict[str, Any] = Field(alias="schema")
    """JSON Schema the final answer must match."""
    retries: int = Field(default=2, ge=0, le=10)
    """How many times an invalid answer goes back to the model."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_schema(value)
        return value


class Limits(_Strict):
    max_steps: int = Field(default=8, ge=1, le=100)
    """Model calls per run."""
    timeout: float = Field(default=60, gt=0, le=3600)
    """Seconds per run."""
    max_depth: int = Field(default=3, ge=1, le=10)
    """How many agents deep a chain of agent tools may reach, this agent included."""
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """US dollars one run may spend on model calls (``models.prices`` of the service
    config): no model call starts once the run has spent it, and a call that takes the
    run past it ends the run (``cost_limit``). The model, and its fallback, need a price."""


class AgentSpec(_Strict):
    """An agent definition: model, prompt, tools, interceptors, output schema, limits."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    model: ModelSpec = ModelSpec()
    prompt: PromptSpec
    tools: list[ToolEntry] = []
    interceptors: list[InterceptorRef] = []
    output: OutputSpec | None = None
    limits: Limits = Limits()
    parallel_tool_calls: bool = True
    client_tools: bool = True
    """Whether callers may offer tools of their own (OpenAI ``tools``), which they execute."""

    @field_validator("interceptors", mode="before", json_schema_input_type=list[InterceptorEntry])
    @classmethod
    def _interceptor_shorthand(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [_interceptor_entry(item) for item in value]
        return value

    @model_validator(mode="after")
    def _unique_tools(self) -> AgentSpec:
        names = [tool_entry_name(entry) for entry in self.tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tools listed twice: {', '.join(duplicates)}")
        return self

    @property
    def revision(self) -> str:
        """Content hash of the definition: equal specs share a revision."""
        return spec_revision(self.model_dump(mode="json", by_alias=True))


def spec_revision(document: Mapping[str, Any]) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _check_json_schema(value: dict[str, Any]) -> None:
    check_schema(value)


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc).replace("schema_", "schema")


def issues_from(
    error: ValidationError, model: type[BaseModel] | None = None, data: Any = None
) -> list[FieldIssue]:
    """Field-path issues from a pydantic error. For a document an author wrote (``model``
    and its ``data`` given), in the author's terms (``_issues``): list entries by name
    or position from 1, unknown fields with the field likely meant."""
    if model is not None:
        return describe(error, model, data)
    return [
        FieldIssue(_path(tuple(item["loc"])), item["msg"])
        for item in error.errors(include_url=False)
    ]


def parse_document(text: str, fmt: Format = "yaml") -> Any:
    """Parse YAML (safe: no object tags) or JSON text within the bounds of
    ``_documents`` (size, nesting, alias expansion); raises ``ConfigError``."""
    try:
        check_text(text)
        if fmt == "json":
            data = json.loads(text)
        else:
            check_yaml_events(text)
            data = yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 (a safe loader)
        check_values(data)
    except DocumentRefused as exc:
        raise ConfigError(f"document refused: {exc}") from None
    except RecursionError:
        raise ConfigError(
            f"document refused: the document nests deeper than {MAX_DEPTH} levels"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {yaml_problem(text, exc)}".replace("\n", " ")) from None
    except ValueError as exc:
        raise ConfigError(f"not valid {fmt.upper()}: {exc}".replace("\n", " ")) from None
    return data


def load_spec(
    document: str | Mapping[str, Any], *, fmt: Format = "yaml", source: str = ""
) -> AgentSpec:
    """Parse and validate one agent definition (text or mapping)."""
    data = parse_document(document, fmt) if isinstance(document, str) else document
    if not isinstance(data, Mapping):
        raise ConfigError("an agent definition must be a mapping of fields", source=source)
    agent = str(data.get("name", "")) if isinstance(data.get("name"), str) else ""
    try:
        return AgentSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(
            "invalid agent definition",
            source=source,
            agent=agent,
            issues=issues_from(exc, AgentSpec, data),
        ) from None


def format_of(filename: str) -> Format:
    return "json" if filename.lower().endswith(".json") else "yaml"


def json_schema() -> dict[str, Any]:
    """The AgentSpec JSON Schema, for editors and console users."""
    schema = AgentSpec.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Dynagent AgentSpec"
    return schema
