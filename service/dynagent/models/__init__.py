"""Chat models: any OpenAI-compatible endpoint, the offline test model, fallback."""

from .base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    ToolDefinition,
)
from .fallback import FallbackModel
from .openai import ClientPool, OpenAIModel
from .test import TestModel

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
