"""The service in-process for tests: agent files on disk, the aiohttp app on a test server.

async with running_service(config) as service:
    service.write_agent(agent_document("bot", model_server))
    await service.wait_serving("bot", revision_of(document))
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from dynagent import Tool, load_spec
from dynagent.config import ServiceConfig
from dynagent.http.app import create_app
from dynagent.http.state import SERVICE
from dynagent.models import ToolDefinition
from dynagent.registry.facade import AgentRegistry

from .agents import model_fields
from .scripted_model import Reply, ScriptedModelServer

Document = dict[str, Any]
FLOOR_MODEL = "floor-model"
"""The model of ``RunningService.answer_floor``'s agent (its requests are counted apart)."""


def agent_document(
    name: str,
    server: ScriptedModelServer | None = None,
    *,
    system: str = "You are a test agent.",
    **fields: Any,
) -> Document:
    """An agent definition: on ``server`` (``api_key: x``) or, without one, the offline model."""
    model = (
        model_fields(server, **{"api_key": "x", **fields.pop("model", {})})
        if server is not None
        else {"provider": "test", **fields.pop("model", {})}
    )
    return {"name": name, "model": model, "prompt": {"system": system}, **fields}


BROKEN_DEFINITIONS: dict[str, tuple[str, str, str]] = {
    "invalid YAML": ("name: bot\nprompt: {system: [unclosed\n", "", "not valid YAML"),
    "unknown field": (
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\ntemprature: 0.2\n",
        "temprature",
        "unknown field 'temprature'",
    ),
    "unknown tool": (
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\ntools: [no_such_tool]\n",
        "tools[no_such_tool]",
        "no tool named 'no_such_tool' is registered",
    ),
}
"""Broken definitions of ``bot``: (text, field path of the error, part of its message)."""


def revision_of(document: Document) -> str:
    """The revision the service will serve for ``document``."""
    return load_spec(document).revision


def write_agent(
    folder: Path, document: Document | str, *, filename: str | None = None, atomic: bool = False
) -> Path:
    """Save an agent file (YAML); ``atomic`` writes a hidden temp file and renames it over."""
    if filename is None:
        assert isinstance(document, dict), "give a filename for raw text"
        filename = f"{document['name']}.yaml"
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path = folder / filename
    if atomic:
        temporary = folder / f".{filename}.tmp"
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def service_config(folder: Path, state: Path, **sections: Any) -> ServiceConfig:
    """A config serving ``folder``, keeping sessions under ``state``; ``sections`` merge over."""
    data: dict[str, Any] = {
        "factories": {"default": {"directory": str(folder)}},
        "sessions": {"store": "sqlite", "path": str(state / "sessions.db")},
    }
    for name, section in sections.items():
        data[name] = {**data.get(name, {}), **section}
    return ServiceConfig.model_validate(data)


@dataclass
class RunningService:
    """The app on aiohttp's test server, and its registry."""

    client: TestClient[web.Request, web.Application]
    app: web.Application
    folder: Path | None

    @property
    def registry(self) -> AgentRegistry:
        return self.app[SERVICE].registry

    @property
    def url(self) -> str:
        return str(self.client.make_url("")).rstrip("/")

    def write_agent(
        self, document: Document | str, *, filename: str | None = None, atomic: bool = False
    ) -> Path:
        assert self.folder is not None
        return write_agent(self.folder, document, filename=filename, atomic=atomic)

    def serving(self, name: str) -> str | None:
        """The revision serving ``name`` now, or None."""
        if name not in self.registry:
            return None
        agent = self.registry.entry(name).stable
        return agent.revision if agent else None

    async def wait_serving(self, name: str, revision: str) -> None:
        await self.registry.wait_for(lambda _: self.serving(name) == revision)

    async def answer_floor(self, server: ScriptedModelServer, runs: int = 5) -> float:
        """The median seconds of a run its model answers at once, through this service over
        HTTP (agent ``floor`` on ``server``'s model ``floor-model``): the unit that a test's
        time bound is counted in, measured in the same run, so that a slower or loaded
        machine moves the bound with the figure."""
        document = agent_document("floor", server, model={"name": FLOOR_MODEL})
        self.write_agent(document)
        await self.wait_serving("floor", revision_of(document))
        server.script(FLOOR_MODEL, [Reply("floor")] * runs)
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            response = await self.client.post("/v1/agents/floor/invoke", json={"input": "hi"})
            assert response.status == 200, await response.text()
            seconds.append(time.perf_counter() - started)
        return statistics.median(seconds)

    async def call(self, method: str, path: str, key: str, body: Any = None) -> tuple[int, Any]:
        """``method path`` with ``key`` as its bearer: the status and the JSON answer."""
        headers = {"Authorization": f"Bearer {key}"}
        async with self.client.request(method, path, json=body, headers=headers) as response:
            return response.status, await response.json()

    async def wait_error(self, name: str, contains: str) -> dict[str, Any]:
        """Wait until ``name`` reports a ``last_error`` whose message contains ``contains``."""

        def failed(registry: AgentRegistry) -> bool:
            error = registry.entry(name).last_error if name in registry else None
            return error is not None and contains in error.message

        await self.registry.wait_for(failed)
        return self.registry.entry(name).status()


@asynccontextmanager
async def running_service(config: ServiceConfig, **options: Any) -> AsyncIterator[RunningService]:
    """``create_app(config, **options)`` served on loopback until the block ends."""
    app = create_app(config, **options)
    async with TestClient(TestServer(app)) as client:
        yield RunningService(client, app, config.factories.default.directory)


@asynccontextmanager
async def bot_service(
    server: ScriptedModelServer, agents: Path, state: Path, **keys: str
) -> AsyncIterator[RunningService]:
    """Agent ``bot`` on ``server``, served with the API keys of ``keys`` (environment
    variable → comma-separated keys, e.g. ``DYNAGENT_API_KEYS``)."""
    write_agent(agents, agent_document("bot", server))
    async with running_service(service_config(agents, state), environ=keys) as running:
        yield running


Replica = Callable[[str], AbstractAsyncContextManager[RunningService]]
"""Starts one replica, by name, of a fleet on one Redis."""

FLEET_KEY, FLEET_OTHER_KEY = "fleet-caller-key-aaaaaaaaaaaa", "fleet-caller-key-bbbbbbbbbbbb"
FLEET_ADMIN = "fleet-admin-key-cccccccccccc"
"""The API keys of ``fleet_replicas``: two callers and an admin."""


def fleet_replicas(
    server: ScriptedModelServer, redis_url: str, agents: Path, states: Path
) -> Replica:
    """Replicas serving agent ``bot`` on ``server``, each with its own state folder under
    ``states``, sharing the Redis at ``redis_url`` (``sessions.store: redis``), with the
    keys ``FLEET_KEY`` and ``FLEET_OTHER_KEY`` and the admin key ``FLEET_ADMIN``."""
    write_agent(agents, agent_document("bot", server))
    sessions = {"store": "redis", "url": redis_url}
    keys = {
        "DYNAGENT_API_KEYS": f"{FLEET_KEY},{FLEET_OTHER_KEY}",
        "DYNAGENT_ADMIN_KEYS": FLEET_ADMIN,
    }

    def start(name: str) -> AbstractAsyncContextManager[RunningService]:
        config = service_config(agents, states / name, sessions=sessions)
        return running_service(config, environ=keys)

    return start


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """``(event, data)`` pairs of a ``text/event-stream`` body; ``data`` parsed as JSON."""
    events: list[tuple[str, Any]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))
        raw = "\n".join(data)
        events.append((name, raw if raw == "[DONE]" else json.loads(raw)))
    return events


@dataclass
class Gate:
    """A code tool (``gate``) that holds a run until the test opens it."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def tool(self) -> Tool:
        async def wait(arguments: dict[str, Any]) -> str:
            self.entered.set()
            await self.opened.wait()
            return "gate opened"

        return Tool.of(
            ToolDefinition("gate", "Waits for the test.", {"type": "object", "properties": {}}),
            wait,
            timeout=30,
        )


__all__ = [
    "FLEET_ADMIN",
    "FLEET_KEY",
    "FLEET_OTHER_KEY",
    "Gate",
    "Replica",
    "RunningService",
    "agent_document",
    "fleet_replicas",
    "parse_sse",
    "revision_of",
    "running_service",
    "service_config",
    "write_agent",
]
