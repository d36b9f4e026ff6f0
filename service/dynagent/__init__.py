"""Dynagent: config-center driven tool-calling agents, served over HTTP."""

from dynagent.events import Event, Usage
from dynagent.exceptions import (
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
from dynagent.runtime.agent import Agent, RunResult, SourceInfo
from dynagent.runtime.builder import AgentBuilder
from dynagent.runtime.resources import Resources
from dynagent.spec.agent import AgentSpec, json_schema, load_spec
from dynagent.tools import Tool, ToolRegistry

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
