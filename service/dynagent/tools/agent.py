"""Agents as tools: ``type: agent`` offers another agent of this service as a tool
taking ``{input: string}`` and answering with that agent's output.

The call is routed through the registry when it happens (stable or canary, the
revision serving then), carries the caller's key scope (``CALL_SCOPE``, set by
the HTTP layer for each request), and its run's events are kept under the
parent run's trace. Cycles the registry can already see are refused when the
agent is built; every chain stops at the caller's ``limits.max_depth``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynagent.exceptions import ConfigError, DynagentError, FieldIssue, RunError
from dynagent.models.base import ToolDefinition
from dynagent.spec.agent import NAME_PATTERN, AgentSpec
from dynagent.spec.tools import OutboundFields
from dynagent.tools.base import Tool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class A2aRef(_Strict):
    """A remote A2A agent: by its name in the Nacos A2A registry, or by URL; resolved
    when the tool is called."""

    nacos: str | None = Field(default=None, min_length=1, max_length=128)
    """Its name in the Nacos A2A registry: its latest card there says where it answers."""
    url: str | None = Field(default=None, pattern=r"^https?://")
    """Its JSON-RPC endpoint, or its card (a URL ending ``/.well-known/agent-card.json``,
    fetched on every call) that says where it answers (``${VAR}`` allowed)."""

    @model_validator(mode="after")
    def _one_target(self) -> A2aRef:
        if (self.nacos is None) == (self.url is None):
            raise ValueError("give exactly one of 'nacos' or 'url'")
        return self


class AgentToolSpec(_Strict, OutboundFields):
    """Another agent of this service, offered as a tool taking ``{input: string}``.

    Routed through the registry at call time (stable or canary, current revision). A
    remote one (``a2a``) is reached as ``allow_hosts`` and ``allow_private`` say
    (``runtime.outbound``): a loopback or private address only with ``allow_private``."""

    type: Literal["agent"]
    name: str = Field(pattern=NAME_PATTERN)
    """The agent to call; also the tool's name."""
    description: str = ""
    """What the model sees; absent: the agent's own description."""
    timeout: float | None = Field(default=None, gt=0, le=3600)
    """Seconds per call; absent: the called agent's ``limits.timeout``."""
    on_error: Literal["report", "fail"] = "report"
    a2a: A2aRef | None = None
    """A remote agent over A2A instead of one of this service's agents."""
    headers: dict[str, str] = {}
    """Sent to the remote agent (``a2a``) with every request, its card's and its messages'
    (``Authorization: "Bearer ${TOKEN}"``); values may use ``${VAR}``; never logged."""

    @model_validator(mode="after")
    def _headers_go_remote(self) -> AgentToolSpec:
        if self.headers and self.a2a is None:
            raise ValueError("'headers' go with 'a2a' only (a remote agent)")
        if self.a2a is None and (self.allow_hosts is not None or self.allow_private):
            message = "'allow_hosts' and 'allow_private' go with 'a2a' only (a remote agent)"
            raise ValueError(message)
        return self


@dataclass(frozen=True, slots=True)
class CallScope:
    """Who a run acts for, handed down to the agents it calls."""

    agents: frozenset[str] | None = None
    """The agents the caller's API key may reach; ``None``: every agent."""
    key: str | None = None
    """The routing key for canaries (the caller's key digest)."""
    trace_id: str | None = None
    """The outermost run's trace: nested runs share it."""
    chain: tuple[str, ...] = ()
    """The agents calling each other to get here, outermost first."""
    nested: list[dict[str, Any]] | None = field(default=None, compare=False)
    """Where nested runs are recorded for the outermost run's trace (their ``events``
    are ``Event`` objects)."""


CALL_SCOPE: ContextVar[CallScope | None] = ContextVar("dynagent_call_scope", default=None)


class AgentFailed(DynagentError):
    """A called agent's run failed; its caller's model sees why."""

    kind = "tool_error"


class CallableAgent(Protocol):
    @property
    def spec(self) -> AgentSpec: ...
    @property
    def revision(self) -> str: ...
    async def run(self, input: str, *, trace_id: str | None = ..., variant: Any = ...) -> Any: ...


class AgentDirectory(Protocol):
    """The agents a call may reach: ``AgentRegistry``."""

    def route_call(self, name: str, *, key: str | None) -> tuple[Any, Any, bool, str]: ...

    def spec_of(self, name: str) -> AgentSpec | None: ...


INPUT_SCHEMA = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
    "required": ["input"],
    "additionalProperties": False,
}


def agent_tool(entry: AgentToolSpec, caller: AgentSpec, agents: AgentDirectory, path: str) -> Tool:
    """``entry`` as a tool of ``caller``; ``ConfigError`` for a cycle the registry shows."""
    cycle = find_cycle(caller.name, entry.name, agents.spec_of)
    if cycle:
        raise ConfigError(
            "agent tools call each other in a circle",
            issues=[FieldIssue(path, " → ".join(cycle))],
        )
    target = agents.spec_of(entry.name)
    description = entry.description or (target.description if target else "")
    description = description or f"Ask the agent {entry.name!r}."

    async def call(arguments: dict[str, Any]) -> str:
        return await _call_agent(entry.name, caller, agents, str(arguments["input"]))

    return Tool.of(
        ToolDefinition(entry.name, description, dict(INPUT_SCHEMA)),
        call,
        timeout=entry.timeout or 3600,
        on_error=entry.on_error,
    )


async def _call_agent(name: str, caller: AgentSpec, agents: AgentDirectory, text: str) -> str:
    scope = CALL_SCOPE.get() or CallScope()
    chain = scope.chain or (caller.name,)
    if scope.agents is not None and name not in scope.agents:
        raise PermissionError(f"this API key may not call agent {name!r}")
    if len(chain) >= caller.limits.max_depth:
        path = " → ".join((*chain, name))
        raise AgentFailed(
            f"{path} would be {len(chain) + 1} agents deep; "
            f"limits.max_depth of {caller.name!r} is {caller.limits.max_depth}"
        )
    agent, variant, unmatched, weight = agents.route_call(name, key=scope.key)
    # Made directly, not with dataclasses.replace (which looks up every field each call).
    inner = CallScope(scope.agents, scope.key, scope.trace_id, (*chain, name), scope.nested)
    token = CALL_SCOPE.set(inner)
    # Its events as they come: a run cut off with its caller (gone, out of time) keeps the
    # ones it had, and its spend so far counts (``events.spent``).
    seen: list[Any] = []
    try:
        result = await agent.run(
            text, trace_id=scope.trace_id, variant=variant, on_event=seen.append
        )
    except RunError as exc:
        raise AgentFailed(f"agent {name!r} failed: {exc.message}") from None
    finally:
        CALL_SCOPE.reset(token)
        events = tuple(seen)
        if scope.nested is not None:
            scope.nested.append(
                {
                    "agent": name,
                    "revision": agent.revision,
                    "variant": variant,
                    "caller": chain[-1],
                    "depth": len(chain) + 1,
                    "weight": weight,  # the canary weight that chose the variant ("": none)
                    "unmatched": unmatched,  # rollout.match kept it from a serving canary
                    "events": events,  # turned into JSON only when the trace is recorded
                }
            )
    output = result.output
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def find_cycle(
    caller: str, target: str, spec_of: Callable[[str], AgentSpec | None]
) -> list[str] | None:
    """The path ``caller → target → … → caller`` through agent tools, if there is one."""
    stack: list[tuple[str, list[str]]] = [(target, [caller, target])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        if name == caller:
            return path
        if name in seen:
            continue
        seen.add(name)
        spec = spec_of(name)
        for entry in spec.tools if spec else ():
            if isinstance(entry, AgentToolSpec):
                stack.append((entry.name, [*path, entry.name]))
    return None
