"""A ``type: agent`` tool calling a remote Dynagent over A2A with credentials: the entry's
``headers`` (``${VAR}`` from the environment allow-list) go with the card fetch and the
message, a missing or wrong token is a ``TOOL_ERROR`` naming the 401, and the token
never surfaces in events, traces, status or logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from dynagent import ConfigError, load_spec
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.service import (
    agent_document,
    parse_sse,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

TOKEN = "billing-a2a-token-0123456789abcdef"
WRONG = "not-the-billing-token-0123456789"
ECHO = "[test model] you said: how much? | prompt: You are a test agent."


def tool(name: str, url: str, token_variable: str | None) -> dict[str, Any]:
    # The remote service listens on loopback: reached only because the entry allows it.
    entry: dict[str, Any] = {
        "type": "agent",
        "name": name,
        "a2a": {"url": url},
        "allow_private": True,
    }
    if token_variable is not None:
        entry["headers"] = {"Authorization": f"Bearer ${{{token_variable}}}"}
    return entry


async def test_a_remote_dynagent_behind_auth_is_called_with_the_entrys_token_and_never_shows_it(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    remote_dir, caller_dir = tmp_path / "remote", tmp_path / "caller"
    for folder in (remote_dir, caller_dir):
        folder.mkdir()
    write_agent(remote_dir, agent_document("billing"))  # the offline model: it echoes
    remote_config = service_config(
        remote_dir, tmp_path / "remote-state", auth={"keys_env": "REMOTE_KEYS"}
    )
    caller_config = service_config(
        caller_dir,
        tmp_path / "caller-state",
        environment={"allow": ["BILLING_A2A_TOKEN", "WRONG_A2A_TOKEN"]},
    )
    caller_environ = {"BILLING_A2A_TOKEN": TOKEN, "WRONG_A2A_TOKEN": WRONG}
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG")
    try:
        async with (
            running_service(remote_config, environ={"REMOTE_KEYS": TOKEN}) as remote,
            running_service(caller_config, environ=caller_environ) as service,
        ):
            endpoint = f"{remote.url}/a2a/billing"
            card = f"{endpoint}/.well-known/agent-card.json"
            tools = {
                "billing": (endpoint, "BILLING_A2A_TOKEN"),
                "billing-card": (card, "BILLING_A2A_TOKEN"),
                "billing-anonymous": (endpoint, None),
                "billing-wrong": (endpoint, "WRONG_A2A_TOKEN"),
                "card-anonymous": (card, None),
            }
            front = agent_document(
                "front",
                model_server,
                tools=[tool(name, *target) for name, target in tools.items()],
            )
            service.write_agent(front)
            await service.wait_serving("front", revision_of(front))
            calls = [(name, {"input": "how much?"}) for name in tools]
            model_server.script(DEFAULT_MODEL, [CallTools(calls), Reply("done")])
            response = await service.client.post(
                "/v1/agents/front/invoke", json={"input": "ask billing", "stream": True}
            )
            events = [data for _, data in parse_sse(await response.text())]
            trace_id = events[0]["trace_id"]
            trace = await (await service.client.get(f"/v1/traces/{trace_id}")).json()
            status = await (await service.client.get("/v1/agents/front")).json()
            definition = await service.client.get(
                f"/v1/agents/front/revisions/{revision_of(front)}"
            )
            shown = await definition.json()
    finally:
        logger.remove(sink)

    refused = "answered HTTP 401 Unauthorized; check the tool's headers"
    results = {e["name"]: e["output"] for e in trace["events"] if e["type"] == "tool_result"}
    assert results == {  # the calls run side by side: their order is the model's, not theirs
        "billing": ECHO,
        "billing-card": ECHO,
        "billing-anonymous": f"TOOL_ERROR: ToolCallError: A2A agent at {endpoint} {refused}",
        "billing-wrong": f"TOOL_ERROR: ToolCallError: A2A agent at {endpoint} {refused}",
        "card-anonymous": f"TOOL_ERROR: ToolCallError: A2A agent card at {card} {refused}",
    }
    assert events[-1]["type"] == "run_finished"
    assert shown["definition"]["tools"][0]["headers"] == {"Authorization": "***"}
    for text in (*lines, json.dumps(events), json.dumps(trace), json.dumps(status)):
        assert TOKEN not in text
        assert WRONG not in text


def test_headers_on_an_agent_tool_of_this_service_are_refused() -> None:
    """A local agent is called in-process: headers there would go nowhere, silently."""
    entry = {"type": "agent", "name": "billing", "headers": {"Authorization": "Bearer x"}}
    with pytest.raises(ConfigError) as refused:
        load_spec(agent_document("front", tools=[entry]))
    assert [(i.path, i.message) for i in refused.value.issues] == [
        ("tools[billing]", "Value error, 'headers' go with 'a2a' only (a remote agent)")
    ]
