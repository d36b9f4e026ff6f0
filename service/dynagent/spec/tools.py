"""The ``tools`` entries of an AgentSpec.

An entry is a registered tool's name (``- calculator``), a reference to one with
options (``{name, timeout, on_error}``, ``type: ref`` or no ``type``), or an entry
of a tool kind (``type: http``, ``mcp``, ``agent``, or a plugin's): those are
validated with the model of the kind their ``type`` names (``kinds``), so that a
kind's entry lives with the kind and the spec knows none of them by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from dynagent.spec.kinds import registered, unknown_type

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"

ErrorPolicy = Literal["report", "fail"]

HOST_PATTERN = r"^(\*\.)?[A-Za-z0-9._:%-]{1,253}$"
"""A host name, an IP address, or ``*.example.com`` for the names under it."""


class OutboundFields(BaseModel):
    """Where a tool that reaches a server by URL may connect (``runtime.outbound``): the
    same two fields on every kind that opens connections (MCP, remote agents)."""

    allow_hosts: list[Annotated[str, Field(pattern=HOST_PATTERN)]] | None = Field(
        default=None, min_length=1
    )
    """Hosts it may connect to: exact names, or ``*.example.com``. Absent: the host of
    its ``url`` only (for one found through a registry: the hosts the registry names)."""
    allow_private: bool = False
    """Allow loopback and private addresses (off: protects against SSRF)."""


class ToolRef(BaseModel):
    """A registered tool, with execution options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["ref"] = "ref"
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    timeout: float | None = Field(default=None, gt=0, le=600)
    on_error: ErrorPolicy | None = None
    """``report`` hands ``TOOL_ERROR: …`` to the model; ``fail`` ends the run."""
    shadow_safe: bool | None = None
    """Override whether the tool runs in shadow traffic (default: as registered)."""


class KindEntry(Protocol):
    """An entry of a tool kind, as parsed: its kind's model, with a ``type`` and a ``name``."""

    @property
    def type(self) -> str: ...

    @property
    def name(self) -> str: ...


ToolSpec = str | KindEntry
"""One entry of ``tools``, as parsed: a name, a ``ToolRef``, or a kind's entry."""


def tool_entry_name(entry: ToolSpec) -> str:
    return entry if isinstance(entry, str) else entry.name


def entry_type(entry: ToolSpec) -> str:
    """The kind of a parsed entry: ``ref`` for names and references."""
    return "ref" if isinstance(entry, str) else entry.type


_NAME: TypeAdapter[str] = TypeAdapter(Annotated[str, Field(pattern=TOOL_NAME_PATTERN)])


def _validate(value: Any) -> Any:
    """An entry of ``tools``: dispatched on its ``type`` (a name or a reference without
    one is a ``ToolRef``). A kind's errors keep their own locations in the entry."""
    if isinstance(value, str):
        return _NAME.validate_python(value)
    kind = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    if not isinstance(kind, str) or kind == "ref":
        return ToolRef.model_validate(value)
    kinds = registered()
    found = kinds.get(kind)
    if found is None:
        error = PydanticCustomError("unknown_tool_type", unknown_type(kind, kinds))
        raise ValidationError.from_exception_data(
            "tool entry", [{"type": error, "loc": ("type",), "input": kind}]
        )
    return found.entry.model_validate(value)


class ToolEntries:
    """The annotation of one ``tools`` entry: validated by ``_validate``; its JSON Schema
    is one of a name, a ``ToolRef`` and the entry of every registered kind."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(_validate)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # The generator itself, where pydantic exposes it, files the models under $defs
        # and answers with a $ref; the handler alone writes each one out in place.
        generate = getattr(getattr(handler, "generate_json_schema", None), "generate_inner", None)
        of = generate if callable(generate) else handler
        choices = [{"type": "string", "pattern": TOOL_NAME_PATTERN}]
        choices += [of(model.__pydantic_core_schema__) for model in self.models()]
        return {"oneOf": choices}

    @staticmethod
    def models() -> list[type[BaseModel]]:
        """The models an entry may be validated with (``_issues`` lists their fields)."""
        kinds = [kind.entry for kind in registered() if kind.entry is not ToolRef]
        return [ToolRef, *kinds]


ToolEntry = Annotated[ToolSpec, ToolEntries()]
