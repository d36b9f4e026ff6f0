"""``model_call_limit`` and ``tool_call_limit``: cap calls per run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dynagent.exceptions import LimitExceeded
from dynagent.interceptors.base import Interceptor, RunContext, ToolHandler, ToolOutcome
from dynagent.models.base import ModelRequest, ToolCallRequest


class CallLimitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max: int = Field(ge=1, le=1000)


class ToolLimitConfig(CallLimitConfig):
    on_exceed: Literal["report", "fail"] = "report"
    """``report``: further calls get ``TOOL_ERROR`` and the model answers without tools;
    ``fail``: the run ends with a limit error."""


class ModelCallLimit(Interceptor):
    name = "model_call_limit"

    def __init__(self, config: CallLimitConfig) -> None:
        self.max = config.max

    async def before_model(self, ctx: RunContext, request: ModelRequest) -> ModelRequest:
        count = ctx.state.get(self.name, 0) + 1
        ctx.state[self.name] = count
        if count > self.max:
            raise LimitExceeded(f"model call limit of {self.max} per run reached")
        return request


class ToolCallLimit(Interceptor):
    name = "tool_call_limit"

    def __init__(self, config: ToolLimitConfig) -> None:
        self.max = config.max
        self.on_exceed = config.on_exceed

    async def wrap_tool(
        self, ctx: RunContext, call: ToolCallRequest, handler: ToolHandler
    ) -> ToolOutcome:
        count = ctx.state.get(self.name, 0) + 1
        ctx.state[self.name] = count
        if count > self.max:
            message = f"tool call limit of {self.max} per run reached"
            if self.on_exceed == "fail":
                raise LimitExceeded(message)
            return ToolOutcome(f"TOOL_ERROR: {message}; answer without tools", is_error=True)
        return await handler(call)
