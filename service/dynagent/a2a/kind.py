"""``type: agent``: another agent as a tool, one of this service's (``tools/agent.py``,
routed through the registry at call time) or a remote one over A2A (``a2a: {nacos |
url}``, ``a2a/client.py``, its address resolved on every call)."""

from __future__ import annotations

from dynagent.a2a.client import remote_agent_tool
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.runtime.outbound import PRIVATE_HINT, OutboundPolicy
from dynagent.spec.agent import AgentSpec
from dynagent.tools.agent import A2aRef, AgentToolSpec, agent_tool
from dynagent.tools.base import Tool
from dynagent.tools.kinds import KindContext, ToolKind


class AgentKind(ToolKind[AgentToolSpec]):
    type = "agent"
    entry = AgentToolSpec
    online = True

    def build(
        self, ctx: KindContext, spec: AgentSpec, entry: AgentToolSpec, path: str
    ) -> list[Tool]:
        if entry.a2a is not None:
            return [_remote(ctx, entry, entry.a2a, path)]
        if ctx.agents is None:
            raise ConfigError(
                "agent tools are not available here",
                issues=[FieldIssue(path, "this builder has no agent registry to call through")],
            )
        return [agent_tool(entry, spec, ctx.agents, path)]


def _remote(ctx: KindContext, entry: AgentToolSpec, target: A2aRef, path: str) -> Tool:
    """A remote A2A agent, its address resolved on every call."""
    lookup, url, name = ctx.a2a, ctx.expand_env(target.url or "", f"{path}.a2a.url"), ""
    if target.nacos is not None:
        if lookup is None:
            raise ConfigError(
                "remote agents by Nacos name are not available here",
                issues=[FieldIssue(f"{path}.a2a.nacos", "no Nacos A2A registry to ask")],
            )
        name = target.nacos

    async def resolve() -> str:
        return await lookup(name) if name and lookup is not None else url

    policy = OutboundPolicy.of(url or None, entry.allow_hosts, entry.allow_private)
    refused = policy.refusal(url) if url else None
    if refused is not None:
        hint = f"; {PRIVATE_HINT}" if "private" in refused else ""
        issue = FieldIssue(f"{path}.a2a.url", f"{refused}{hint}")
        raise ConfigError("remote agent not allowed", issues=[issue])
    session = ctx.resources.http_session(allow_private=policy.allow_private)
    headers = {  # credentials of the remote agent: masked from now on
        key: ctx.expand_env(value, f"{path}.headers.{key}", secret=True)
        for key, value in entry.headers.items()
    }
    tool = remote_agent_tool(
        entry.name,
        entry.description,
        resolve,
        session,
        headers=headers,
        timeout=entry.timeout or 60.0,
        policy=policy,
    )
    return tool.with_options(timeout=None, on_error=entry.on_error)


KIND = AgentKind()
