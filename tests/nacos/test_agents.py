"""The full-agent factory over HTTP: whole specs published in Nacos (v3 admin API, as an
operator's console edit), served, changed, refused, added and deleted without a restart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dynagent import Tool, ToolRegistry
from dynagent.config import NacosConfig
from dynagent.models import ToolDefinition
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.nacos import (
    NacosAdmin,
    invoke,
    nacos_service_config,
    nacos_source,
    status_of,
    yaml_text,
)
from tests.support.service import BROKEN_DEFINITIONS, agent_document, revision_of, running_service


def serving(name: str, revision: str, source: dict[str, str], error: Any = None) -> Any:
    """The status of an agent from the Nacos factory."""
    return {
        "name": name,
        "state": "serving",
        "revision": revision,
        "description": "",
        "source": source,
        "factory": "nacos",
        "last_error": error,
    }


def system_prompt_is(text: str) -> Any:
    def check(body: dict[str, Any]) -> None:
        assert body["messages"][0] == {"role": "system", "content": text}

    return check


async def test_a_published_agent_is_served_and_a_prompt_change_reaches_the_next_request(
    model_server: ScriptedModelServer,
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    group = nacos_settings.group
    first = agent_document("bot", model_server, system="You are version one.")
    second = agent_document("bot", model_server, system="You are version two.")
    model_server.script(
        DEFAULT_MODEL,
        [
            Reply("one", expect=system_prompt_is("You are version one.")),
            Reply("two", expect=system_prompt_is("You are version two.")),
        ],
    )
    await nacos.publish("bot.agent.yaml", group, yaml_text(first))
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    async with running_service(config) as service:
        await service.wait_serving("bot", revision_of(first))
        code, body = await invoke(service, "bot", "hello")
        assert code == 200, body
        trace_id, usage = body.pop("trace_id"), body.pop("usage")
        assert isinstance(trace_id, str) and trace_id
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0
        assert body == {
            "output": "one",
            "agent": "bot",
            "revision": revision_of(first),
            "variant": "stable",
            "session_id": None,
            "steps": 1,
        }

        await nacos.publish("bot.agent.yaml", group, yaml_text(second))
        await service.wait_serving("bot", revision_of(second))
        code, body = await invoke(service, "bot", "hello again")
        assert (code, body["output"], body["revision"]) == (200, "two", revision_of(second))

        # Status and trace both say where the serving definition came from.
        source = nacos_source(group, "bot.agent.yaml", yaml_text(second))
        assert await status_of(service, "bot") == serving("bot", revision_of(second), source)
        trace = await (await service.client.get(f"/v1/traces/{body['trace_id']}")).json()
        assert {k: trace[k] for k in ("agent", "revision", "factory", "source")} == {
            "agent": "bot",
            "revision": revision_of(second),
            "factory": "nacos",
            "source": nacos_source(group, "bot.agent.yaml", yaml_text(second), state=None),
        }


BROKEN = BROKEN_DEFINITIONS


@pytest.mark.parametrize("broken", BROKEN.values(), ids=list(BROKEN))
async def test_a_broken_definition_is_refused_and_the_last_good_revision_keeps_serving(
    broken: tuple[str, str, str],
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    text, field, message = broken
    group = nacos_settings.group
    good = agent_document("bot", system="Good prompt.")
    fixed = agent_document("bot", system="Fixed prompt.")
    await nacos.publish("bot.agent.yaml", group, yaml_text(good))
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    async with running_service(config) as service:
        await service.wait_serving("bot", revision_of(good))

        await nacos.publish("bot.agent.yaml", group, text)
        await service.wait_error("bot", message)
        status = await status_of(service, "bot")
        assert message in status["last_error"].pop("message")
        assert status == serving(
            "bot",
            revision_of(good),
            nacos_source(group, "bot.agent.yaml", yaml_text(good)),
            {"source": f"public/{group}/bot.agent.yaml", "path": field},
        )
        code, body = await invoke(service, "bot")
        assert (code, body["revision"]) == (200, revision_of(good))

        await nacos.publish("bot.agent.yaml", group, yaml_text(fixed))
        await service.wait_serving("bot", revision_of(fixed))
        assert await status_of(service, "bot") == serving(
            "bot", revision_of(fixed), nacos_source(group, "bot.agent.yaml", yaml_text(fixed))
        )


async def test_agents_added_to_the_group_are_served_and_deleted_ones_are_gone(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    group = nacos_settings.group
    first = agent_document("first")
    second = agent_document("second", description="Published while serving.")
    await nacos.publish("first.agent.yaml", group, yaml_text(first))
    # Not an agent document: the factory leaves it alone.
    await nacos.publish("notes.txt", group, "not an agent", "text")
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    async with running_service(config) as service:
        await service.wait_serving("first", revision_of(first))

        published = time.perf_counter()
        await nacos.publish("second.agent.yaml", group, yaml_text(second))
        await service.registry.wait_for(
            lambda _: service.serving("second") == revision_of(second), within=10
        )
        print(f"new agent served {time.perf_counter() - published:.2f} s after its publish")
        listed = await (await service.client.get("/v1/agents")).json()
        assert [a["name"] for a in listed["agents"]] == ["first", "second"]
        code, body = await invoke(service, "second", "hello")
        assert (code, body["agent"], body["output"]) == (
            200,
            "second",
            "[test model] you said: hello | prompt: You are a test agent.",
        )

        await nacos.delete("first.agent.yaml", group)
        await service.registry.wait_for(lambda registry: "first" not in registry, within=10)
        code, body = await invoke(service, "first")
        assert (code, body["error"]["type"]) == (404, "not_found")
        assert (await service.client.get("/v1/agents/first")).status == 404
        listed = await (await service.client.get("/v1/agents")).json()
        assert [a["name"] for a in listed["agents"]] == ["second"]


def order_tool(calls: list[dict[str, Any]]) -> Tool:
    async def lookup(arguments: dict[str, Any]) -> str:
        calls.append(arguments)
        return f"order {arguments['order_id']}: shipped"

    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    }
    return Tool.of(ToolDefinition("lookup_order", "Finds an order by id.", schema), lookup)


async def test_a_remote_spec_uses_tools_registered_in_code(
    model_server: ScriptedModelServer,
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    calls: list[dict[str, Any]] = []

    def saw_tool_result(body: dict[str, Any]) -> None:
        assert body["messages"][-1]["role"] == "tool"
        assert body["messages"][-1]["content"] == "order 42: shipped"

    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([("lookup_order", {"order_id": "42"})]),
            Reply("shipped", expect=saw_tool_result),
        ],
    )
    document = agent_document("orders", model_server, tools=["lookup_order", "calculator"])
    await nacos.publish("orders.agent.yaml", nacos_settings.group, yaml_text(document))
    tools = ToolRegistry.default({"lookup_order": order_tool(calls)})
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    async with running_service(config, tools=tools) as service:
        await service.wait_serving("orders", revision_of(document))
        code, body = await invoke(service, "orders", "where is order 42?")
        assert (code, body["output"], body["steps"]) == (200, "shipped", 2)
    assert calls == [{"order_id": "42"}]
    # The model was offered the code tool and the built-in one the spec names.
    offered = [tool["function"]["name"] for tool in model_server.requests[0]["tools"]]
    assert sorted(offered) == ["calculator", "lookup_order"]
