"""A remote A2A agent as a tool: the model sends it a message, its answer is the result.

The agent's address is resolved at call time (``resolve``: a fixed URL, or a lookup in
the Nacos A2A registry, ``sources._nacos_a2a.card_url``), so a re-registered agent is
reached where it is now; a URL of an agent card is fetched on each call and its JSON-RPC
endpoint used. JSON-RPC ``message/send`` with the ``a2a-sdk`` 0.3 types.

Every request is held to the entry's ``OutboundPolicy`` — the address resolved, the card's
and the endpoint the card names — and the entry's ``headers`` (its credentials, already
expanded and masked) go only to the origin of the address resolved: a card naming an
endpoint on another origin is refused rather than handed the credentials.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from a2a.types import (
    AgentCard,
    JSONRPCErrorResponse,
    Message,
    MessageSendParams,
    Part,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    Task,
    TextPart,
    TransportProtocol,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from pydantic import ValidationError

from dynagent.exceptions import ToolCallError
from dynagent.models import ToolDefinition
from dynagent.runtime.outbound import OutboundPolicy
from dynagent.tools.base import Tool

PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
    "required": ["input"],
    "additionalProperties": False,
}

UrlResolver = Callable[[], Awaitable[str]]


def remote_agent_tool(
    name: str,
    description: str,
    resolve: UrlResolver,
    session: aiohttp.ClientSession,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    policy: OutboundPolicy | None = None,
) -> Tool:
    """The tool ``name`` asking the agent ``resolve`` finds, sending ``headers`` (the
    entry's credentials, already expanded) with every request to the origin ``resolve``
    names; every request is checked against ``policy`` (default: public hosts only).
    ``session`` must be one that refuses what ``policy`` refuses when a name resolves."""
    policy = policy or OutboundPolicy()
    options: dict[str, Any] = {
        "headers": dict(headers or {}),
        "timeout": aiohttp.ClientTimeout(total=timeout),
        "allow_redirects": False,  # a redirect would carry the headers elsewhere
    }

    async def call(arguments: dict[str, object]) -> str:
        try:
            return await ask(arguments)
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, PermissionError):  # the resolver's private address
                raise PermissionError(str(exc.os_error)) from None
            raise

    async def ask(arguments: dict[str, object]) -> str:
        url = configured = await resolve()
        policy.check(url)
        if url.split("?", 1)[0].endswith(AGENT_CARD_WELL_KNOWN_PATH):
            url = await _endpoint_of(session, url, options)
            policy.check(url)
            if options["headers"]:
                policy.check_credentials(url, configured)
        message = Message(
            role=Role.user,
            message_id=uuid.uuid4().hex,
            parts=[Part(root=TextPart(text=str(arguments["input"])))],
        )
        request = SendMessageRequest(id=uuid.uuid4().hex, params=MessageSendParams(message=message))
        body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        async with session.post(url, json=body, **options) as response:
            _check(response, f"A2A agent at {url}")
            answer = SendMessageResponse.model_validate(await response.json()).root
        if isinstance(answer, JSONRPCErrorResponse):
            raise ToolCallError(f"A2A agent at {url}: {answer.error.message}")
        return _text(answer.result)

    definition = ToolDefinition(name, description or f"Ask the agent {name}.", PARAMETERS)
    return Tool.of(definition, call, timeout=timeout)


async def _endpoint_of(session: aiohttp.ClientSession, card_url: str, options: Any) -> str:
    """The JSON-RPC endpoint the agent card at ``card_url`` names."""
    async with session.get(card_url, **options) as response:
        _check(response, f"A2A agent card at {card_url}")
        try:
            card = AgentCard.model_validate(await response.json(content_type=None))
        except (ValueError, ValidationError) as exc:
            message = f"A2A agent card at {card_url} is not a valid card: {exc}"
            raise ToolCallError(message) from None
    if card.preferred_transport in (None, TransportProtocol.jsonrpc.value):
        return card.url
    for interface in card.additional_interfaces or []:
        if interface.transport == TransportProtocol.jsonrpc.value:
            return interface.url
    raise ToolCallError(f"the A2A agent card at {card_url} offers no JSON-RPC endpoint")


def _check(response: aiohttp.ClientResponse, what: str) -> None:
    if response.status < 400:
        return
    status = " ".join(str(p) for p in (response.status, response.reason) if p)
    hint = "; check the tool's headers" if response.status in (401, 403) else ""
    raise ToolCallError.answered(response.status, f"{what} answered HTTP {status}{hint}")


def _text(result: Message | Task) -> str:
    if isinstance(result, Message):
        parts = result.parts
    else:  # a task: its artifacts, else its last status message
        parts = [p for a in result.artifacts or [] for p in a.parts]
        if not parts and result.status.message is not None:
            parts = result.status.message.parts
    return "\n".join(p.root.text for p in parts if isinstance(p.root, TextPart))
