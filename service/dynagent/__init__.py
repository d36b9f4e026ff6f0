"""Dynagent: config-center driven tool-calling agents, served over HTTP."""

from .agent import Agent, RunResult, SourceInfo
from .builder import AgentBuilder
from .events import Event, Usage
from .exceptions import (
    AgentNotFound,
    ConfigError,
    DynagentError,
    LimitExceeded,
    MaxStepsExceeded,
    ModelError,
    OutputValidationError,
    RunError,
    RunTimeout,
    ToolCallError,
    ToolFailed,
)
from .resources import Resources
from .spec import AgentSpec, json_schema, load_spec
from .tools import Tool, ToolRegistry

__all__ = [
    "Agent",
    "AgentBuilder",
    "AgentNotFound",
    "AgentSpec",
    "ConfigError",
    "DynagentError",
    "Event",
    "LimitExceeded",
    "MaxStepsExceeded",
    "ModelError",
    "OutputValidationError",
    "Resources",
    "RunError",
    "RunResult",
    "RunTimeout",
    "SourceInfo",
    "Tool",
    "ToolCallError",
    "ToolFailed",
    "ToolRegistry",
    "Usage",
    "json_schema",
    "load_spec",
]
