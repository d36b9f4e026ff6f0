"""What a caller may add to one run: client tools, a tool choice, an output schema and
sampling settings. The agent's definition decides whether each is allowed.

Client tools are tools the caller executes: the model sees them beside the
agent's own, and when it calls one the turn ends with the call, for the caller
to answer in its next request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dynagent.exceptions import BadRequest
from dynagent.models.base import ToolDefinition
from dynagent.runtime._schema_pair import clash as schema_clash
from dynagent.spec.agent import AgentSpec

__all__ = ["RunOptions"]


@dataclass(frozen=True, slots=True)
class RunOptions:
    client_tools: tuple[ToolDefinition, ...] = ()
    """Tools the caller runs; a call to one ends the turn."""
    tool_choice: Any = None
    """OpenAI's ``tool_choice`` (``auto``, ``none``, ``required`` or one function)."""
    output_schema: dict[str, Any] | None = None
    """The caller's JSON Schema for the answer, validated and retried like the agent's (and
    together with it, on an agent that has its own)."""
    output_retries: int = 2
    """How many times an answer that fails ``output_schema`` goes back to the model."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Sampling settings the caller asked for; ``bound`` keeps those the agent allows."""

    def shapes(self, spec: AgentSpec) -> bool:
        """Whether these options change what the agent's own definition sends the model or
        accepts as an answer: client tools, a tool choice, a schema of the caller's own,
        settings the agent lets callers set. A failure they can explain is the caller's."""
        own_schema = spec.output is not None
        return bool(
            self.client_tools
            or self.tool_choice not in (None, "auto")
            or (self.output_schema is not None and not own_schema)
            or set(self.settings) & set(spec.model.caller_settings)
        )

    @property
    def client_names(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.client_tools)

    def refused_settings(self, spec: AgentSpec) -> list[str]:
        """The settings asked for that the agent's ``model.caller_settings`` does not allow."""
        return sorted(set(self.settings) - set(spec.model.caller_settings))

    def bound(self, spec: AgentSpec, agent_tools: Mapping[str, object]) -> RunOptions:
        """These options for one agent: its allowed settings only; ``BadRequest`` when
        it does not allow what the caller asks for."""
        self._check(spec, agent_tools)
        allowed: set[str] = set(spec.model.caller_settings)
        settings: dict[str, Any] = {k: v for k, v in self.settings.items() if k in allowed}
        return dataclasses.replace(self, settings=settings)

    def _check(self, spec: AgentSpec, agent_tools: Mapping[str, object]) -> None:
        if self.client_tools and not spec.client_tools:
            raise BadRequest(
                f"agent {spec.name!r} does not accept client tools (client_tools: false); "
                "send the request without 'tools'"
            )
        clash = sorted(self.client_names & set(agent_tools))
        if clash:
            raise BadRequest(
                f"client tool name(s) {', '.join(clash)} clash with tools of agent "
                f"{spec.name!r}; rename them"
            )
        own = spec.output.schema_ if spec.output else None
        why = schema_clash(own, self.output_schema) if own is not None else None
        if why is not None:
            raise BadRequest(
                f"the response format cannot hold together with agent {spec.name!r}'s own "
                f"output schema: {why}",
                param="response_format",
            )
        self._check_choice()

    def _check_choice(self) -> None:
        choice = self.tool_choice
        if not isinstance(choice, dict):
            return
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        if name not in self.client_names:
            raise BadRequest(
                f"tool_choice names {name!r}, which is not one of the request's 'tools'"
            )

    def first_choice(self, step: int) -> Any:
        """The tool choice of model call ``step``: a forced choice binds the first call only,
        so that a forced agent tool cannot loop until ``max_steps``."""
        if step == 1 or self.tool_choice in (None, "auto", "none"):
            return self.tool_choice
        return "auto"
