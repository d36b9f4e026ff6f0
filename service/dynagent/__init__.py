"""Dynagent: config-center driven tool-calling agents, served over HTTP.

The public names below are imported on first use (PEP 562), not with the package: every
``dynagent`` command imports this package first, and the runtime behind these names pulls
in the openai client, which alone took seconds off ``dynagent --help``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynagent.events import Event, Usage
    from dynagent.exceptions import (
        AgentNotFound,
        ConfigError,
        CostLimitExceeded,
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

_WHERE = {
    "Event": "dynagent.events",
    "Usage": "dynagent.events",
    "AgentNotFound": "dynagent.exceptions",
    "ConfigError": "dynagent.exceptions",
    "CostLimitExceeded": "dynagent.exceptions",
    "DynagentError": "dynagent.exceptions",
    "LimitExceeded": "dynagent.exceptions",
    "MaxStepsExceeded": "dynagent.exceptions",
    "ModelError": "dynagent.exceptions",
    "OutputValidationError": "dynagent.exceptions",
    "RunError": "dynagent.exceptions",
    "RunTimeout": "dynagent.exceptions",
    "ToolCallError": "dynagent.exceptions",
    "ToolFailed": "dynagent.exceptions",
    "Agent": "dynagent.runtime.agent",
    "RunResult": "dynagent.runtime.agent",
    "SourceInfo": "dynagent.runtime.agent",
    "AgentBuilder": "dynagent.runtime.builder",
    "Resources": "dynagent.runtime.resources",
    "AgentSpec": "dynagent.spec.agent",
    "json_schema": "dynagent.spec.agent",
    "load_spec": "dynagent.spec.agent",
    "Tool": "dynagent.tools",
    "ToolRegistry": "dynagent.tools",
}
"""Each public name and the module it lives in."""

__all__ = [
    "Agent",
    "AgentBuilder",
    "AgentNotFound",
    "AgentSpec",
    "ConfigError",
    "CostLimitExceeded",
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


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'dynagent' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
