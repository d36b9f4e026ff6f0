"""A real Nacos server for tests and benchmarks, and Nacos's own HTTP admin API.

``NacosServer`` drives ``scripts/nacos.sh`` (a standalone Nacos 3.1 on loopback,
embedded Derby, auth off) with its own port and home, so it never meets a
developer's Nacos on 8848. ``NacosAdmin`` publishes and deletes configs through
the v3 admin API (``/nacos/v3/admin/cs/config``), the way an operator's console
edit reaches the server: nothing of Dynagent's own Nacos code is involved.

    with claimed_port() as port:
        server = NacosServer(port, home)
        server.start(clean=True)
        async with NacosAdmin(server.base_url) as admin:
            await admin.publish("bot.agent.yaml", "AGENTS", text)
        server.stop()
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import yaml

from dynagent.config import NacosConfig, ServiceConfig
from dynagent.nacos.client import content_md5

from .service import Document, RunningService, service_config

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "nacos.sh"
DEFAULT_PORT = 18848
"""Away from 8848/8080, so that a developer's own Nacos does not clash."""
PORT_ENV = "DYNAGENT_TEST_NACOS_PORT"
HOST = "127.0.0.1"
START_TIMEOUT = 240.0
"""A cold start downloads the server with Maven first (~35 s; slow mirrors take longer)."""
OK = {"code": 0, "message": "success", "data": True}
FUZZY_PATTERNS_OPTION = "-Dnacos.config.fuzzy.watch.max.pattern.count=5000"


def nacos_ports(port: int) -> tuple[int, ...]:
    """Every port a server on HTTP ``port`` listens on: HTTP, client gRPC, cluster gRPC, JRaft."""
    return (port, port + 1000, port + 1001, port - 1000)


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((HOST, port)) != 0


@contextmanager
def claimed_port(
    environ: Mapping[str, str] | None = None, *, start: int = DEFAULT_PORT
) -> Iterator[int]:
    """A Nacos HTTP port for the block: ``$DYNAGENT_TEST_NACOS_PORT`` if set; else ``start``
    (18848), or the next set (18858, 18868, …) whose ports are free and that no other process
    on this machine has claimed. The claim (a ``flock`` in the temp dir) keeps two test
    sessions started at the same moment from both choosing the same ports."""
    environ = os.environ if environ is None else environ
    if environ.get(PORT_ENV):
        yield int(environ[PORT_ENV])
        return
    with claimed_ports("nacos", range(start, start + 200, 10), lambda c: (c,)) as (port,):
        yield port


@contextmanager
def claimed_ports(
    name: str, bases: Iterable[int], servers: Callable[[int], tuple[int, ...]]
) -> Iterator[tuple[int, ...]]:
    """The HTTP ports ``servers(base)`` of the first ``base`` whose Nacos ports are all free
    and that no other process on this machine has claimed under ``name`` for the block
    (a ``flock`` in the temp dir)."""
    for base in bases:
        claim = (Path(tempfile.gettempdir()) / f"dynagent-{name}-{base}.lock").open("w")
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            claim.close()
            continue
        with claim:
            ports = servers(base)
            if all(port_free(p) for port in ports for p in nacos_ports(port)):
                yield ports
                return
    raise RuntimeError(f"no free {name} ports in {bases} (a single server: set {PORT_ENV})")


class NacosScriptError(RuntimeError):
    """``scripts/nacos.sh`` failed; the message carries its output."""


@dataclass
class NacosServer:
    """One server started by ``scripts/nacos.sh``: HTTP ``port`` (+1000 gRPC), data in ``home``."""

    port: int
    home: Path
    console_port: int | None = None
    """The console (UI and ``/v3/console/**``) on this port; off when None."""

    @property
    def console_url(self) -> str:
        assert self.console_port is not None, "this server runs without its console"
        return f"http://{HOST}:{self.console_port}"

    @property
    def addr(self) -> str:
        """``host:port`` as Dynagent's ``nacos.server_addr`` (and the SDK) want it."""
        return f"{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/nacos"

    def start(self, *, clean: bool = False) -> float:
        """Start the server and wait until it answers; seconds taken. ``clean`` wipes the data."""
        started = time.monotonic()
        self._script("start", *(["--clean"] if clean else []), timeout=START_TIMEOUT)
        return time.monotonic() - started

    def stop(self) -> float:
        """Stop the server (no-op when it is not running); seconds taken."""
        started = time.monotonic()
        self._script("stop", timeout=90)
        return time.monotonic() - started

    def running(self) -> bool:
        return self._script("status", check=False, timeout=30).returncode == 0

    def listening(self) -> list[int]:
        """The server's ports that still accept connections (empty once it is down)."""
        ports = (*nacos_ports(self.port), *([self.console_port] if self.console_port else []))
        return [p for p in ports if not port_free(p)]

    async def astart(self) -> float:
        """``start()`` off the event loop, so the service under test keeps running meanwhile."""
        return await asyncio.to_thread(self.start)

    async def astop(self) -> float:
        return await asyncio.to_thread(self.stop)

    @asynccontextmanager
    async def stopped(self) -> AsyncIterator[NacosServer]:
        """The server is down inside the block (same data, same ports); it is running again
        after it, whatever happened inside, unless the block already started it."""
        await self.astop()
        try:
            yield self
        finally:
            if not await asyncio.to_thread(self.running):
                await self.astart()

    def environ(self) -> dict[str, str]:
        """What ``scripts/nacos.sh`` needs to find this server (``start`` is then a no-op)."""
        return {
            "NACOS_PORT": str(self.port),
            "NACOS_CONSOLE": "1" if self.console_port else "0",
            **({"NACOS_CONSOLE_PORT": str(self.console_port)} if self.console_port else {}),
            # Fuzzy watch patterns are capped server-wide (default 20, kept after their
            # clients leave); every test watches a group of its own.
            "NACOS_JAVA_OPTS": " ".join(
                (os.environ.get("NACOS_JAVA_OPTS", ""), FUZZY_PATTERNS_OPTION)
            ).strip(),
            "NACOS_HOME": str(self.home),
        }

    def _script(
        self, *args: str, check: bool = True, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(SCRIPT), *args],
            env={**os.environ, **self.environ()},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise NacosScriptError(
                f"scripts/nacos.sh {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout}{done.stderr}"
            )
        return done


class NacosAdmin:
    """Nacos's v3 admin HTTP API for configs: what an operator or CI tool would call."""

    def __init__(self, base_url: str, namespace: str = "") -> None:
        self.base_url = base_url
        self.namespace = namespace or "public"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> NacosAdmin:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use NacosAdmin in 'async with'"
        return self._session

    async def publish(
        self, data_id: str, group: str, content: str, kind: str = "yaml", *, tag: str = ""
    ) -> None:
        """Create or replace a config (``POST /v3/admin/cs/config``); with ``tag``, its tag
        gray version (served to clients whose connection label ``Vipserver-Tag`` is it)."""
        form = {
            "dataId": data_id,
            "groupName": group,
            "namespaceId": self.namespace,
            "content": content,
            "type": kind,
            **({"tag": tag} if tag else {}),
        }
        async with self.session.post(self._url, data=form) as response:
            body = await response.json(content_type=None)
        assert (response.status, body) == (200, OK), f"publishing {group}/{data_id}: {body}"

    async def delete(self, data_id: str, group: str, *, tag: str = "") -> None:
        """Delete a config; with ``tag``, only its tag gray version (the gray stops). The
        3.1 admin API takes the gray's *name* in ``tag`` (``tag_{tag}``, as the publish
        stored it); the bare tag fails there with a NullPointerException message."""
        params = {**self._key(data_id, group), **({"tag": f"tag_{tag}"} if tag else {})}
        async with self.session.delete(self._url, params=params) as response:
            body = await response.json(content_type=None)
        assert (response.status, body) == (200, OK), f"deleting {group}/{data_id}: {body}"

    async def get(self, data_id: str, group: str) -> dict[str, Any] | None:
        """The stored config (content, md5, type, …), or None when there is none."""
        async with self.session.get(self._url, params=self._key(data_id, group)) as response:
            body = await response.json(content_type=None)
        if response.status == 404:
            return None
        assert response.status == 200 and body["code"] == 0, body
        data: dict[str, Any] = body["data"]
        return data

    async def data_ids(self, group: str) -> list[str]:
        """Every dataId in ``group``, sorted (first 500)."""
        params = {
            "groupName": group,
            "namespaceId": self.namespace,
            "dataId": "",
            "pageNo": "1",
            "pageSize": "500",
        }
        async with self.session.get(self._url + "/list", params=params) as response:
            body = await response.json(content_type=None)
        assert response.status == 200 and body["code"] == 0, body
        return sorted(item["dataId"] for item in body["data"]["pageItems"])

    @property
    def _url(self) -> str:
        return f"{self.base_url}/v3/admin/cs/config"

    def _key(self, data_id: str, group: str) -> dict[str, str]:
        return {"dataId": data_id, "groupName": group, "namespaceId": self.namespace}


def yaml_text(document: Document) -> str:
    return yaml.safe_dump(document, sort_keys=False)


def nacos_source(
    group: str,
    data_id: str,
    text: str,
    namespace: str = "public",
    state: str | None = "live",
    **details: str,
) -> dict[str, str]:
    """The ``source`` an agent's status shows for a Nacos config of ``text`` (its ``since``
    left out, see ``without_since``); ``state=None``: as a trace shows it, with no state."""
    source = {
        "kind": "nacos",
        "location": f"{namespace}/{group}/{data_id}",
        "namespace": namespace,
        "group": group,
        "data_id": data_id,
        "md5": content_md5(text),
        **details,
    }
    if state is not None:
        source["state"] = state
    return source


def without_since(source: dict[str, Any] | None) -> dict[str, Any] | None:
    """A status ``source`` without the time its state began (checked to be one)."""
    if source is None or "since" not in source:
        return source
    rest = dict(source)
    assert isinstance(rest.pop("since"), float)
    return rest


STATUS_KEYS = ("name", "state", "revision", "description", "source", "factory", "last_error")


async def status_of(
    service: RunningService, name: str, *, keep_since: bool = False
) -> dict[str, Any]:
    """``GET /v1/agents/{name}``: what says where the agent comes from and whether it is healthy
    (``last_error.at`` checked and taken out; traffic and revision history left aside)."""
    response = await service.client.get(f"/v1/agents/{name}")
    assert response.status == 200, await response.text()
    status = await response.json()
    if status["last_error"] is not None:
        assert isinstance(status["last_error"].pop("at"), float)
    if not keep_since:
        status["source"] = without_since(status["source"])
    return {key: status[key] for key in STATUS_KEYS}


async def invoke(service: RunningService, name: str, text: str = "hi") -> tuple[int, Any]:
    """``POST /v1/agents/{name}/invoke``: the HTTP status and the JSON body."""
    response = await service.client.post(f"/v1/agents/{name}/invoke", json={"input": text})
    assert response.content_type == "application/json"
    return response.status, await response.json()


def nacos_service_config(
    settings: NacosConfig, agents_dir: Path, state_dir: Path, **sections: Any
) -> ServiceConfig:
    """The service with the full-agent Nacos factory on ``settings`` (and ``agents_dir`` for
    the default factory); ``sections`` merge over."""
    factories = {"nacos": True, **sections.pop("factories", {})}
    return service_config(
        agents_dir,
        state_dir,
        factories=factories,
        nacos=settings.model_dump(mode="json"),
        **sections,
    )


__all__ = [
    "DEFAULT_PORT",
    "PORT_ENV",
    "STATUS_KEYS",
    "NacosAdmin",
    "NacosScriptError",
    "NacosServer",
    "claimed_port",
    "claimed_ports",
    "invoke",
    "nacos_ports",
    "nacos_service_config",
    "nacos_source",
    "status_of",
    "without_since",
    "yaml_text",
]
