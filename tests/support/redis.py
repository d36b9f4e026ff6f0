"""A real ``redis-server`` for tests and benchmarks, driven by ``scripts/redis.sh``.

    server = RedisServer(free_port(), tmp_path / "redis")
    server.start()
    ...  # sessions.url = server.url
    server.restart()  # the append-only file keeps every committed write
    server.stop()

The ``redis_server`` fixture starts one on a free loopback port for a test and stops it
afterwards; ``redis_sentinel`` starts a replicated set watched by Sentinels
(``RedisSentinelSet``: ``url`` is its ``redis+sentinel://`` URL, ``kill_primary()``).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from .process import free_port

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "redis.sh"
HOST = "127.0.0.1"


@dataclass
class RedisServer:
    port: int
    home: Path

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self, *, clean: bool = False) -> None:
        self._script("start", *(["--clean"] if clean else []))

    def stop(self) -> None:
        self._script("stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        return self._run("status").returncode == 0

    def _script(self, *args: str) -> None:
        done = self._run(*args)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/redis.sh {' '.join(args)} failed:\n{done.stderr}")

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "REDIS_PORT": str(self.port), "REDIS_HOME": str(self.home)}
        return subprocess.run(
            [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server on a free loopback port, stopped after the test."""
    server = RedisServer(free_port(), tmp_path / "redis")
    server.start(clean=True)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class RedisSentinelSet:
    """A primary (``port``), its ``replicas`` (the next ports) and three Sentinels
    (``sentinel_port`` and the next two), from ``scripts/redis.sh sentinel``; small
    Sentinel timeouts, so a killed primary is replaced within seconds. Two replicas: after
    a failover the new primary still has one to acknowledge each session write."""

    port: int
    sentinel_port: int
    home: Path
    replicas: int = 2
    down_after_ms: int = 1000
    failover_timeout_ms: int = 2000
    name: str = "mymaster"
    password: str | None = None
    """Required by every node and Sentinel when set (``REDIS_PASSWORD``)."""

    @property
    def url(self) -> str:
        sentinels = ",".join(f"{HOST}:{self.sentinel_port + i}" for i in range(3))
        if self.password is None:
            return f"redis+sentinel://{sentinels}/{self.name}/0"
        secret = quote(self.password, safe="")
        return f"redis+sentinel://:{secret}@{sentinels}/{self.name}/0?sentinel_password={secret}"

    def start(self, *, clean: bool = False) -> None:
        """Start every node that is not running (a killed one comes back as it was)."""
        self._script("start", *(["--clean"] if clean else []))

    def stop(self) -> None:
        self._script("stop")

    def primary(self) -> int:
        """The port of the primary the Sentinels name now."""
        with redis.Redis(
            host=HOST, port=self.sentinel_port, password=self.password, socket_timeout=5
        ) as sentinel:
            _, port = sentinel.sentinel_get_master_addr_by_name(self.name)
        return int(port)

    def kill_primary(self) -> int:
        """SIGKILL the primary the Sentinels name now (no shutdown, no last write to disk
        beyond what it fsynced); its port."""
        port = self.primary()
        node = "primary" if port == self.port else f"replica-{port - self.port}"
        os.kill(int((self.home / node / "node.pid").read_text().strip()), signal.SIGKILL)
        return port

    def pause_replicas(self, signum: signal.Signals) -> None:
        """SIGSTOP (or SIGCONT) every replica of the primary the Sentinels name now."""
        primary = self.primary()
        for port in range(self.port, self.port + self.replicas + 1):
            if port != primary:
                node = "primary" if port == self.port else f"replica-{port - self.port}"
                os.kill(int((self.home / node / "node.pid").read_text().strip()), signum)

    def _script(self, *args: str) -> None:
        env = {
            **os.environ,
            "REDIS_PORT": str(self.port),
            "REDIS_SENTINEL_PORT": str(self.sentinel_port),
            "REDIS_SENTINEL_HOME": str(self.home),
            "REDIS_MASTER_NAME": self.name,
            "REDIS_REPLICAS": str(self.replicas),
            "REDIS_DOWN_AFTER_MS": str(self.down_after_ms),
            "REDIS_FAILOVER_TIMEOUT_MS": str(self.failover_timeout_ms),
            "REDIS_PASSWORD": self.password or "",
        }
        done = subprocess.run(
            [str(SCRIPT), "sentinel", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/redis.sh sentinel {' '.join(args)} failed:\n{done.stderr}")


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports, below the kernel's ephemeral
    range (20000 to 32767): an outgoing connection never takes one between this check and
    the node's start."""
    for _ in range(200):
        first = random.randrange(20000, 32768 - count)
        if all(_free(first + i) for i in range(count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


@pytest.fixture
def redis_sentinel(tmp_path: Path) -> Iterator[RedisSentinelSet]:
    """A primary, a replica and three Sentinels on free loopback ports, stopped after."""
    nodes = RedisSentinelSet(free_ports(3), free_ports(3), tmp_path / "sentinel")
    try:
        nodes.start(clean=True)
        yield nodes
    finally:
        nodes.stop()
