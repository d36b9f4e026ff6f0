"""Interceptors wrap model calls and tool calls with one hook vocabulary.

``before_*`` may replace the request, ``after_*`` the result, ``wrap_*`` runs
around the call (and may retry or short-circuit it), ``on_*_error`` may turn an
error into a result. Interceptors are shared by every run of an agent, so
per-run state lives in ``RunContext.state``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from dynagent.events import Event, Usage
from dynagent.models.base import ModelRequest, ModelResponse, ToolCallRequest
from dynagent.tools.base import Tool


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutcome:
    output: str
    is_error: bool = False


@dataclasses.dataclass(slots=True)
class RunContext:
    """What one run knows about itself; handed to every hook."""

    trace_id: str
    agent: str
    revision: str
    variables: dict[str, str]
    session_id: str | None = None
    system: str | None = None
    """The system prompt with its variables filled."""
    model_calls: int = 0
    tool_calls: int = 0
    usage: Usage = dataclasses.field(default_factory=Usage)
    """Tokens the run's model calls have used so far (what a failed run reports, too)."""
    cost_usd: float | None = 0.0
    """What they cost so far (``models.prices``); None once a model without a price ran."""
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Per-run scratch space for interceptors, keyed by their own choice of name."""
    redactors: list[Callable[[str], str]] = dataclasses.field(default_factory=list)
    """Applied to text in events before they reach traces and logs."""
    pii_masked: dict[str, str] = dataclasses.field(default_factory=dict)
    """Long texts ``pii_redaction`` has masked in this run, by the original: the history
    goes to the model again at every step, and each is masked once."""
    emit: Callable[[Event], None] = lambda event: None
    session_key: str | None = None
    """The store's key of the session when it is not ``session_id`` itself: the service
    scopes it to the caller and the agent (``sessions/scope.py``)."""
    tools: Mapping[str, Tool] = dataclasses.field(default_factory=dict)
    """The agent's tools by name: what a hook may know of the tool a call names (e.g.
    whether it is ``idempotent``)."""

    def redact(self, text: str) -> str:
        return redact_with(self.redactors, text)


def redact_with(redactors: Sequence[Callable[[str], str]], text: str) -> str:
    """``text`` through each of ``redactors`` in turn."""
    for redactor in redactors:
        text = redactor(text)
    return text


ModelHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolOutcome]]


class Interceptor:
    """No-op hooks; subclasses override what they need."""

    name: str = "interceptor"
    tools: Sequence[Tool] = ()
    """Tools this interceptor contributes; they come before the agent's own."""

    async def before_run(self, ctx: RunContext) -> None:
        return None

    async def before_model(self, ctx: RunContext, request: ModelRequest) -> ModelRequest:
        return request

    async def after_model(self, ctx: RunContext, response: ModelResponse) -> ModelResponse:
        return response

    async def wrap_model(
        self, ctx: RunContext, request: ModelRequest, call: ModelHandler
    ) -> ModelResponse:
        return await call(request)

    async def on_model_error(
        self, ctx: RunContext, request: ModelRequest, error: Exception
    ) -> ModelResponse | None:
        return None

    async def before_tool(self, ctx: RunContext, call: ToolCallRequest) -> ToolCallRequest:
        return call

    async def after_tool(
        self, ctx: RunContext, call: ToolCallRequest, outcome: ToolOutcome
    ) -> ToolOutcome:
        return outcome

    async def wrap_tool(
        self, ctx: RunContext, call: ToolCallRequest, handler: ToolHandler
    ) -> ToolOutcome:
        return await handler(call)

    async def on_tool_error(
        self, ctx: RunContext, call: ToolCallRequest, error: Exception
    ) -> ToolOutcome | None:
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class InterceptorChain:
    """Runs hooks in order: ``before_*`` first to last, ``after_*`` last to first,
    ``wrap_*`` with the first interceptor outermost."""

    interceptors: tuple[Interceptor, ...] = ()

    async def before_run(self, ctx: RunContext) -> None:
        for interceptor in self.interceptors:
            await interceptor.before_run(ctx)

    async def call_model(
        self, ctx: RunContext, request: ModelRequest, handler: ModelHandler
    ) -> ModelResponse:
        if not self.interceptors:
            return await handler(request)
        for interceptor in self.interceptors:
            request = await interceptor.before_model(ctx, request)
        call = handler
        for interceptor in reversed(self.interceptors):
            call = _bind_model(interceptor, ctx, call)
        try:
            response = await call(request)
        except Exception as error:
            response = await self._recover_model(ctx, request, error)
        for interceptor in reversed(self.interceptors):
            response = await interceptor.after_model(ctx, response)
        return response

    async def _recover_model(
        self, ctx: RunContext, request: ModelRequest, error: Exception
    ) -> ModelResponse:
        for interceptor in self.interceptors:
            recovered = await interceptor.on_model_error(ctx, request, error)
            if recovered is not None:
                return recovered
        raise error

    async def call_tool(
        self, ctx: RunContext, call: ToolCallRequest, handler: ToolHandler
    ) -> ToolOutcome:
        """Runs the tool through the hooks; an error no hook handles is raised."""
        if not self.interceptors:
            return await handler(call)
        for interceptor in self.interceptors:
            call = await interceptor.before_tool(ctx, call)
        wrapped = handler
        for interceptor in reversed(self.interceptors):
            wrapped = _bind_tool(interceptor, ctx, wrapped)
        try:
            outcome = await wrapped(call)
        except Exception as error:
            outcome = await self._recover_tool(ctx, call, error)
        for interceptor in reversed(self.interceptors):
            outcome = await interceptor.after_tool(ctx, call, outcome)
        return outcome

    async def _recover_tool(
        self, ctx: RunContext, call: ToolCallRequest, error: Exception
    ) -> ToolOutcome:
        for interceptor in self.interceptors:
            recovered = await interceptor.on_tool_error(ctx, call, error)
            if recovered is not None:
                return recovered
        raise error


def _bind_model(interceptor: Interceptor, ctx: RunContext, inner: ModelHandler) -> ModelHandler:
    async def call(request: ModelRequest) -> ModelResponse:
        return await interceptor.wrap_model(ctx, request, inner)

    return call


def _bind_tool(interceptor: Interceptor, ctx: RunContext, inner: ToolHandler) -> ToolHandler:
    async def call(request: ToolCallRequest) -> ToolOutcome:
        return await interceptor.wrap_tool(ctx, request, inner)

    return call
