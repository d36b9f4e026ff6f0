"""Interceptors around model and tool calls, and the built-ins referenced by name."""

from dynagent.interceptors.base import Interceptor, InterceptorChain, RunContext, ToolOutcome
from dynagent.interceptors.context_editing import ContextEditing
from dynagent.interceptors.limits import ModelCallLimit, ToolCallLimit
from dynagent.interceptors.pii import PiiRedaction, redact
from dynagent.interceptors.registry import BUILTIN_INTERCEPTORS, InterceptorRegistry
from dynagent.interceptors.retry import Retry

__all__ = [
    "BUILTIN_INTERCEPTORS",
    "ContextEditing",
    "Interceptor",
    "InterceptorChain",
    "InterceptorRegistry",
    "ModelCallLimit",
    "PiiRedaction",
    "Retry",
    "RunContext",
    "ToolCallLimit",
    "ToolOutcome",
    "redact",
]
