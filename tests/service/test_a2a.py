"""Every agent is an A2A server: its card, message/send and message/stream, driven by the
``a2a-sdk`` client over real HTTP, behind the same API keys and scopes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, TextPart

from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.service import (
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

FRONTEND = "frontend-key-cccccccccccccccc"


def message(text: str, context: str | None = None) -> Message:
    return Message(
        role=Role.user,
        message_id=uuid.uuid4().hex,
        context_id=context,
        parts=[Part(root=TextPart(text=text))],
    )


def texts(events: list[Any]) -> list[str]:
    """The text of each reply message; of a streamed task, its artifacts' at the end."""
    found = []
    for event in events:
        if isinstance(event, Message):
            found.append("".join(p.root.text for p in event.parts if isinstance(p.root, TextPart)))
    if events and isinstance(events[-1], tuple):
        task = events[-1][0]
        found += [
            "".join(p.root.text for p in a.parts if isinstance(p.root, TextPart))
            for a in task.artifacts or []
        ]
    return found


async def test_an_agent_answers_a2a_send_and_stream_with_its_card(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, tmp_path: Path
) -> None:
    document = agent_document("bot", model_server, description="Answers over A2A.")
    write_agent(agents_dir, document)
    write_agent(agents_dir, agent_document("other"))
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [{"name": "fe", "key": FRONTEND, "agents": ["bot"]}]}))
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys)})
    model_server.script(DEFAULT_MODEL, [Reply("sent"), Reply("streamed")])
    auth = {"Authorization": f"Bearer {FRONTEND}"}
    async with (
        running_service(config, environ={}) as service,
        httpx.AsyncClient(headers=auth, timeout=10) as http,
    ):
        base = f"{service.url}/a2a/bot"
        card = await A2ACardResolver(http, base).get_agent_card()
        assert card.model_dump(mode="json", by_alias=True, exclude_none=True) == {
            "name": "bot",
            "description": "Answers over A2A.",
            "version": revision_of(document),
            "url": base,
            "preferredTransport": "JSONRPC",
            "protocolVersion": card.protocol_version,
            "capabilities": {"streaming": True},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain", "application/json"],
            "skills": [
                {
                    "id": "bot",
                    "name": "bot",
                    "description": "Answers over A2A.",
                    "tags": ["dynagent"],
                }
            ],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "security": [{"bearer": []}],
        }

        for streaming, expected in ((False, "sent"), (True, "streamed")):
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(
                card
            )
            events = [e async for e in client.send_message(message("hello"))]
            assert texts(events) == [expected], events
        model_server.assert_complete()

        # Same keys and scopes as the rest of the API.
        async with httpx.AsyncClient() as stranger:
            anonymous = await stranger.get(f"{base}/.well-known/agent-card.json")
        assert anonymous.status_code == 401
        other = await http.post(
            f"{service.url}/a2a/other",
            json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}},
        )
        assert other.status_code == 403

        # Bad JSON-RPC is answered in JSON-RPC's own error shape.
        unknown = await http.post(base, json={"jsonrpc": "2.0", "id": 7, "method": "tasks/x"})
        assert unknown.json() == {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {"code": -32601, "message": "Method not found"},
        }
        broken = await http.post(
            base, content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert broken.json()["error"]["code"] == -32700
        # JSON whose text is not Unicode (an unpaired surrogate) is not a request either.
        unpaired = await http.post(
            base,
            content=b'{"jsonrpc": "2.0", "id": 8, "method": "message/send", "params": '
            b'{"message": {"role": "user", "messageId": "m", "parts": [{"kind": "text", '
            b'"text": "hi \\udc00"}]}}}',
            headers={"Content-Type": "application/json"},
        )
        assert unpaired.json()["error"] == {
            "code": -32700,
            "message": "params.message.parts.0.text holds '\\udc00', which is not valid Unicode",
        }
        # An id that is neither a string nor an integer: -32600 (no id, as for -32700), not
        # a 500 (found by the OpenAPI fuzz once the A2A route was in the document).
        odd = await http.post(base, json={"jsonrpc": "2.0", "id": {"a": 1}, "method": "x"})
        assert (odd.status_code, odd.json()) == (
            200,
            {
                "jsonrpc": "2.0",
                "error": {"code": -32600, "message": "'id' must be a string or an integer"},
            },
        )


async def test_prompt_variables_come_in_the_messages_metadata(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    prompt = {"system": "You help {{team}} at {{company}}.", "variables": {"company": "ACME"}}
    write_agent(agents_dir, agent_document("bot", model_server, prompt=prompt))
    config = service_config(agents_dir, state_dir)
    model_server.script(DEFAULT_MODEL, [Reply("ok")])
    async with running_service(config, environ={}) as service, httpx.AsyncClient() as http:
        base = f"{service.url}/a2a/bot"

        def send(metadata: Any) -> dict[str, Any]:
            params = message("hi").model_dump(mode="json", by_alias=True, exclude_none=True)
            body = {"message": {**params, "metadata": metadata}}
            return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": body}

        answered = await http.post(base, json=send({"variables": {"team": "sales"}}))
        assert answered.json()["result"]["parts"] == [{"kind": "text", "text": "ok"}]
        (request,) = model_server.requests
        assert request["messages"][0] == {"role": "system", "content": "You help sales at ACME."}

        for bad in ({"variables": ["sales"]}, {"variables": {"team": 7}}):
            refused = (await http.post(base, json=send(bad))).json()
            assert refused["error"]["code"] == -32602, refused
            assert "metadata.variables" in refused["error"]["message"]


async def test_the_card_never_names_the_host_a_caller_sent(
    agents_dir: Path, state_dir: Path
) -> None:
    """A card built from the ``Host`` header sent every later caller that read it (or a
    cache in front of it) to the host of the first caller's choosing."""
    write_agent(agents_dir, agent_document("bot"))
    config = service_config(agents_dir, state_dir)
    async with running_service(config, environ={}) as service:
        port = int(service.url.rsplit(":", 1)[1])
        urls = []
        for host in ("evil.example.com", "evil.example.com:8443", "127.0.0.1.evil", "[::1]:1"):
            answer = await service.client.get(
                "/a2a/bot/.well-known/agent-card.json", headers={"Host": host}
            )
            urls.append((await answer.json())["url"])
    assert urls == [f"http://127.0.0.1:{port}/a2a/bot"] * 4


async def test_the_card_names_the_configured_public_url(agents_dir: Path, state_dir: Path) -> None:
    write_agent(agents_dir, agent_document("bot"))
    for key in ("public_url", "url"):  # ``url``: the older name, still read
        config = service_config(
            agents_dir, state_dir, a2a={key: "https://agents.example.com/base/"}
        )
        async with running_service(config, environ={}) as service:
            answer = await service.client.get(
                "/a2a/bot/.well-known/agent-card.json", headers={"Host": "evil.example.com"}
            )
            assert (await answer.json())["url"] == "https://agents.example.com/base/a2a/bot"
