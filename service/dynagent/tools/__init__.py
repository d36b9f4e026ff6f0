"""Tools agents may call: built-ins, code-registered, plugins and declarative HTTP tools."""

from dynagent.tools.base import Tool, ToolFunction
from dynagent.tools.builtins import BUILTIN_TOOLS, CALCULATOR, CURRENT_TIME, calculate
from dynagent.tools.http import http_tool
from dynagent.tools.registry import ToolRegistry

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
