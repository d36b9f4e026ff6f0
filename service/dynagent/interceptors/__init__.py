"""Interceptors around model and tool calls, and the built-ins referenced by name."""

from .base import Interceptor, InterceptorChain, RunContext, ToolOutcome
from .context_editing import ContextEditing
from .limits import ModelCallLimit, ToolCallLimit
from .pii import PiiRedaction, redact
from .registry import BUILTIN_INTERCEPTORS, InterceptorRegistry
from .retry import Retry

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
