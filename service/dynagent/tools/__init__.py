"""Tools agents may call: built-ins, code-registered, plugins and declarative HTTP tools;
the tool kinds that build a spec's ``tools`` entries."""

from dynagent.tools.base import Tool, ToolFunction
from dynagent.tools.builtins import BUILTIN_TOOLS, CALCULATOR, CURRENT_TIME, calculate
from dynagent.tools.http import http_tool
from dynagent.tools.kinds import KindContext, ToolKind, ToolKinds
from dynagent.tools.registry import ToolRegistry

__all__ = [
    "BUILTIN_TOOLS",
    "CALCULATOR",
    "CURRENT_TIME",
    "KindContext",
    "Tool",
    "ToolFunction",
    "ToolKind",
    "ToolKinds",
    "ToolRegistry",
    "calculate",
    "http_tool",
]
