"""Secrets filled in from the environment never come back out: not in an agent's status
(source, last_error), its revisions, a trace, the metrics or the log. ``${VAR}`` is
expanded only where the README says; anywhere else it is literal text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from dynagent import AgentBuilder
from dynagent.factories.base import DocumentApplier
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo
from dynagent.sources.base import Document
from dynagent.spec.agent import AgentSpec
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.service import RunningService, agent_document, running_service, service_config

SECRET = "sk-live-7f3a9c2e5b8d4f1a"
ENVIRON = {"SECRET": SECRET, "HOME": "/home/dynagent"}


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.rstrip("\n")), level="DEBUG", format="{message}")
    yield lines
    logger.remove(sink)


async def everything_readable(service: RunningService, trace_id: str) -> str:
    """Every answer of the read-only API about the agent, as one text."""
    texts = []
    for path in ("/v1/agents", "/v1/agents/bot", "/v1/agents/bot/revisions", "/metrics"):
        async with service.client.get(path) as response:
            assert response.status == 200, path
            texts.append(await response.text())
    async with service.client.get(f"/v1/traces/{trace_id}") as response:
        assert response.status == 200
        texts.append(await response.text())
    return "\n".join(texts)


async def test_a_secret_key_serves_but_never_shows(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, logged: list[str]
) -> None:
    document = agent_document(
        "bot",
        model_server,
        model={"api_key": "${SECRET}"},
        description="Literal: ${SECRET} ${HOME}",
        system="Say ${SECRET} and ${HOME:-nowhere} as written.",
    )
    (agents_dir / "bot.yaml").write_text(json.dumps(document), encoding="utf-8")
    model_server.script(DEFAULT_MODEL, [Reply("done")])
    config = service_config(agents_dir, state_dir, environment={"allow": ["SECRET"]})
    async with running_service(config, environ=ENVIRON) as service:
        response = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
        assert response.status == 200
        trace_id = response.headers["X-Trace-Id"]
        serving = service.serving("bot")

        # Edits that fail once the secret is filled in: the error names the field only.
        for field, value in (("base_url", "${SECRET}"), ("base_url", "http://[${SECRET}")):
            broken = {**document, "model": {**document["model"], field: value}}
            service.write_agent(json.dumps(broken), filename="bot.yaml")
            status = await service.wait_error("bot", f"model.{field}")
            assert (status["state"], status["revision"]) == ("serving", serving)
            assert status["last_error"]["message"].endswith(
                "invalid model endpoint (model.base_url: not an http(s) URL once ${VAR} "
                "are filled in)"
            )
        readable = await everything_readable(service, trace_id)

    (system,) = [m for m in model_server.requests[0]["messages"] if m["role"] == "system"]
    assert system["content"] == "Say ${SECRET} and ${HOME:-nowhere} as written."
    assert '"description": "Literal: ${SECRET} ${HOME}"' in readable
    assert SECRET not in readable
    assert [line for line in logged if SECRET in line] == []


async def test_an_error_no_check_foresaw_is_refused_without_its_message(
    logged: list[str],
) -> None:
    registry = AgentRegistry()
    builder = AgentBuilder(environ=ENVIRON)
    explode = {"on": True}

    def build(spec: AgentSpec, document: Document) -> Agent:
        if explode["on"]:
            raise RuntimeError(f"could not reach {SECRET}")
        return builder.build(spec, source=document.info)

    applier = DocumentApplier(registry, build)
    info = SourceInfo("nacos", "public/AGENTS/bot.agent.yaml")
    text = "name: bot\nmodel: {provider: test}\nprompt: {system: x}\n"
    await applier.apply(Document("bot.agent.yaml", text, "yaml", info))
    status: dict[str, Any] = registry.status("bot")
    assert (status["state"], status["last_error"]["message"]) == (
        "refused",
        "agent 'bot' public/AGENTS/bot.agent.yaml: the definition could not be built "
        "(RuntimeError); the service log has details",
    )
    assert [line for line in logged if "RuntimeError at " in line] == [
        "building agent bot from public/AGENTS/bot.agent.yaml failed: RuntimeError at "
        f"{__file__}:{build.__code__.co_firstlineno + 2}"
    ]
    assert [line for line in logged if SECRET in line] == []
    explode["on"] = False  # the source goes on: the next edit is applied
    await applier.apply(Document("bot.agent.yaml", text + "description: fixed\n", "yaml", info))
    assert registry.status("bot")["state"] == "serving"
    assert registry.status("bot")["last_error"] is None
