"""Chat models: any OpenAI-compatible endpoint, the offline test model, fallback."""

from dynagent.models.base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    ToolDefinition,
)
from dynagent.models.fallback import FallbackModel
from dynagent.models.openai import ClientPool, OpenAIModel
from dynagent.models.test import TestModel

__all__ = [
    "ClientPool",
    "FallbackModel",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "StreamItem",
    "TestModel",
    "TextDelta",
    "ToolCallRequest",
    "ToolDefinition",
]
