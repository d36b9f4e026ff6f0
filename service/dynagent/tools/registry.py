"""The tools a definition may name: built-ins, tools registered in code, and plugins."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from loguru import logger

from dynagent.spec._plugins import plugin_points
from dynagent.tools.base import Tool
from dynagent.tools.builtins import BUILTIN_TOOLS


@dataclass
class ToolRegistry:
    """Named tools an agent definition may refer to: built-ins, code, plugins.

    A definition names tools; it never names code. Plugins are installed
    packages that expose a ``Tool`` (or a zero-argument callable returning one)
    in the entry-point group ``dynagent.tools``.
    """

    _tools: dict[str, Tool] = field(default_factory=dict)

    def register(self, tool: Tool) -> Tool:
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def extend(self, tools: Iterable[Tool]) -> None:
        for tool in tools:
            self.register(tool)

    def load_plugins(self, group: str = "dynagent.tools") -> list[str]:
        loaded = []
        for point in plugin_points(group):
            try:
                obj = point.load()
                tool = obj if isinstance(obj, Tool) else obj()
            except Exception as exc:  # a broken plugin must not stop the service
                logger.error("tool plugin {} failed to load: {}", point.name, exc)
                continue
            if isinstance(tool, Tool):
                self.register(tool)
                loaded.append(tool.name)
            else:
                logger.error("tool plugin {} is not a dynagent Tool", point.name)
        return loaded

    @classmethod
    def default(cls, extra: Mapping[str, Tool] | None = None) -> ToolRegistry:
        """Built-ins plus installed plugins (plus ``extra``)."""
        registry = cls()
        registry.extend(BUILTIN_TOOLS)
        registry.load_plugins()
        registry.extend((extra or {}).values())
        return registry
