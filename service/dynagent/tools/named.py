"""``type: ref``: the tools a definition names (``- calculator``, ``{name, timeout}``),
found in the builder's ``ToolRegistry`` (built-ins, code, ``dynagent.tools`` plugins)."""

from __future__ import annotations

from dataclasses import replace

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.spec.agent import AgentSpec
from dynagent.spec.tools import ToolRef
from dynagent.tools.base import Tool
from dynagent.tools.kinds import KindContext, ToolKind


class RefKind(ToolKind[str | ToolRef]):
    type = "ref"
    entry = ToolRef

    def build(
        self, ctx: KindContext, spec: AgentSpec, entry: str | ToolRef, path: str
    ) -> list[Tool]:
        name = entry if isinstance(entry, str) else entry.name
        tool = ctx.tools.get(name)
        if tool is None:
            known = ", ".join(ctx.tools.names()) or "none"
            raise ConfigError(
                "unknown tool",
                issues=[FieldIssue(path, f"no tool named {name!r} is registered; known: {known}")],
            )
        if isinstance(entry, str):
            return [tool]
        tool = tool.with_options(timeout=entry.timeout, on_error=entry.on_error)
        if entry.shadow_safe is not None:
            tool = replace(tool, shadow_safe=entry.shadow_safe)
        return [tool]


KIND = RefKind()
