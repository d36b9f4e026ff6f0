"""Agents as tools: routed through the registry at call time, within the caller's key
scope, nested under the parent's trace, and stopped by cycles and the depth limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.service import RunningService, agent_document, running_service, service_config

FRONT_KEY = "front-desk-key-0123456789"
WIDE_KEY = "every-agent-key-0123456789"


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        yaml.safe_dump(
            {
                "keys": [
                    {"name": "front", "key": FRONT_KEY, "agents": ["front"]},
                    {"name": "wide", "key": WIDE_KEY},
                ]
            }
        )
    )
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys)})
    async with running_service(config, environ={}) as running:
        yield running


def caller(server: ScriptedModelServer, name: str, calls: str, **limits: Any) -> dict[str, Any]:
    tools = [{"type": "agent", "name": calls, "description": f"Ask {calls}."}]
    extra: dict[str, Any] = {"limits": limits} if limits else {}
    return agent_document(name, server, tools=tools, **extra)


async def serve(service: RunningService, *documents: dict[str, Any]) -> None:
    for document in documents:
        service.write_agent(document)
    names = [d["name"] for d in documents]
    await service.registry.wait_for(
        lambda r: all(n in r and r.entry(n).stable is not None for n in names)
    )


async def invoke(service: RunningService, name: str, key: str = WIDE_KEY) -> dict[str, Any]:
    response = await service.client.post(
        f"/v1/agents/{name}/invoke",
        json={"input": "go"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def trace(service: RunningService, trace_id: str, key: str = WIDE_KEY) -> dict[str, Any]:
    response = await service.client.get(
        f"/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {key}"}
    )
    body: dict[str, Any] = await response.json()
    return body


def results(recorded: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["name"], e["output"]) for e in recorded["events"] if e["type"] == "tool_result"]


async def test_an_agent_answers_through_another_and_its_run_nests_in_the_trace(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    billing = agent_document("billing", model_server, model={"name": "gpt-billing"})
    await serve(service, billing, caller(model_server, "front", "billing"))
    model_server.script(DEFAULT_MODEL, [CallTools([("billing", {"input": "owed?"})]), Reply("ok")])
    model_server.script("gpt-billing", [Reply("You owe 12 EUR.")])
    body = await invoke(service, "front")
    recorded = await trace(service, body["trace_id"])
    assert results(recorded) == [("billing", "You owe 12 EUR.")]
    [nested] = recorded["nested"]
    assert (nested["agent"], nested["caller"], nested["depth"], nested["variant"]) == (
        "billing",
        "front",
        2,
        "stable",
    )
    assert nested["revision"] == service.serving("billing")
    assert [e["type"] for e in nested["events"]] == [
        "run_started",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]
    assert {e["trace_id"] for e in nested["events"]} == {body["trace_id"]}
    offered = model_server.requests_for(DEFAULT_MODEL)[0]["tools"]
    assert offered == [
        {
            "type": "function",
            "function": {
                "name": "billing",
                "description": "Ask billing.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "input": {"type": "string", "description": "What to ask the agent."}
                    },
                    "required": ["input"],
                    "additionalProperties": False,
                },
            },
        }
    ]


async def test_a_key_that_may_not_call_the_agent_cannot_reach_it_through_another(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    billing = agent_document("billing", model_server, model={"name": "gpt-billing"})
    await serve(service, billing, caller(model_server, "front", "billing"))
    model_server.script(DEFAULT_MODEL, [CallTools([("billing", {"input": "owed?"})]), Reply("no")])
    body = await invoke(service, "front", key=FRONT_KEY)
    assert results(await trace(service, body["trace_id"], key=FRONT_KEY)) == [
        ("billing", "TOOL_ERROR: PermissionError: this API key may not call agent 'billing'")
    ]


async def test_a_visible_cycle_is_refused_at_build(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    await serve(service, caller(model_server, "alpha", "beta"))
    service.write_agent(caller(model_server, "beta", "alpha"))
    status = await service.wait_error("beta", "agent tools call each other in a circle")
    assert status["last_error"]["message"].endswith("(tools[alpha]: beta → alpha → beta)")


DEPTH_REFUSED = (
    "TOOL_ERROR: AgentFailed: alpha → beta → gamma → delta would be 4 agents deep; "
    "limits.max_depth of 'gamma' is 3"
)


@pytest.mark.parametrize(
    "limits,delta_answer",
    [({}, DEPTH_REFUSED), ({"max_depth": 4}, "d")],
    ids=["the default of 3", "raised to 4"],
)
async def test_the_depth_limit_stops_a_chain_at_run_time(
    service: RunningService,
    model_server: ScriptedModelServer,
    limits: dict[str, Any],
    delta_answer: str,
) -> None:
    # alpha → beta → gamma is 3 deep; gamma may go on to delta only with max_depth 4.
    delta = agent_document("delta", model_server, model={"name": "gpt-delta"})
    gamma = caller(model_server, "gamma", "delta", **limits)
    gamma["model"]["name"] = "gpt-gamma"
    beta = caller(model_server, "beta", "gamma")
    beta["model"]["name"] = "gpt-beta"
    await serve(service, delta, gamma, beta, caller(model_server, "alpha", "beta"))
    model_server.script(DEFAULT_MODEL, [CallTools([("beta", {"input": "1"})]), Reply("a")])
    model_server.script("gpt-beta", [CallTools([("gamma", {"input": "2"})]), Reply("b")])
    model_server.script("gpt-gamma", [CallTools([("delta", {"input": "3"})]), Reply("c")])
    if delta_answer != DEPTH_REFUSED:
        model_server.script("gpt-delta", [Reply(delta_answer)])
    body = await invoke(service, "alpha")
    recorded = await trace(service, body["trace_id"])
    gamma_run = next(n for n in recorded["nested"] if n["agent"] == "gamma")
    assert results(gamma_run) == [("delta", delta_answer)]
    called = ["delta"] if delta_answer != DEPTH_REFUSED else []
    assert [n["agent"] for n in recorded["nested"]] == [*called, "gamma", "beta"]


async def test_the_called_agent_is_routed_at_call_time_canary_included(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    billing = agent_document("billing", model_server, model={"name": "gpt-billing"})
    await serve(service, billing, caller(model_server, "front", "billing"))
    canary = agent_document("billing", model_server, model={"name": "gpt-canary"})
    service.write_agent({**canary, "rollout": {"weight": 100}}, filename="billing.canary.yaml")
    await service.registry.wait_for(lambda r: r.entry("billing").canary is not None)
    model_server.script(DEFAULT_MODEL, [CallTools([("billing", {"input": "owed?"})]), Reply("ok")])
    model_server.script("gpt-canary", [Reply("The canary says 12 EUR.")])
    body = await invoke(service, "front")
    recorded = await trace(service, body["trace_id"])
    assert results(recorded) == [("billing", "The canary says 12 EUR.")]
    entry = service.registry.entry("billing")
    assert entry.canary is not None
    [nested] = recorded["nested"]
    assert (nested["variant"], nested["revision"]) == ("canary", entry.canary.agent.revision)
