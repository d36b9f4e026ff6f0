"""``retry``: retry failed model calls (after the client's own retries) and tool calls.

A tool call is sent again only when both hold: the failure is transient (a
``ToolCallError`` with ``transient``: the endpoint could not be reached, the
connection broke, the call timed out, or it answered 408, 429 or 5xx), and the tool
is ``idempotent`` (a repeat does nothing the first call did not). Anything else —
another 4xx, arguments the tool refused, a host policy's ``PermissionError``, any
failure of a POST tool not marked idempotent — reaches the model after one attempt.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict, Field

from dynagent.exceptions import ModelError, ToolCallError
from dynagent.interceptors.base import (
    Interceptor,
    ModelHandler,
    RunContext,
    ToolHandler,
    ToolOutcome,
)
from dynagent.models.base import ModelRequest, ModelResponse, ToolCallRequest


class RetryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=2, ge=1, le=10)
    """Attempts per call, the first included."""
    backoff: float = Field(default=0.5, ge=0, le=30)
    """Seconds before the second attempt; doubles each time."""
    tools: bool = True
    """Retry tool calls too: those of idempotent tools that failed transiently."""


class Retry(Interceptor):
    name = "retry"

    def __init__(self, config: RetryConfig) -> None:
        self.config = config

    async def wrap_model(
        self, ctx: RunContext, request: ModelRequest, call: ModelHandler
    ) -> ModelResponse:
        for attempt in range(self.config.max_attempts - 1):
            try:
                return await call(request)
            except ModelError as exc:
                if not exc.retryable:
                    raise
                await asyncio.sleep(self.config.backoff * 2**attempt)
        return await call(request)

    async def wrap_tool(
        self, ctx: RunContext, call: ToolCallRequest, handler: ToolHandler
    ) -> ToolOutcome:
        tool = ctx.tools.get(call.name)
        if not self.config.tools or tool is None or not tool.idempotent:
            return await handler(call)
        for attempt in range(self.config.max_attempts - 1):
            try:
                return await handler(call)
            except ToolCallError as exc:
                if not exc.transient:
                    raise
                await asyncio.sleep(self.config.backoff * 2**attempt)
        return await handler(call)
