"""A remote A2A agent as a tool: the model sends it a message, its answer is the result.

The agent's address is resolved at call time (``resolve``: a fixed URL, or a lookup in
the Nacos A2A registry, ``sources._nacos_a2a.card_url``), so a re-registered agent is
reached where it is now. JSON-RPC ``message/send`` with the ``a2a-sdk`` 0.3 types.

Ready for the ``type: agent`` tool entry's ``a2a: {nacos: NAME}`` / ``a2a: {url: …}``
field, which waits for the ``type: agent`` tool model in the AgentSpec.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping

import aiohttp
from a2a.types import (
    JSONRPCErrorResponse,
    Message,
    MessageSendParams,
    Part,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    Task,
    TextPart,
)

from ..models import ToolDefinition
from .base import Tool

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
) -> Tool:
    async def call(arguments: dict[str, object]) -> str:
        url = await resolve()
        message = Message(
            role=Role.user,
            message_id=uuid.uuid4().hex,
            parts=[Part(root=TextPart(text=str(arguments["input"])))],
        )
        request = SendMessageRequest(id=uuid.uuid4().hex, params=MessageSendParams(message=message))
        body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        async with session.post(
            url,
            json=body,
            headers=dict(headers or {}),
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=False,
        ) as response:
            if response.status >= 400:
                raise RuntimeError(f"A2A agent at {url} answered HTTP {response.status}")
            answer = SendMessageResponse.model_validate(await response.json()).root
        if isinstance(answer, JSONRPCErrorResponse):
            raise RuntimeError(f"A2A agent at {url}: {answer.error.message}")
        return _text(answer.result)

    definition = ToolDefinition(name, description or f"Ask the agent {name}.", PARAMETERS)
    return Tool(definition, call, timeout=timeout)


def _text(result: Message | Task) -> str:
    if isinstance(result, Message):
        parts = result.parts
    else:  # a task: its artifacts, else its last status message
        parts = [p for a in result.artifacts or [] for p in a.parts]
        if not parts and result.status.message is not None:
            parts = result.status.message.parts
    return "\n".join(p.root.text for p in parts if isinstance(p.root, TextPart))
