"""Tools agents may call: built-ins, code-registered, plugins and declarative HTTP tools."""

from .base import Tool, ToolFunction
from .builtins import BUILTIN_TOOLS, CALCULATOR, CURRENT_TIME, calculate
from .http import http_tool
from .registry import ToolRegistry

__all__ = [
    "BUILTIN_TOOLS",
    "CALCULATOR",
    "CURRENT_TIME",
    "Tool",
    "ToolFunction",
    "ToolRegistry",
    "calculate",
    "http_tool",
]
