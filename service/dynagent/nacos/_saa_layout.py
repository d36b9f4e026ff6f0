"""Spring AI Alibaba's Nacos layout, mapped onto an AgentSpec document.

Names as read in alibaba/spring-ai-alibaba, ``spring-ai-alibaba-starter-config-nacos``
(``NacosAgentInjector``, ``NacosModelInjector``, ``NacosMcpToolsInjector``,
``NacosPartnerAgentsInjector``, ``NacosPromptInjector`` and the ``vo`` classes):

- group ``ai-agent-{agentName}``:
  ``agent-base.json`` ``{promptKey, description, maxIterations}``;
  ``model.json`` ``{baseUrl, apiKey, model, temperature, maxTokens}`` (numbers as strings);
  ``mcp-servers.json`` ``{mcpServers: [{mcpServerName, version, whiteTools, headers,
  queryParams}]}``; ``partner-agents.json`` ``{agents: [{agentName, headers, queryPrams}]}``;
- group ``nacos-ai-meta``: ``prompt-{promptKey}.json`` ``{promptKey, version, template,
  variables}``; the template becomes the system prompt as it is.

The ``cipher-kms-aes-256-`` (KMS-encrypted) variants of these dataIds are not read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynagent import _regex
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.nacos.client import content_md5
from dynagent.runtime.agent import SourceInfo
from dynagent.sources.base import Document

GROUP_PREFIX = "ai-agent-"
PROMPT_GROUP = "nacos-ai-meta"
AGENT_BASE = "agent-base.json"
MODEL = "model.json"
MCP_SERVERS = "mcp-servers.json"
PARTNER_AGENTS = "partner-agents.json"
PIECES = (AGENT_BASE, MODEL, MCP_SERVERS, PARTNER_AGENTS)


_UNSAFE = _regex.compile(r"[^a-zA-Z0-9_-]")


def prompt_data_id(prompt_key: str) -> str:
    return f"prompt-{prompt_key}.json"


@dataclass(frozen=True, slots=True)
class Piece:
    """One dataId that went into an agent, as Nacos served it."""

    group: str
    data_id: str
    text: str
    md5: str
    gray: bool = False
    """Served as a gray version: its md5 is not the one the list shows."""


def parse_piece(piece: Piece) -> dict[str, Any]:
    try:
        value = json.loads(piece.text)
    except ValueError as exc:
        raise ConfigError(
            f"{piece.group}/{piece.data_id} is not valid JSON: {exc}".replace("\n", " ")
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{piece.group}/{piece.data_id} must hold a JSON object")
    return value


def prompt_key_of(base: Piece) -> str:
    key = parse_piece(base).get("promptKey")
    return key if isinstance(key, str) else ""


def spec_document(
    name: str,
    pieces: Mapping[str, Piece],
    prompt: Piece | None,
    network: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The AgentSpec document for agent ``name`` from its group's ``pieces`` (by dataId)
    and its prompt; ``ConfigError`` naming the piece when one cannot be mapped. Every
    server and partner tool gets the factory's ``network`` fields (the layout has none)."""
    base = parse_piece(pieces[AGENT_BASE])
    document: dict[str, Any] = {"name": name, "description": str(base.get("description") or "")}
    key = base.get("promptKey")
    if not isinstance(key, str) or not key:
        raise ConfigError(
            "agent-base.json names no prompt",
            issues=[FieldIssue("promptKey", f"give the key of a {PROMPT_GROUP} prompt")],
        )
    if prompt is None:
        raise ConfigError(f"prompt {key!r} not found: publish {PROMPT_GROUP}/{prompt_data_id(key)}")
    document["prompt"] = _prompt(parse_piece(prompt))
    iterations = base.get("maxIterations")
    if isinstance(iterations, int) and iterations > 0:
        document["limits"] = {"max_steps": iterations}
    if MODEL in pieces:
        document["model"] = _model(parse_piece(pieces[MODEL]))
    tools = [*_mcp_tools(pieces.get(MCP_SERVERS)), *_partner_tools(pieces.get(PARTNER_AGENTS))]
    tools = [{**tool, **(network or {})} for tool in tools]
    if tools:
        document["tools"] = tools
    return document


def _prompt(prompt: dict[str, Any]) -> dict[str, Any]:
    template = prompt.get("template")
    if not isinstance(template, str) or not template:
        raise ConfigError("the prompt has no template", issues=[FieldIssue("template", "empty")])
    names = prompt.get("variables") or []
    variables = {str(n): "" for n in names if isinstance(n, str)} if isinstance(names, list) else {}
    return {"system": template, "variables": variables} if variables else {"system": template}


def _model(model: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"provider": "openai"}
    for theirs, ours in (("model", "name"), ("baseUrl", "base_url"), ("apiKey", "api_key")):
        if isinstance(model.get(theirs), str) and model[theirs]:
            spec[ours] = model[theirs]
    settings: dict[str, Any] = {}
    for theirs, ours, kind in (
        ("temperature", "temperature", float),
        ("maxTokens", "max_tokens", int),
    ):
        value = model.get(theirs)
        if value in (None, ""):
            continue
        try:
            settings[ours] = kind(value)
        except (TypeError, ValueError):
            raise ConfigError(
                "invalid model.json",
                issues=[FieldIssue(theirs, f"expected a number, found {value!r}")],
            ) from None
    if settings:
        spec["settings"] = settings
    return spec


def _mcp_tools(piece: Piece | None) -> list[dict[str, Any]]:
    """``mcp-servers.json`` → ``type: mcp`` tools found in the Nacos MCP registry, limited
    to ``whiteTools`` when it lists any. ``headers`` and ``queryParams`` are not carried:
    a registry server's endpoint comes from the registry."""
    if piece is None:
        return []
    servers = parse_piece(piece).get("mcpServers") or []
    tools = []
    for server in servers if isinstance(servers, list) else []:
        if not isinstance(server, dict) or not server.get("mcpServerName"):
            continue
        name = str(server["mcpServerName"])
        nacos: dict[str, Any] = {"server": name}
        if server.get("version"):
            nacos["version"] = str(server["version"])
        tool: dict[str, Any] = {"type": "mcp", "name": _tool_name(name), "nacos": nacos}
        allow = server.get("whiteTools")
        if isinstance(allow, list) and allow:
            tool["allow"] = sorted(str(t) for t in allow)
        tools.append(tool)
    return tools


def _tool_name(server: str) -> str:
    """A registry name (``weather.v2``) as an MCP tool entry's name (``weather_v2``)."""
    return _UNSAFE.sub("_", server)[:48] or "mcp"


def _partner_tools(piece: Piece | None) -> list[dict[str, Any]]:
    """``partner-agents.json`` → ``type: agent`` tools calling the partner over A2A,
    found by name in the Nacos A2A registry (``headers`` and ``queryPrams`` are not carried)."""
    if piece is None:
        return []
    agents = parse_piece(piece).get("agents") or []
    return [
        {"type": "agent", "name": str(name), "a2a": {"nacos": str(name)}}
        for agent in (agents if isinstance(agents, list) else [])
        if isinstance(agent, dict) and (name := agent.get("agentName"))
    ]


def kept_piece(group: str, data_id: str, text: str) -> Piece:
    """A piece as the snapshot kept it."""
    return Piece(group, data_id, text, content_md5(text))


def document_piece(document: Document) -> Piece:
    """A piece as a source handed it on, with the md5 and gray marker Nacos reported."""
    assert document.text is not None
    details = document.info.details
    group, md5, gray = details.get("group", ""), details.get("md5", ""), details.get("gray")
    return Piece(group, document.key, document.text, md5, gray=bool(gray))


def source_info(
    where: str, group: str, pieces: Mapping[str, Piece], prompt: Piece | None
) -> SourceInfo:
    """Names every dataId that went into the revision, with the md5 Nacos reported."""
    details = {"group": group}
    details.update(
        {f"{group}/{p.data_id}": p.md5 for p in sorted(pieces.values(), key=lambda p: p.data_id)}
    )
    if prompt is not None:
        details[f"{prompt.group}/{prompt.data_id}"] = prompt.md5
    return SourceInfo("nacos", where, details)
