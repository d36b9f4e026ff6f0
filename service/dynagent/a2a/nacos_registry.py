"""The Nacos A2A registry ("Agent Management" in the 3.1 console): every agent's card is
released there and its endpoint registered, through nacos-sdk-python's
``NacosAIService`` (checked against the 3.1.0 server: ``release_agent_card``,
``register_agent_endpoint`` and ``get_agent_card`` over gRPC).

The card's version is the agent's revision: a new revision releases a new card
version (set as latest) and moves the endpoint to it; a removed agent deregisters its
endpoint, and so does the service's shutdown — first thing, before running requests
drain, so that callers resolving through the registry stop finding a stopping service.
Changes are applied one at a time by one task, in the order the registry made them.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loguru import logger
from v2.nacos.ai.model.ai_param import (
    DeregisterAgentEndpointParam,
    GetAgentCardParam,
    RegisterAgentEndpointParam,
    ReleaseAgentCardParam,
)
from v2.nacos.ai.nacos_ai_service import NacosAIService

from dynagent.a2a.card import agent_card
from dynagent.config import NacosConfig, ServiceConfig
from dynagent.deadlines import cancelled
from dynagent.exceptions import ConfigError
from dynagent.nacos._sdk_config import CONNECT_TIMEOUT, sdk_config
from dynagent.nacos.client import NacosUnavailable
from dynagent.registry.events import AgentRemoved, AgentSwapped, RegistryEvent
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent

WITHDRAW_SECONDS = 5.0
"""How long shutdown waits for Nacos to take the endpoints back; past it (Nacos down),
the server drops them itself when this client's connection goes."""


class NacosA2aRegistrar:
    """Keeps the Nacos A2A registry in step with the agents served at ``base_url``."""

    def __init__(self, settings: NacosConfig, base_url: str, work_dir: Path) -> None:
        self.settings = settings
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        self.address = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls = parts.scheme == "https"
        self.prefix = parts.path.rstrip("/")
        self.work_dir = work_dir
        self._service: Any = None
        self._queue: asyncio.Queue[tuple[str, Agent | None] | None] = asyncio.Queue()
        """Changes to apply; None ends the task."""
        self._withdrawn = False
        self._registered: dict[str, str] = {}
        """Agent name → the card version its endpoint is registered under."""
        self._task: asyncio.Task[None] | None = None
        self.released: dict[str, str] = {}
        """Agent name → the card version last released (for status and tests)."""
        self.changed = asyncio.Event()
        """Set (and replaced) after every change applied."""

    async def start(self, agents: list[Agent]) -> None:
        self._service = await _ai_service(self.settings, self.work_dir)
        for agent in agents:
            self.changed_agent(agent.name, agent)
        self._task = asyncio.create_task(self._apply_all(), name="nacos-a2a-registry")

    def changed_agent(self, name: str, agent: Agent | None) -> None:
        """``agent`` now serves ``name`` (None: it went); applied in order, off the caller.
        Ignored once the service is stopping (``withdraw``)."""
        if not self._withdrawn:
            self._queue.put_nowait((name, agent))

    async def _apply_all(self) -> None:
        while (change := await self._queue.get()) is not None:
            name, agent = change
            try:
                await (self._release(agent) if agent is not None else self._deregister(name))
            except Exception as exc:  # the registry must keep going whatever Nacos says
                logger.warning("Nacos A2A registry: updating agent {} failed: {}", name, exc)
            changed, self.changed = self.changed, asyncio.Event()
            changed.set()

    async def _release(self, agent: Agent) -> None:
        url = f"{self.base_url}/a2a/{agent.name}"
        card = agent_card(agent, url)
        await self._service.release_agent_card(
            ReleaseAgentCardParam(agent_card=card, set_as_latest=True)
        )
        if self._registered.get(agent.name) not in (None, agent.revision):
            await self._deregister(agent.name)
        await self._service.register_agent_endpoint(
            RegisterAgentEndpointParam(
                agent_name=agent.name,
                version=agent.revision,
                address=self.address,
                port=self.port,
                path=f"{self.prefix}/a2a/{agent.name}",
                support_tls=self.tls,
            )
        )
        self._registered[agent.name] = agent.revision
        self.released[agent.name] = agent.revision
        logger.info("Nacos A2A registry: agent {} card {} at {}", agent.name, agent.revision, url)

    async def _deregister(self, name: str) -> None:
        version = self._registered.pop(name, None)
        if version is None:
            return
        await self._service.deregister_agent_endpoint(
            DeregisterAgentEndpointParam(
                agent_name=name, version=version, address=self.address, port=self.port
            )
        )
        logger.info(
            "Nacos A2A registry: agent {} card {}: endpoint {}:{} deregistered",
            name,
            version,
            self.address,
            self.port,
        )

    async def withdraw(self) -> None:
        """Deregister every endpoint: the service is stopping. The change being applied
        is finished, those queued are dropped, later ones ignored; bounded by
        ``WITHDRAW_SECONDS``."""
        self._withdrawn = True
        while not self._queue.empty():
            self._queue.get_nowait()
        try:
            async with asyncio.timeout(WITHDRAW_SECONDS):
                if self._task is not None:
                    self._queue.put_nowait(None)
                    await self._task
                for name in list(self._registered):
                    try:
                        await self._deregister(name)
                    except Exception as exc:  # the others still go
                        logger.warning("Nacos A2A registry: deregistering {} failed: {}", name, exc)
        except TimeoutError:
            logger.warning(
                "Nacos A2A registry: no answer within {:g} s; the endpoints of {} go when "
                "this client's connection closes",
                WITHDRAW_SECONDS,
                ", ".join(sorted(self._registered)),
            )
        finally:
            if self._task is not None and not self._task.done():
                await cancelled(self._task)

    async def wait_for(
        self, predicate: Callable[[NacosA2aRegistrar], bool], within: float = 10
    ) -> None:
        async with asyncio.timeout(within):
            while not predicate(self):
                await self.changed.wait()

    async def url_of(self, name: str) -> str:
        """Where agent ``name`` answers now, per the registry (for remote agent tools)."""
        if self._service is None:
            raise NacosUnavailable("the Nacos A2A registry is not connected")
        return await card_url(self._service, name)

    async def stop(self) -> None:
        if not self._withdrawn:
            await self.withdraw()
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.shutdown()
        await asyncio.to_thread(shutil.rmtree, self.work_dir, ignore_errors=True)


async def card_url(service: Any, name: str) -> str:
    """Where agent ``name`` answers now, per its latest card in the Nacos A2A registry."""
    card = await service.get_agent_card(GetAgentCardParam(agent_name=name))
    url = getattr(card, "url", "")
    if not url:
        raise LookupError(f"the Nacos A2A registry has no address for agent {name!r}")
    return str(url)


class NacosA2aDirectory:
    """Finds remote A2A agents in the Nacos A2A registry, connecting on first use (a
    service that never calls one never connects)."""

    def __init__(self, settings: NacosConfig, work_dir: Path) -> None:
        self.settings = settings
        self.work_dir = work_dir
        self._service: Any = None
        self._lock = asyncio.Lock()

    async def url_of(self, name: str) -> str:
        async with self._lock:
            if self._service is None:
                self._service = await _ai_service(self.settings, self.work_dir)
        return await card_url(self._service, name)

    async def aclose(self) -> None:
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.shutdown()
        await asyncio.to_thread(shutil.rmtree, self.work_dir, ignore_errors=True)


async def _ai_service(settings: NacosConfig, work_dir: Path) -> Any:
    """A connected ``NacosAIService``; ``NacosUnavailable`` after ``CONNECT_TIMEOUT``."""
    builder = sdk_config(settings, work_dir)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            return await NacosAIService.create_ai_service(builder.build())
    except Exception as exc:
        raise NacosUnavailable(f"cannot reach the Nacos A2A registry: {exc}") from None


async def start_registrar(
    config: ServiceConfig, registry: AgentRegistry
) -> NacosA2aRegistrar | None:
    """With ``a2a.register``: the Nacos A2A registry told of every agent, now and on
    each change (a ``ConfigError`` when ``a2a.public_url`` is missing)."""
    if not config.a2a.register_:
        return None
    if not config.a2a.public_url:
        raise ConfigError(
            "a2a.register needs a2a.public_url: the address callers reach this service at",
            source="service config",
        )
    work_dir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="dynagent-a2a-"))
    registrar = NacosA2aRegistrar(config.nacos, config.a2a.public_url, work_dir)
    await registrar.start([entry.stable for entry in registry if entry.stable is not None])

    def tell(event: RegistryEvent) -> None:
        if isinstance(event, AgentSwapped) and event.name in registry:
            registrar.changed_agent(event.name, registry.entry(event.name).stable)
        elif isinstance(event, AgentRemoved):
            registrar.changed_agent(event.name, None)

    registry.listeners.append(tell)
    return registrar
