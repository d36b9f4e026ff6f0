"""A caller's JSON Schema sent the two ways the OpenAI routes take one: chat completions'
``response_format`` and Responses' ``text.format``."""

from __future__ import annotations

from typing import Any

from aiohttp import ClientResponse

from tests.support.service import RunningService


async def post_caller_schema(
    service: RunningService, key: str, schema: dict[str, Any], model: str = "bot"
) -> tuple[ClientResponse, ClientResponse]:
    """The answers of ``/v1/chat/completions`` and ``/v1/responses`` to ``schema``."""
    headers = {"Authorization": f"Bearer {key}"}
    chat = await service.client.post(
        "/v1/chat/completions",
        headers=headers,
        json={
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": schema},
            },
        },
    )
    responses = await service.client.post(
        "/v1/responses",
        headers=headers,
        json={
            "model": model,
            "input": "hi",
            "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}},
        },
    )
    return chat, responses
