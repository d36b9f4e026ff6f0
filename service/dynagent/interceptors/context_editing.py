"""``context_editing``: clear old tool results once the context passes a token budget."""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ConfigDict, Field

from dynagent.interceptors.base import Interceptor, RunContext
from dynagent.models.base import ModelRequest

CHARS_PER_TOKEN = 4
"""Rough estimate, good enough to decide when to trim; no tokenizer needed."""


class ContextEditingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    trigger_tokens: int = Field(default=6000, ge=1)
    """Estimated tokens above which old tool results are cleared."""
    keep_last: int = Field(default=3, ge=0)
    """How many of the most recent tool results stay intact."""
    placeholder: str = "[cleared: old tool result]"


def estimate_tokens(request: ModelRequest) -> int:
    return sum(len(str(m.get("content") or "")) for m in request.messages) // CHARS_PER_TOKEN


class ContextEditing(Interceptor):
    name = "context_editing"

    def __init__(self, config: ContextEditingConfig) -> None:
        self.config = config

    async def before_model(self, ctx: RunContext, request: ModelRequest) -> ModelRequest:
        if estimate_tokens(request) <= self.config.trigger_tokens:
            return request
        tool_positions = [i for i, m in enumerate(request.messages) if m.get("role") == "tool"]
        keep = self.config.keep_last
        to_clear = set(tool_positions[: len(tool_positions) - keep] if keep else tool_positions)
        if not to_clear:
            return request
        messages = tuple(
            {**m, "content": self.config.placeholder} if i in to_clear else m
            for i, m in enumerate(request.messages)
        )
        ctx.state[self.name] = ctx.state.get(self.name, 0) + len(to_clear)
        return dataclasses.replace(request, messages=messages)
