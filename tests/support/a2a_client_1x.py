"""Send one message to an agent over A2A with the ``a2a-sdk`` 1.x client, streaming, and
print each event it yields as a line of JSON the moment it arrives.

Run by the Python of the virtualenv ``make setup`` makes for the 1.x line
(``.cache/a2a-sdk-1``): the service and the rest of the tests use the 0.3 line, and the
two cannot share one environment. Arguments: the agent's A2A URL, an API key, the text.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict


async def main(url: str, key: str, text: str) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
        async for event in client.send_message(SendMessageRequest(message=message)):
            print(json.dumps(MessageToDict(event)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
