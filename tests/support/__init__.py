"""Test support: the scripted OpenAI-compatible model server and agents pointed at it."""

from .agents import DEFAULT_MODEL, SYSTEM_PROMPT, AgentFactory, model_fields
from .events import event_types, of_type, one
from .scripted_model import (
    BrokenStream,
    CallTools,
    Fail,
    Held,
    Malformed,
    Reply,
    ScriptedModelServer,
    Slow,
    Step,
)

__all__ = [
    "DEFAULT_MODEL",
    "SYSTEM_PROMPT",
    "AgentFactory",
    "BrokenStream",
    "CallTools",
    "Fail",
    "Held",
    "Malformed",
    "Reply",
    "ScriptedModelServer",
    "Slow",
    "Step",
    "event_types",
    "model_fields",
    "of_type",
    "one",
]
