"""Canaries against the real Nacos server: promote and rollback rewrite the dataIds under a
steady load, and prompt canaries of the prompt-only factory (another prompt label) are
routed by weight and guarded like any other canary."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import yaml

from dynagent.config import NacosConfig
from dynagent.registry.canary import picks_canary
from dynagent.registry.entry import Canary
from dynagent.registry.facade import AgentRegistry
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.agents import model_fields
from tests.support.canary import Load, canary_document, canary_filename, canary_revision
from tests.support.nacos import (
    NacosAdmin,
    nacos_service_config,
    nacos_source,
    without_since,
    yaml_text,
)
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    write_agent,
)

V1 = agent_document("bot", system="Version one.")
CANDIDATE = agent_document("bot", system="Candidate.", model={"settings": {"temperature": 0.9}})
CANARY = canary_document(CANDIDATE, weight=50)


def canary_of(registry: AgentRegistry, name: str) -> Canary:
    canary = registry.entry(name).canary
    assert canary is not None
    return canary


async def post(service: RunningService, name: str, action: str) -> tuple[int, Any]:
    response = await service.client.post(f"/v1/agents/{name}/{action}")
    return response.status, await response.json()


async def stored(nacos: NacosAdmin, data_id: str, group: str) -> Any:
    """The parsed content of a dataId, or None when Nacos has no such config."""
    config = await nacos.get(data_id, group)
    return None if config is None else yaml.safe_load(config["content"])


async def test_promote_and_rollback_rewrite_the_dataids_with_requests_in_flight(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    group = nacos_settings.group
    await nacos.publish("bot.agent.yaml", group, yaml_text(V1))
    await nacos.publish("bot.canary.yaml", group, yaml_text(CANARY))
    config = nacos_service_config(
        nacos_settings, agents_dir, state_dir, sessions={"store": "memory"}
    )
    async with running_service(config, environ={}) as service:
        await service.wait_serving("bot", revision_of(V1))
        await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
        assert without_since(service.registry.status("bot")["canary"]["source"]) == nacos_source(
            group, "bot.canary.yaml", yaml_text(CANARY)
        )
        url = f"{service.url}/v1/agents/bot/invoke"
        async with Load(service.client.session, url) as load:
            before = await load.until(30)
            promoted = await post(service, "bot", "promote")
            during_promote = len(load.answers) - before
            assert await stored(nacos, "bot.agent.yaml", group) == CANDIDATE
            assert await nacos.data_ids(group) == ["bot.agent.yaml"]

            before_rollback = await load.until(len(load.answers) + 30)
            rolled_back = await post(service, "bot", "rollback")
            during_rollback = len(load.answers) - before_rollback
            assert await stored(nacos, "bot.agent.yaml", group) == V1
            done = await load.until(len(load.answers) + 30)

    print(
        f"Nacos promote + rollback: {len(load.answers)} requests, {len(load.failures())} failed;"
        f" {during_promote} answered during the promote, {during_rollback} during the rollback"
    )
    assert (promoted[0], promoted[1]["revision"], promoted[1]["canary"]) == (
        200,
        canary_revision(CANARY),
        None,
    )
    assert (rolled_back[0], rolled_back[1]["revision"]) == (200, revision_of(V1))
    assert load.failures() == []
    assert during_promote > 0 and during_rollback > 0
    assert load.revisions() == {revision_of(V1), canary_revision(CANARY)}
    assert {a.revision for a in load.answers[done - 20 :]} == {revision_of(V1)}


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def helper(server: ScriptedModelServer, label: str) -> dict[str, Any]:
    """``helper``: its system prompt is the config ``helper.{label}`` in the prompt group."""
    return {
        "name": "helper",
        "model": model_fields(server, retries=0),
        "prompt": {"ref": {"key": "helper", "label": label}},
        "output": {"schema": SCHEMA, "retries": 0},
    }


def answer_with_the_prompt(body: dict[str, Any]) -> str:
    """A valid answer naming the system prompt, unless the prompt is a broken one."""
    system = body["messages"][0]["content"]
    return "Sure! Happy to help." if "broken" in system else json.dumps({"answer": system})


async def call(service: RunningService, key: str) -> tuple[int, str, Any]:
    """Invoke ``helper`` as caller ``key``: status, the variant that served, the body."""
    response = await service.client.post(
        "/v1/agents/helper/invoke", json={"input": "hi"}, headers={"X-Canary-Key": key}
    )
    body = await response.json()
    if response.status == 200:
        return 200, body["variant"], body
    trace = await service.client.get(f"/v1/traces/{body['error']['trace_id']}")
    return response.status, (await trace.json())["variant"], body


async def test_a_prompt_canary_is_routed_by_weight_and_guarded(
    model_server: ScriptedModelServer,
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    tmp_path: Path,
) -> None:
    prompts = nacos_settings.prompt_group
    await nacos.publish("helper.stable", prompts, "You are the stable helper.", "text")
    await nacos.publish("helper.canary", prompts, "You are the canary helper.", "text")
    model_server.script(DEFAULT_MODEL, [Reply(answer_with_the_prompt)], cycle=True)
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    write_agent(specs_dir, helper(model_server, "stable"))
    canary = canary_document(helper(model_server, "canary"), weight=40, guard={"min_requests": 5})
    canary_path = write_agent(specs_dir, canary, filename=canary_filename("helper")).resolve()
    config = nacos_service_config(
        nacos_settings,
        agents_dir,
        state_dir,
        factories={"nacos": False, "nacos_prompt": {"directory": str(specs_dir)}},
    )
    async with running_service(config, environ={}) as service:
        registry = service.registry
        await registry.wait_for(lambda r: "helper" in r and r.entry("helper").canary is not None)
        source = canary_of(registry, "helper").agent.source.as_dict()
        assert {k: source[k] for k in ("location", "prompt_data_id", "prompt_label")} == {
            "location": str(canary_path),
            "prompt_data_id": "helper.canary",
            "prompt_label": "canary",
        }

        # Routing: each caller where its bucket says, with that variant's prompt.
        keys = [f"caller-{i}" for i in range(200)]
        answers = await asyncio.gather(*(call(service, key) for key in keys))
        assert [(s, v, b["output"]) for s, v, b in answers] == [
            (200, "canary", {"answer": "You are the canary helper."})
            if picks_canary("helper", key, 40)
            else (200, "stable", {"answer": "You are the stable helper."})
            for key in keys
        ]
        share = sum(v == "canary" for _, v, _ in answers) / len(answers)
        print(f"prompt canary share over {len(answers)} callers at weight 40: {share:.1%}")

        # A broken canary prompt: its answers fail the output schema, the guard pulls it.
        before = canary_of(registry, "helper").agent.revision
        await nacos.publish("helper.canary", prompts, "You are the broken helper.", "text")
        await registry.wait_for(lambda r: canary_of(r, "helper").agent.revision != before)
        guarded = await until_pulled(service)
        assert registry.status("helper")["canary"]["pulled"]["reason"] == (
            "error rate 100% over the last 5 requests exceeds 20%"
        )
        assert {(s, v) for s, v, _ in guarded if v == "stable"} == {(200, "stable")}
        assert {(s, v) for s, v, _ in guarded if v == "canary"} == {(422, "canary")}
        after_pull = [await call(service, f"later-{i}") for i in range(30)]
        assert {(s, v) for s, v, _ in after_pull} == {(200, "stable")}

        # A fixed prompt is a new canary revision: serving again, figures from zero.
        pulled = canary_of(registry, "helper").agent.revision
        await nacos.publish("helper.canary", prompts, "You are the fixed helper.", "text")
        await registry.wait_for(lambda r: canary_of(r, "helper").agent.revision != pulled)
        status = registry.status("helper")
        assert (status["canary"]["state"], status["traffic"]["canary"]["requests"]) == (
            "serving",
            0,
        )
        fixed = [await call(service, f"later-{i}") for i in range(30)]
        assert {(s, v, b["output"]["answer"]) for s, v, b in fixed} == {
            (200, "stable", "You are the stable helper."),
            (200, "canary", "You are the fixed helper."),
        }

        # Promote: the spec file now names the canary label, the canary file is gone.
        code, body = await post(service, "helper", "promote")
        assert (code, body["canary"], body["source"]["prompt_label"]) == (200, None, "canary")
        assert sorted(p.name for p in specs_dir.iterdir()) == ["helper.yaml"]
        promoted = yaml.safe_load((specs_dir / "helper.yaml").read_text(encoding="utf-8"))
        assert promoted == helper(model_server, "canary")
        assert {(await call(service, f"later-{i}"))[2]["output"]["answer"] for i in range(10)} == {
            "You are the fixed helper."
        }


async def until_pulled(service: RunningService) -> list[tuple[int, str, Any]]:
    """Callers one after another until the guard pulls the canary; their answers."""
    answers = []
    for i in range(500):
        answers.append(await call(service, f"guarded-{i}"))
        if canary_of(service.registry, "helper").pulled is not None:
            return answers
    raise AssertionError(f"the canary was not pulled after {len(answers)} requests")
