"""Tools: what the model sees (a definition) apart from how they run (timeout, policy)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import jsonschema
from pydantic import create_model

from dynagent.models.base import ToolDefinition
from dynagent.spec._schemas import quick_check, validator

ToolFunction = Callable[[dict[str, Any]], Awaitable[str]]
"""Runs a tool with validated arguments and returns what the model sees."""


@dataclass(frozen=True, slots=True)
class ArgumentCheck:
    """A tool's argument schema, compiled once, when the tool is made (``Tool.of``)."""

    validator: jsonschema.Draft202012Validator
    quick: Callable[[Any], bool] | None
    """True for arguments ``validator`` surely accepts (``_schemas.quick_check``), so that a
    valid call skips the JSON Schema engine; None when the schema has no such test."""

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> ArgumentCheck:
        return cls(validator(schema), quick_check(schema))

    def errors(self, arguments: Any) -> str | None:
        """A one-line description of what is wrong with ``arguments``, or None."""
        if self.quick is not None and self.quick(arguments):
            return None
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return f"{where}: {error.message}" if where else error.message


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool; make one with ``Tool.of`` (or ``Tool.from_function``), which compiles its
    argument schema, and change one with ``dataclasses.replace`` or ``with_options``."""

    definition: ToolDefinition
    function: ToolFunction = field(repr=False)
    check: ArgumentCheck = field(repr=False, compare=False)
    """``definition.parameters``, compiled."""
    timeout: float = 30.0
    """Seconds before the call counts as failed."""
    on_error: Literal["report", "fail"] = "report"
    """``report``: the model sees ``TOOL_ERROR: …`` and may recover; ``fail``: the run ends."""
    shadow_safe: bool = False
    """Runs in shadow traffic too (``rollout.shadow``): it has no effect outside the run
    (reads only). Others get a placeholder result there and never execute."""
    idempotent: bool = False
    """Calling it twice with the same arguments does what calling it once does (a read, a
    PUT, a DELETE), so the ``retry`` interceptor may send again a call that failed on the
    way (a transient ``ToolCallError``). False: a call is never repeated, since the first
    may have taken effect (an order placed, a card charged) before its answer was lost."""
    holds: tuple[Hashable, ...] = field(default=(), compare=False)
    """What the tool keeps open while an agent that has it serves (an MCP server's
    session): its feature lets go of what no served agent's tools hold any more."""

    @classmethod
    def of(
        cls,
        definition: ToolDefinition,
        function: ToolFunction,
        *,
        timeout: float = 30.0,
        on_error: Literal["report", "fail"] = "report",
        shadow_safe: bool = False,
        idempotent: bool = False,
        holds: tuple[Hashable, ...] = (),
    ) -> Tool:
        """The tool ``definition`` describes, run by ``function``; ``ValueError`` for a
        schema pattern RE2 cannot run."""
        check = ArgumentCheck.of(definition.parameters)
        return cls(definition, function, check, timeout, on_error, shadow_safe, idempotent, holds)

    @property
    def name(self) -> str:
        return self.definition.name

    def with_options(self, *, timeout: float | None, on_error: str | None) -> Tool:
        return replace(
            self,
            timeout=self.timeout if timeout is None else timeout,
            on_error=self.on_error if on_error is None else on_error,  # type: ignore[arg-type]
        )

    def argument_errors(self, arguments: Any) -> str | None:
        """A one-line description of what is wrong with ``arguments``, or None."""
        return self.check.errors(arguments)

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Awaitable[Any]],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float = 30.0,
        idempotent: bool = False,
    ) -> Tool:
        """Make a tool of an async function; its typed signature becomes the schema.
        ``idempotent``: the ``retry`` interceptor may repeat a call (see ``Tool.idempotent``)."""
        params = {
            p.name: (
                p.annotation if p.annotation is not inspect.Parameter.empty else Any,
                ... if p.default is inspect.Parameter.empty else p.default,
            )
            for p in inspect.signature(function).parameters.values()
        }
        arguments_model = create_model(f"{function.__name__}_args", **params)  # type: ignore[call-overload]
        schema = arguments_model.model_json_schema()
        schema.pop("title", None)

        async def call(arguments: dict[str, Any]) -> str:
            result = await function(**arguments_model.model_validate(arguments).model_dump())
            return result if isinstance(result, str) else str(result)

        definition = ToolDefinition(
            name or function.__name__, description or inspect.getdoc(function) or "", schema
        )
        return cls.of(definition, call, timeout=timeout, idempotent=idempotent)
