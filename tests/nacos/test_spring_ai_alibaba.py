"""The Spring AI Alibaba layout, as ``NacosReactAgentBuilder`` keeps it in Nacos, served
unchanged: pieces assembled into one revision, changes published together applied
together, new agents pushed, deleted ones tombstoned."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dynagent.config import NacosConfig
from dynagent.nacos.client import content_md5
from dynagent.nacos.saa_factory import ASSEMBLY_WINDOW, SpringAiAlibabaAgentBuilderFactory
from dynagent.nacos.source import NacosSource
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.builder import AgentBuilder
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.first_load import NoticeDuringGroupLoad, fuzzy_watch_works, until_served
from tests.support.nacos import NacosAdmin, NacosServer, invoke, nacos_service_config
from tests.support.process import free_port
from tests.support.service import RunningService, running_service

META = "nacos-ai-meta"


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class SaaAgent:
    """One agent in the Spring AI Alibaba layout, published through the v3 admin API."""

    def __init__(self, nacos: NacosAdmin, name: str, model_server: ScriptedModelServer) -> None:
        self.nacos = nacos
        self.name = name
        self.group = f"ai-agent-{name}"
        self.prompt_key = f"{name}-prompt"
        self.texts: dict[str, str] = {}
        self.model = {
            "baseUrl": model_server.base_url,
            "apiKey": "test",
            "model": DEFAULT_MODEL,
            "temperature": "0.2",
            "maxTokens": "100",
        }

    async def publish(self, data_id: str, value: Any) -> None:
        group = META if data_id.startswith("prompt-") else self.group
        self.texts[f"{group}/{data_id}"] = as_json(value)
        await self.nacos.publish(data_id, group, as_json(value), kind="json")

    async def publish_all(self, template: str) -> None:
        base = {"promptKey": self.prompt_key, "description": "From SAA.", "maxIterations": 3}
        await self.publish("agent-base.json", base)
        await self.publish("model.json", self.model)
        await self.prompt(template)

    async def prompt(self, template: str) -> None:
        value = {"promptKey": self.prompt_key, "version": "1.0.0", "template": template}
        await self.publish(f"prompt-{self.prompt_key}.json", {**value, "variables": []})

    def source(self) -> dict[str, str]:
        """The status ``source``: every dataId of the revision with its md5."""
        return {
            "kind": "nacos",
            "location": f"public/{self.group}",
            "group": self.group,
            **{key: content_md5(text) for key, text in sorted(self.texts.items())},
        }


def asks(system: str, temperature: float) -> Any:
    def check(body: dict[str, Any]) -> None:
        assert body["messages"][0] == {"role": "system", "content": system}
        assert (body["temperature"], body["max_tokens"]) == (temperature, 100)

    return check


def serving_system(service: RunningService, name: str) -> str | None:
    entry = service.registry.entry(name) if name in service.registry else None
    return entry.stable.system_prompt if entry and entry.stable else None


async def test_spring_ai_alibaba_agents_are_served_and_pieces_published_together_apply_together(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    name = f"saa-{uuid.uuid4().hex[:6]}"
    agent = SaaAgent(nacos, name, model_server)
    await agent.publish_all("You are the SAA agent, version one.")
    settings = nacos_settings.model_copy(update={"poll_seconds": 300})  # pushed, not listed
    config = nacos_service_config(
        settings, agents_dir, state_dir, factories={"nacos": False, "spring_ai_alibaba": True}
    )
    model_server.script(
        DEFAULT_MODEL,
        [
            Reply("one", expect=asks("You are the SAA agent, version one.", 0.2)),
            Reply("two", expect=asks("You are the SAA agent, version two.", 0.7)),
        ],
    )
    async with running_service(config) as service:
        await service.registry.wait_for(lambda r: name in r)
        status = await (await service.client.get(f"/v1/agents/{name}")).json()
        source = dict(status["source"])
        assert isinstance(source.pop("since"), float)
        assert source.pop("state") == "live"
        assert (status["state"], status["factory"], status["description"]) == (
            "serving",
            "spring-ai-alibaba",
            "From SAA.",
        )
        assert source == agent.source()
        assert service.registry.get(name).spec.limits.max_steps == 3
        code, body = await invoke(service, name)
        assert (code, body["output"]) == (200, "one")

        # A release touching the model and the prompt: one new revision, never a mix.
        swaps: list[str] = []
        service.registry.listeners.append(
            lambda event: swaps.append(event.kind) if event.name == name else None
        )
        agent.model["temperature"] = "0.7"
        await agent.publish("model.json", agent.model)
        await agent.prompt("You are the SAA agent, version two.")
        await service.registry.wait_for(
            lambda r: serving_system(service, name) == "You are the SAA agent, version two."
        )
        assert swaps == ["swapped"]
        assert service.registry.get(name).spec.model.settings.temperature == 0.7
        code, body = await invoke(service, name)
        assert (code, body["output"]) == (200, "two")
        model_server.assert_complete()

        # A broken piece is refused; the last good revision keeps serving.
        revision = service.registry.get(name).revision
        await nacos.publish("model.json", agent.group, '{"maxTokens": "lots"}', kind="json")
        await service.wait_error(name, "expected a number")
        assert service.registry.get(name).revision == revision

        # A new agent published later is found by push (the list poll is 300 s).
        other = SaaAgent(nacos, f"{name}-b", model_server)
        await other.publish_all("You are the second SAA agent.")
        await service.registry.wait_for(
            lambda r: serving_system(service, other.name) == "You are the second SAA agent."
        )

        # agent-base.json deleted: the agent goes, its 404 says why.
        await nacos.delete("agent-base.json", other.group)
        await service.registry.wait_for(lambda r: other.name not in r)
        missing = await (await service.client.get(f"/v1/agents/{other.name}")).json()
        assert f"deleted in Nacos ({other.group}/agent-base.json)" in missing["error"]["message"]
    assert ASSEMBLY_WINDOW <= 0.5


@pytest.fixture
async def own_namespace(
    nacos_server: NacosServer, nacos_settings: NacosConfig
) -> AsyncIterator[tuple[NacosAdmin, NacosConfig]]:
    """An admin and settings for a namespace of the test's own: the factory serves every
    ``ai-agent-*`` group of its namespace, and another test's agents there would give the
    load the pauses that let the interleavings below right themselves."""
    namespace = f"saa-{uuid.uuid4().hex[:8]}"
    settings = nacos_settings.model_copy(update={"namespace": namespace, "poll_seconds": 300})
    async with NacosAdmin(nacos_server.base_url, namespace) as admin:
        yield admin, settings


async def started_saa_factory(
    settings: NacosConfig, client: NoticeDuringGroupLoad, registry: AgentRegistry
) -> SpringAiAlibabaAgentBuilderFactory:
    factory = SpringAiAlibabaAgentBuilderFactory(AgentBuilder(environ={}), settings)
    await factory.client.close()  # the one it made; the same client, with the ordering forced
    factory.client = client
    try:
        await factory.start(registry)
    except BaseException:
        await factory.stop()
        raise
    return factory


async def published_saa_agent(
    nacos: NacosAdmin, settings: NacosConfig, model_server: ScriptedModelServer
) -> SaaAgent:
    """An agent in the layout, once the server serves every piece of it."""
    await fuzzy_watch_works(settings)
    agent = SaaAgent(nacos, f"saa-{uuid.uuid4().hex[:6]}", model_server)
    await agent.publish_all("You are loaded with the rest.")
    for key, text in agent.texts.items():
        group, data_id = key.split("/")
        await until_served(settings, group, data_id, text)
    return agent


def served_details(agent: SaaAgent) -> dict[str, str]:
    """The ``source.details`` of the revision built from ``agent``'s texts now."""
    return {k: v for k, v in agent.source().items() if k not in ("kind", "location")}


async def test_a_spring_ai_alibaba_agent_is_assembled_whole_before_its_factory_has_started(
    own_namespace: tuple[NacosAdmin, NacosConfig], model_server: ScriptedModelServer
) -> None:
    """The watch on ``ai-agent-*`` announces the agent's pieces while the factory lists the
    groups. That notice used to start the group's load on the side, which the factory's
    start did not wait for; and the notice for ``agent-base.json``, landing while the load
    read it, made the load drop that read. Either way the agent came a moment after the
    factory said started."""
    nacos, settings = own_namespace
    agent = await published_saa_agent(nacos, settings, model_server)
    client = NoticeDuringGroupLoad(settings, agent.group, "agent-base.json")
    registry = AgentRegistry()
    factory = await started_saa_factory(settings, client, registry)
    try:
        assert [entry.name for entry in registry] == [agent.name]
        assert client.handed_over > 0, "the notice must land while the read is in flight"
        served = registry.get(agent.name)
        assert served.system_prompt == "You are loaded with the rest."
        assert dict(served.source.details) == served_details(agent)
    finally:
        await factory.stop()


async def test_a_piece_published_while_the_factory_loads_is_assembled_right_after(
    own_namespace: tuple[NacosAdmin, NacosConfig], model_server: ScriptedModelServer
) -> None:
    """The factory starts serving the versions its load read (the agent is there when it
    says started, not held back for the piece in flight), then the newer piece's push
    makes the next revision.

    The publish is awaited until the server serves it, before the load goes on to announce
    its listeners: reads trail a publish by ~0.1 s, and in that window the announcement met
    the old md5, so the newer piece could only come from the server's change event racing
    the listener's registration (a cold full run timed out there once)."""
    nacos, settings = own_namespace
    agent = await published_saa_agent(nacos, settings, model_server)
    loaded = served_details(agent)

    async def publish_model() -> None:
        agent.model["temperature"] = "0.7"
        await agent.publish("model.json", agent.model)
        await until_served(
            settings, agent.group, "model.json", agent.texts[f"{agent.group}/model.json"]
        )

    client = NoticeDuringGroupLoad(
        settings, agent.group, "agent-base.json", meanwhile=publish_model
    )
    registry = AgentRegistry()
    factory = await started_saa_factory(settings, client, registry)
    try:
        assert [entry.name for entry in registry] == [agent.name]
        assert client.handed_over > 0, "the notice must land while the read is in flight"
        assert dict(registry.get(agent.name).source.details) == loaded
        await registry.wait_for(lambda r: r.get(agent.name).spec.model.settings.temperature == 0.7)
        assert dict(registry.get(agent.name).source.details) == served_details(agent)
    finally:
        await factory.stop()


async def test_a_piece_whose_push_is_late_is_read_before_the_release_is_assembled(
    own_namespace: tuple[NacosAdmin, NacosConfig],
    model_server: ScriptedModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A release publishes ``model.json`` and then the prompt. On a loaded server the
    model's push can trail the prompt's by seconds; the assembly the prompt starts sees
    the server list a newer ``model.json`` and reads it then, instead of waiting for a
    push that may come after the window. Here the group's pushes never come at all, so
    only that read can bring the model in with the prompt."""
    nacos, settings = own_namespace
    agent = await published_saa_agent(nacos, settings, model_server)
    registry = AgentRegistry()
    factory = SpringAiAlibabaAgentBuilderFactory(AgentBuilder(environ={}), settings)
    await factory.start(registry)
    try:
        assert registry.get(agent.name).spec.model.settings.temperature == 0.2
        push = NacosSource._push

        def late(source: NacosSource, item: Any) -> None:
            if source.group != agent.group:
                push(source, item)

        monkeypatch.setattr(NacosSource, "_push", late)
        swaps: list[str] = []
        registry.listeners.append(
            lambda event: swaps.append(event.kind) if event.name == agent.name else None
        )
        agent.model["temperature"] = "0.7"
        await agent.publish("model.json", agent.model)
        await until_served(
            settings, agent.group, "model.json", agent.texts[f"{agent.group}/model.json"]
        )
        await agent.prompt("You are the release after the late push.")
        await registry.wait_for(
            lambda r: r.get(agent.name).system_prompt == "You are the release after the late push."
        )
        assert swaps == ["swapped"]
        assert registry.get(agent.name).spec.model.settings.temperature == 0.7
        assert dict(registry.get(agent.name).source.details) == served_details(agent)
    finally:
        await factory.stop()


async def test_a_refused_piece_never_replaces_the_last_accepted_one_in_the_snapshot(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    """A broken ``model.json`` is refused while the last good revision serves; the
    snapshot keeps the pieces of that revision, so a restart serves it: with Nacos up
    (which holds only the broken piece) beside the refusal, with Nacos down as before."""
    name = f"saa-{uuid.uuid4().hex[:6]}"
    agent = SaaAgent(nacos, name, model_server)
    await agent.publish_all("You are kept on disk.")
    factories = {"nacos": False, "spring_ai_alibaba": True}
    config = nacos_service_config(nacos_settings, agents_dir, state_dir, factories=factories)
    async with running_service(config) as service:
        await service.registry.wait_for(lambda r: name in r)
        revision = service.registry.get(name).revision
        await nacos.publish("model.json", agent.group, '{"maxTokens": "lots"}', kind="json")
        await service.wait_error(name, "expected a number")
        assert service.registry.get(name).revision == revision

    pieces = nacos_settings.snapshot_dir / "public" / agent.group
    assert (pieces / "model.json").read_text() == agent.texts[f"{agent.group}/model.json"]
    async with running_service(config) as service:
        error = await service.wait_error(name, "expected a number")
        assert service.registry.get(name).revision == revision
        assert error["last_error"]["source"] == f"public/{agent.group}"
        model_server.script(DEFAULT_MODEL, [Reply("kept")])
        code, body = await invoke(service, name)
        assert (code, body["revision"], body["output"]) == (200, revision, "kept")
    down = nacos_settings.model_copy(update={"server_addr": f"127.0.0.1:{free_port()}"})
    restarted = nacos_service_config(down, agents_dir, state_dir, factories=factories)
    async with running_service(restarted) as service:
        assert service.registry.get(name).revision == revision
        assert service.registry.entry(name).last_error is None
